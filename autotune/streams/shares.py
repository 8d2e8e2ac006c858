"""How a stream's shards fall to its DataLoader workers, and what that costs each pass.

A stream splits by whole shards (webdataset's ``split_by_worker``, a Hugging Face stream's shards, a user's
``get_worker_info()``): with 64 shards, 15 workers read 5 shards (4 of them) or 4 (the other 11). Each worker
reads its own at the same pace, so the pass lasts as long as the busiest worker's share, and its last shard is
read by the few workers that have one left. A loader's rate within a pass (every worker busy) overstates its
rate over passes by the busiest worker's share over the mean one: 16 workers of 4 shards each make a pass of 64
shards in 4 shards' time, 15 workers in 5.
"""

from __future__ import annotations

import math

from autotune.knobs import DataFacts


def pass_share(workers: int, shards: int | None) -> float:
    """The loader's rate over whole passes over its rate within one, where `workers` split `shards` whole shards
    of equal size: the mean share over the busiest one. 1 where nothing is known or one process reads them all.

    >>> pass_share(16, 64), round(pass_share(15, 64), 3), pass_share(0, 64), pass_share(15, None)
    (1.0, 0.853, 1.0, 1.0)
    """
    if not shards or workers <= 1 or workers > shards:  # more workers than shards: ruled out before any trial
        return 1.0
    return shards / workers / math.ceil(shards / workers)


def shards_per_rank(facts: DataFacts) -> int | None:
    """The shards each rank's workers split: a stream's, over its ranks; None for a data set read by index, or a
    stream that does not say."""
    if not facts.stream or not facts.shards:
        return None
    return max(1, facts.shards // max(1, facts.world_size))
