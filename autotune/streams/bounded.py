"""A bounded part of a stream, to make whole passes over: a fixed subset of its shards.

A change of worker count reorders a stream; whether it also loses or repeats samples shows only over a whole pass,
and a whole pass of a large stream takes as long as an epoch. So the pass check (``autotune.streams.passes``) reads
a part of it: for webdataset, its first shards through the pipeline's stages up to where samples are grouped by key,
not decoded (each sample's ``__key__`` is all the check needs, and reading a tar file costs a fraction of decoding
its images); for a Hugging Face stream, its first shards (``IterableDataset.shard``). Either splits across workers as
the whole stream does. A stream of another kind has no part autotune can bound: it is read as it is.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from autotune.streams import sources

GROUPED = "group_by_keys"  # the webdataset stage after which a sample is a dict of its files, with its __key__
# Stages after the grouping that pass a sample on whole: a shuffle buffer, which the part keeps, so that it yields
# its samples in the order the stream does (``autotune.streams.passes.reorders``), and the check that a worker got a
# shard, which it leaves out (the pass check judges a worker that gets none, rather than stopping at it).
SHUFFLE, EMPTY_CHECK = "_shuffle", "check_empty"


@dataclasses.dataclass(frozen=True)
class Part:
    """A bounded part of a stream, and what it is."""

    dataset: Any
    shards: int
    what: str  # e.g. "its first 8 of 64 shards, read without decoding"


def part(dataset: Any, shards_wanted: int) -> Part | None:
    """A part of `dataset` of about `shards_wanted` shards (at least one), or None where none can be made."""
    which = sources.kind(dataset)
    if which == sources.WEBDATASET:
        return _webdataset_part(dataset, shards_wanted)
    if which == sources.HUGGING_FACE:
        return _hugging_face_part(dataset, shards_wanted)
    return None


def _webdataset_part(dataset: Any, shards_wanted: int) -> Part | None:
    import webdataset as wds

    listed = sources.shard_list(dataset)
    stages = list(getattr(dataset, "pipeline", []))
    grouped = next((i for i, s in enumerate(stages) if _name(s) == GROUPED), None)
    if listed is None or grouped is None:
        return None
    n = max(1, min(shards_wanted, len(listed.urls)))
    end = grouped + 1
    while end < len(stages) and _name(stages[end]) in (SHUFFLE, EMPTY_CHECK):
        end += 1
    # The stages between the shard list and the grouping (node and worker splitters, shard shuffle, open, expand),
    # and the shuffle buffer after it.
    kept = [s for s in stages[1:end] if _name(s) != EMPTY_CHECK]
    head = wds.DataPipeline(wds.SimpleShardList(list(listed.urls[:n])), *kept)
    return Part(head, n, f"its first {n} of {len(listed.urls)} shards, read up to their samples' keys, not decoded")


def _name(stage: Any) -> str:
    """A webdataset stage's function name: a filter's (``_shuffle``), or a plain function's (``check_empty``)."""
    return getattr(getattr(stage, "f", None), "__name__", "") or getattr(stage, "__name__", "")


def _hugging_face_part(dataset: Any, shards_wanted: int) -> Part | None:
    total = sources.shards(dataset)
    if not total:
        return None
    pieces = max(1, total // max(1, shards_wanted))  # shard(pieces, 0): the first total // pieces shards
    if pieces == 1:
        return Part(dataset, total, f"all {total} of its shards")
    head = dataset.shard(num_shards=pieces, index=0, contiguous=True)
    n = sources.shards(head) or total // pieces
    return Part(head, n, f"its first {n} of {total} shards")
