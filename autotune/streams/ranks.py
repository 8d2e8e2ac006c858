"""A stream under torchrun: each rank reads a disjoint share of the shards, or it is refused.

A stream splits its shards twice: between the ranks (webdataset's node splitter,
``datasets.distributed.split_dataset_by_node``), then between each rank's DataLoader workers. Ranks that do not
split read every shard each, and the whole job sees every sample world-size times; readers (workers over all ranks)
beyond the shards read nothing. ``split_for_rank`` gives a rank its share; ``refusal`` names a worker count and
world size that would leave readers without a shard.
"""

from __future__ import annotations

import copy
import os
from typing import Any

from autotune.streams import sources

NODE_SPLITTERS = ("split_by_node",)  # webdataset's stages that give each rank its own shards


def world_size() -> int:
    """The ranks of this job as torchrun states them (WORLD_SIZE), else 1."""
    raw = os.environ.get("WORLD_SIZE", "1")
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


def rank_and_world(initialised: tuple[int, int]) -> tuple[int, int]:
    """(rank, world size): torch.distributed's (`initialised`) where its group is larger than one, else torchrun's
    RANK and WORLD_SIZE, as webdataset's node splitter reads them when no process group is initialised."""
    if initialised[1] > 1:
        return initialised
    rank, world = os.environ.get("RANK", ""), os.environ.get("WORLD_SIZE", "")
    if rank.isdigit() and world.isdigit() and int(rank) < int(world):
        return int(rank), int(world)
    return initialised


def refusal(shards: int | None, workers: int, world: int) -> str | None:
    """Why `workers` DataLoader workers on each of `world` ranks cannot read a stream of `shards` shards; None when
    they can (or the stream does not say how many shards it has)."""
    readers = max(1, workers) * world
    if shards is None or readers <= shards:
        return None
    fits = shards // world
    instead = f"pass num_workers={fits}" if fits else f"run at most {shards} rank(s)"
    return (f"{max(1, workers)} reader(s) per rank (num_workers={workers}) x world size {world} = {readers} readers, "
            f"but the stream has {shards} shard(s): readers beyond the shards read nothing, or ranks read the same "
            f"shards. The rule: num_workers x world size <= shards; {instead} or write the data in at least "
            f"{readers} shards")


def split_for_rank(dataset: Any, rank: int, world: int) -> Any:
    """`dataset` as rank `rank` of `world` reads it: its share of the shards. A plain IterableDataset splits by rank
    itself (``torch.distributed.get_rank()``) or not at all: it is returned as it is."""
    if world <= 1:
        return dataset
    which = sources.kind(dataset)
    if which == sources.HUGGING_FACE:
        from datasets.distributed import split_dataset_by_node

        return split_dataset_by_node(dataset, rank=rank, world_size=world)
    if which == sources.WEBDATASET:
        return _webdataset_by_node(dataset)
    return dataset


def _webdataset_by_node(dataset: Any) -> Any:
    """A copy of a webdataset pipeline whose node stage gives each rank its own shards (webdataset's
    ``split_by_node``, which reads the rank from torch.distributed or torchrun's environment)."""
    import webdataset as wds

    stages = list(getattr(dataset, "pipeline", []))
    names = [getattr(s, "__name__", "") for s in stages]
    if any(n in NODE_SPLITTERS for n in names):
        return dataset  # the user's pipeline splits by node already
    if "single_node_only" in names:
        stages[names.index("single_node_only")] = wds.split_by_node
    elif sources.shard_list(dataset) is not None:
        stages.insert(1, wds.split_by_node)
    else:
        return dataset
    copied = copy.copy(dataset)
    copied.pipeline = stages
    return copied
