"""How ``tuned_loader`` (``autotune.tuned.api``) makes a loader from a profile and the user's arguments.

One step a function: sort the arguments (``arguments``), choose the order (``order``: torch.distributed's sampler,
the workload's own), refuse what the profile cannot honour (``refuse_conflicts``, ``refuse_stream_knobs``: one
error naming both sides), and build the loader (``build``).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

from autotune.config import Config
from autotune.knobs import STREAM_KNOBS
from autotune.loop import DeviceLoader, build_loader
from autotune.loop.loader import USER_LOADER_ARGS
from autotune.loop.sourced import WrappedLoader
from autotune.streams import ranks, sources
from autotune.streams.sources import is_stream
from autotune.tuned import distributed
from autotune.workloads import Workload
from autotune.workloads.decode import NotTranslatable
from autotune.workloads.locate import data_root


@dataclasses.dataclass(frozen=True)
class LoaderArguments:
    """What a `tuned_loader` call asks for, sorted: the knobs over the profile's config, the order, the rest."""

    config: Config  # the profile's, with the knobs given winning
    knobs: dict[str, Any]  # the knobs given, as given
    user: dict[str, Any]  # the DataLoader arguments given (USER_LOADER_ARGS), with the workload's collate_fn
    shuffle: bool
    shuffle_given: bool
    drop_last: bool


def arguments(profile: Config, workload: Workload, kwargs: dict[str, Any]) -> LoaderArguments:
    """`kwargs` sorted into knobs over the `profile`'s config, shuffle/drop_last and DataLoader arguments; an unknown
    one is a TypeError."""
    knobs = dict(kwargs)
    user = {key: knobs.pop(key) for key in USER_LOADER_ARGS if key in knobs}
    user.setdefault("collate_fn", workload.collate_fn)
    shuffle_given = "shuffle" in knobs
    shuffle = knobs.pop("shuffle", workload.default("shuffle"))
    drop_last = knobs.pop("drop_last", workload.default("drop_last"))
    try:
        config = dataclasses.replace(profile, **knobs)
    except TypeError as exc:
        raise TypeError(
            f"tuned_loader: unknown argument(s) {sorted(knobs)}; it takes the knobs "
            f"({', '.join(f.name for f in dataclasses.fields(Config))}), shuffle, drop_last, "
            f"and the DataLoader arguments {', '.join(USER_LOADER_ARGS)}."
        ) from exc
    return LoaderArguments(config, knobs, user, shuffle, shuffle_given, drop_last)


def for_rank(dataset: Any, asked: LoaderArguments, recipe: str) -> Any:
    """A stream (an IterableDataset) as this rank reads it: its share of the shards, refused where the ranks' workers
    would outnumber the shards; any other data set as it is (a DistributedSampler shares it, in ``order``)."""
    if not is_stream(dataset):
        return dataset
    if asked.shuffle_given and asked.shuffle:
        raise ValueError("tuned_loader: shuffle=True cannot apply to a stream (an IterableDataset): its order is its "
                         "own (its shard order, its shuffle buffer); pass shuffle=False or leave it out.")
    rank, world = ranks.rank_and_world(distributed.world())
    why = ranks.refusal(sources.shards(dataset), asked.config.num_workers, world)
    if why is not None:
        raise ValueError(f"tuned_loader: {recipe}'s profile on this stream: {why}.")
    return ranks.split_for_rank(dataset, rank, world)


def order(dataset: Dataset, workload: Workload, asked: LoaderArguments, recipe: str) -> tuple[dict[str, Any], bool]:
    """The DataLoader arguments and shuffle once the order is chosen: under torch.distributed, each rank's
    DistributedSampler (the user's, or one made here) comes first; else the workload's own sampler, if it has one.
    A stream has neither: its order is its own."""
    config, user = asked.config, asked.user
    if is_stream(dataset):
        return user, False
    own_sampler = workload.build_sampler is not None and "batch_sampler" not in user and not config.bucketing
    user, shuffle = distributed.shard(dataset, user, config, asked.shuffle, asked.shuffle_given, asked.drop_last,
                                      recipe, own_sampler)
    if own_sampler and "sampler" not in user:
        user["sampler"] = workload.build_sampler(dataset)  # the workload's order, as its search measured it
    return user, shuffle


