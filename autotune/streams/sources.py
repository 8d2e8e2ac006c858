"""What kind of stream a data set is, and what it says of itself: its shards and its length.

Shards bound the DataLoader's workers: a webdataset worker reads whole shards (``split_by_worker``), and a Hugging
Face stream stops the workers it has no shard for, so a worker beyond the shards reads nothing. A user's own stream
may say how many shards it has with a ``num_shards`` attribute; without one, its workers are bounded by the cores
only.
"""

from __future__ import annotations

import tarfile
from typing import Any

from torch.utils.data import IterableDataset

WEBDATASET, HUGGING_FACE, ITERABLE = "webdataset", "Hugging Face datasets", "IterableDataset"


def is_stream(dataset: Any) -> bool:
    """Whether `dataset` is read as a stream (an ``IterableDataset``) rather than by index."""
    return isinstance(dataset, IterableDataset)


def kind(dataset: Any) -> str:
    """Which kind of stream `dataset` is: webdataset, Hugging Face datasets, or a plain IterableDataset."""
    module = type(dataset).__module__
    if module.startswith("webdataset"):
        return WEBDATASET
    if module.startswith("datasets"):
        return HUGGING_FACE
    return ITERABLE


def shard_list(dataset: Any) -> Any:
    """A webdataset pipeline's list of shards (its first stage), or None for another stream or endless resampling."""
    stages = getattr(dataset, "pipeline", None)
    if not stages:
        return None
    first = stages[0]
    urls = getattr(first, "urls", None)
    return first if isinstance(urls, list) else None


def shards(dataset: Any) -> int | None:
    """How many shards `dataset` reads, where it says; None where it does not (or resamples them endlessly)."""
    if kind(dataset) == WEBDATASET:
        listed = shard_list(dataset)
        return None if listed is None else len(listed.urls)
    if kind(dataset) == HUGGING_FACE:
        return int(getattr(dataset, "num_shards", 0) or 0) or None
    declared = getattr(dataset, "num_shards", None)
    return declared if isinstance(declared, int) and declared > 0 else None


def length(dataset: Any) -> int | None:
    """The stream's own length, where it has one (``__len__``); None otherwise."""
    try:
        n = len(dataset)
    except TypeError:
        return None
    return n if n > 0 else None


def describe(dataset: Any) -> str:
    """One line: the stream's kind, its shards, its length."""
    parts = [kind(dataset)]
    counted = shards(dataset)
    parts.append(f"{counted} shard(s)" if counted else "shards not stated")
    n = length(dataset)
    if n:
        parts.append(f"{n:,} samples a pass")
    return ", ".join(parts)


def shard_failure(exc: BaseException) -> str | None:
    """What reading a shard raised, in one line, where webdataset appended the shard to the error's arguments
    (``('empty header', <stream>, 'shard-0005.tar')``); a tar file that cannot be read is named as one. None for
    any other error."""
    args = exc.args
    if not (len(args) > 1 and isinstance(args[0], str) and isinstance(args[-1], str) and args[-1]):
        return None
    damaged = " (a truncated or damaged tar file)" if isinstance(exc, tarfile.TarError) else ""
    return f"{type(exc).__name__}: {args[0]}, in shard {args[-1]}{damaged}"


def failure(exc: BaseException) -> str:
    """What reading a stream raised, in one line: ``Type: message``, with the shard where webdataset names it."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return shard_failure(exc) or (f"{type(exc).__name__}: {first}" if first else type(exc).__name__)
