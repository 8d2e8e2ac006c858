"""What a tuned profile means under torchrun: one process per GPU, each with its share of the samples and cores.

A search tunes one process: its ``batch_size`` is per process, its ``lr`` the rate for
that batch on one process, its ``cpu_share`` the cores that process had. Under
``torchrun --nproc_per_node W`` (data parallel, gradients averaged over the ranks):

- each rank loads its own share of the data set (a ``DistributedSampler``), so the
  global batch is ``W x batch_size``;
- the learning rate for that global batch follows the profile's ``lr_rule``, asked
  for with ``load_tuned(recipe, world_size=W)``: ``lr x W`` (linear), ``lr x sqrt(W)``
  (sqrt) or ``lr`` (none) -- the same rule that took the workload's rate to the tuned
  batch (autotune.config.LR_RULES);
- the ranks on one host share its cores: a profile tuned with more cores than
  ``cores // ranks`` starts more DataLoader workers than a rank has cores
  (``CpuShareWarning``); ``autotune search --cpus N`` tunes for one rank's share.
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any

import torch
from torch.utils.data import Dataset
from torch.utils.data.distributed import DistributedSampler

from autotune.config import Config
from autotune.tuned import caller


class CpuShareWarning(UserWarning):
    """The profile was tuned with more CPU cores than each rank on this host has."""


def world() -> tuple[int, int]:
    """(rank, world size) of the initialised default process group, or (0, 1) outside torch.distributed."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def ranks_on_host(world_size: int) -> int:
    """The processes sharing this host's cores: torchrun's LOCAL_WORLD_SIZE, else every rank of the world."""
    local = os.environ.get("LOCAL_WORLD_SIZE", "")
    return int(local) if local.isdigit() and int(local) > 0 else world_size


def lr_for_world(lr: float, rule: str, world_size: int) -> float:
    """The rate for a global batch `world_size` times the profile's, by the profile's rule.

    >>> lr_for_world(0.02, "linear", 4), lr_for_world(0.02, "sqrt", 4), lr_for_world(0.02, "none", 4)
    (0.08, 0.04, 0.02)
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"`world_size >= 1` (processes training together, an int) must hold, but got {world_size=}.")
    factor = {"linear": float(world_size), "sqrt": math.sqrt(world_size), "none": 1.0}.get(rule)
    if factor is None:
        raise ValueError(f"lr_rule must be one of linear, sqrt, none, but got {rule!r}")
    return lr * factor


def check_cpu_share(profile: dict[str, Any], name: str, hardware: str, ranks: int, cores: int) -> None:
    """Warn, with the numbers, when the profile had more cores than each of `ranks` processes gets of `cores`."""
    share = profile.get("cpu_share")
    if ranks <= 1 or share is None:
        return
    each = max(1, cores // ranks)
    if share <= each:
        return
    workers = profile.get("knobs", {}).get("num_workers", 0)
    warnings.warn(
        f"{name}'s profile for {hardware} was tuned with {share} CPU cores, but this host's {cores} cores are shared "
        f"by {ranks} processes ({each} each): its settings (num_workers={workers}) were measured with cores these "
        f"processes do not have. Tune one process's share with `autotune search --recipe {name} --cpus {each}`.",
        CpuShareWarning,
        stacklevel=caller.stacklevel(),  # the user's call of load_tuned, tuned_loader or tuned_step
    )


def shard(
    dataset: Dataset,
    user: dict[str, Any],
    config: Config,
    shuffle: bool,
    shuffle_given: bool,
    drop_last: bool,
    recipe: str,
    workload_sampler: bool,
) -> tuple[dict[str, Any], bool]:
    """Under torch.distributed: the DataLoader arguments with each rank's DistributedSampler, and the shuffle left to
    the loader (False: the sampler shuffles). Outside it, both as given.

    The user's DistributedSampler is kept (with the loader's shuffle off, unless given); without one, one is made
    with this rank and world size, ``shuffle``, ``drop_last`` and seed 0 (call ``loader.sampler.set_epoch(epoch)``
    each epoch, as with any DistributedSampler).
    Orders that cannot be split by rank are one error naming what to pass.
    """
    rank, world_size = world()
    if world_size == 1:
        return user, shuffle
    sampler = user.get("sampler")
    if isinstance(sampler, DistributedSampler):
        return user, shuffle if shuffle_given else False  # the sampler shuffles; an explicit shuffle=True conflicts
    where = f"under torch.distributed (rank {rank} of {world_size})"
    if sampler is not None:
        raise ValueError(
            f"tuned_loader: sampler={type(sampler).__name__} {where} gives every rank the same samples; pass a "
            "DistributedSampler, or no sampler and tuned_loader makes one"
        )
    if config.bucketing and config.placement == "stream":
        raise ValueError(
            f"tuned_loader: {recipe}'s profile has bucketing=True, which draws its batches over the whole data set, "
            f"{where} every rank would draw the same; pass bucketing=False"
        )
    if workload_sampler:
        raise ValueError(
            f"tuned_loader: {recipe}'s workload orders its samples with its own build_sampler, which {where} would "
            "give every rank the same samples; pass a DistributedSampler of your own as sampler="
        )
    made = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, drop_last=drop_last)
    return {**user, "sampler": made}, False