def refuse_stream_knobs(asked: LoaderArguments, recipe: str) -> None:
    """One error for a knob of the streaming loader, asked of one that keeps the data on the device, with a value that
    loader does not already have (it runs no workers, pins nothing, decodes nothing): it would be ignored."""
    config, knobs = asked.config, asked.knobs
    on_device = Config(batch_size=config.batch_size, placement="device")
    streamed = sorted(k for k in knobs if k in STREAM_KNOBS and knobs[k] != getattr(on_device, k))
    if config.placement == "device" and streamed:
        whose = "placement='device' (given)" if "placement" in knobs else f"{recipe}'s profile (placement=device)"
        raise ValueError(
            f"tuned_loader: {', '.join(f'{k}={knobs[k]!r}' for k in streamed)} cannot apply: {whose} keeps the "
            "data set on the device, where no DataLoader workers run; pass placement='stream' as well to stream it "
            "with them."
        )


def build(
    dataset: Dataset, workload: Workload, asked: LoaderArguments, user: dict[str, Any], shuffle: bool,
    device: torch.device, recipe: str,
) -> DataLoader | DeviceLoader | WrappedLoader:
    """The loader: over the workload's own device-resident data set where it gives one (its random augmentation then
    runs on the device), else over `dataset`."""
    config, drop_last = asked.config, asked.drop_last
    workers = min(4, len(os.sched_getaffinity(0)))
    if (
        config.placement == "device"
        and workload.build_device_dataset is not None
        and workload.deterministic_transform is not True
    ):
        source = workload.build_device_dataset(data_root())
        return build_loader(
            source, config, shuffle, drop_last, device, workload.device_augment, materialize_workers=workers, **user
        )
    # Lengths are read only for a bucketing loader; a workload without sample_lengths then fails naming the hook.
    lengths = workload.lengths(dataset) if config.bucketing and config.placement == "stream" else None
    try:
        return build_loader(
            dataset, config, shuffle, drop_last, device, materialize_workers=workers, lengths=lengths, **user
        )
    except NotTranslatable as exc:  # this data set's pipeline is not the one the search measured
        knob = "decode='cpu'" if config.decode == "gpu" else "device_normalize=False"
        raise NotTranslatable(f"tuned_loader: {recipe}'s profile moves part of the pipeline to the device "
                              f"({config.describe()}), but this data set's cannot move: {exc}; pass {knob} to "
                              f"keep it in the workers") from exc


def refuse_conflicts(config: Config, user: dict[str, Any], shuffle: bool, recipe: str) -> None:
    """One error for a DataLoader argument the tuned config cannot honour, naming both sides."""
    # A DistributedSampler is an order over the data set's rows, which the device-resident loader follows too.
    given = sorted(
        key
        for key, value in user.items()
        if value is not None
        and key != "collate_fn"
        and not (key == "sampler" and isinstance(value, DistributedSampler))
    )
    if config.placement == "device" and given:
        raise ValueError(
            f"tuned_loader: {', '.join(given)} cannot apply: {recipe}'s profile keeps the data set on the device "
            "(placement=device), which slices its own batches there without a DataLoader; pass "
            "placement='stream' to keep your DataLoader arguments."
        )
    if user.get("batch_sampler") is not None:
        raise ValueError(
            f"tuned_loader: batch_sampler fixes the batch size, which {recipe}'s profile tunes "
            f"(batch_size={config.batch_size}); pass sampler= instead, so the tuned batch size applies."
        )
    if user.get("sampler") is not None and config.bucketing and config.placement == "stream":
        raise ValueError(
            f"tuned_loader: sampler= and {recipe}'s profile (bucketing=True: batches of similar length) both choose "
            "the order; pass bucketing=False to keep your sampler."
        )
    if user.get("sampler") is not None and shuffle:
        raise ValueError(
            f"tuned_loader: sampler= and shuffle=True both choose the order (shuffle=True is given, or is "
            f"{recipe}'s default); pass shuffle=False with your sampler."
        )
