"""The batches a DataLoader's workers hold ready: the backlog that makes a loader-bound loop look fast.

While a loop warms up (cuDNN autotuning, graph capture, worker start-up), its
workers fill their queues: up to num_workers x prefetch_factor batches. A loop
that then drains that backlog runs at the speed of its step, not of its loader,
for as long as the backlog lasts, and reads several times faster than a hand loop
(docs/measuring.md, "How it measures", has the run).

``capacity`` is how many batches a loader can hold ready; ``ready`` is how many
it holds now; ``in_flight`` how many its workers are still making. They read the
iterator of ``torch.utils.data.DataLoader`` (its result queues, the batches it
keeps for in-order delivery, its count of outstanding tasks): PyTorch has no
public way to ask. Where those are not there (another loader, another torch),
they say None and the measurement falls back to skipping the backlog and
waiting for the loop to run dry. A loader that wraps a DataLoader (the device
decode path's) gives its iterator a ``source``: the DataLoader iterator under it.

``end_epoch`` ends an epoch early the way a real one ends: the sampler has no
more indices, so the workers stop once they have made what they were given. A
measurement that times an epoch's start-up without running the whole epoch
calls it, then takes what is left: a new epoch's iterator started over the old
one would wait for every batch still in the making, then receive (and pin) and
throw away every batch held ready, which at a real epoch's end were used, not
waited for: such a start costs more than a real one (docs/measuring.md has the
timings). Where an epoch cannot be ended so, ``settle`` at
least waits for the workers to finish what they were given.
"""

from __future__ import annotations

import time
from typing import Any


def capacity(loader: Any) -> int:
    """Batches `loader`'s workers may hold ready: num_workers x prefetch_factor; 0 without workers."""
    workers = getattr(loader, "num_workers", 0) or 0
    if workers <= 0:
        return 0
    return workers * (getattr(loader, "prefetch_factor", None) or 2)


def source(iterator: Any) -> Any:
    """The DataLoader iterator under `iterator`: itself, or what a wrapping loader's iterator names `source`."""
    return getattr(iterator, "source", iterator)


def worker_pids(iterator: Any) -> list[int] | None:
    """The process ids of a DataLoader iterator's workers; None without workers, or where they cannot be told."""
    workers = getattr(source(iterator), "_workers", None)
    return [w.pid for w in workers] if workers else None


def _queued(iterator: Any) -> int:
    """Batches made and delivered to the iterator's queues, not yet received by the loop's process."""
    queues = [iterator._data_queue]
    if getattr(iterator, "_pin_memory", False):
        # Results wait in the workers' queue until the pinning thread moves them to the data queue.
        queues.append(iterator._worker_result_queue)
    return int(sum(q.qsize() for q in queues))


def ready(iterator: Any) -> int | None:
    """Batches a DataLoader iterator has ready that the loop has not taken yet; None where it cannot be told."""
    iterator = source(iterator)
    try:
        waiting = _queued(iterator)
        # Batches that arrived out of order are kept until their turn.
        kept = sum(1 for info in iterator._task_info.values() if len(info) == 2)
    except (AttributeError, NotImplementedError, TypeError):  # not a multi-process DataLoader iterator, or no qsize
        return None
    return waiting + kept


def end_epoch(iterator: Any) -> int | None:
    """Give the workers no more of this epoch; the batches still to come, None where it cannot be done."""
    iterator = source(iterator)
    try:
        left = len(iterator._task_info)  # given to a worker, not yet to the loop (kept, or still in the making)
    except (AttributeError, TypeError):
        return None
    iterator._sampler_iter = iter(())  # where each next batch's indices come from
    return left


def in_flight(iterator: Any) -> int | None:
    """Batches the workers were given and have not delivered yet; None where it cannot be told."""
    iterator = source(iterator)
    try:
        # Outstanding: given to a worker and not yet received; some of them already wait in the queues.
        return max(0, int(iterator._tasks_outstanding) - _queued(iterator))
    except (AttributeError, NotImplementedError, TypeError):
        return None


def settle(iterator: Any, timeout_s: float = 120.0, poll_s: float = 0.005) -> bool:
    """Wait until the workers have made every batch they were given; False where it cannot be told or took longer."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = in_flight(iterator)
        if left is None:
            return False
        if left == 0:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
