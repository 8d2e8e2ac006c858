"""The loader a config describes: a DataLoader, or the whole data set on the device.

The loader is a ``torch.utils.data.DataLoader`` (placement ``stream``), with the
workload's own ``collate_fn``, or a ``DeviceLoader`` whose whole transformed data
set lives on the device (placement ``device``). The same objects serve the trials and the user's
training code (``autotune.tuned.api``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from autotune import batch as batches
from autotune.config import Config
from autotune.loop.buckets import LengthBuckets, padded
from autotune.loop.sourced import WrappedLoader, dataloader_args

Collate = Callable[[list[Any]], Any]


def materialize(dataset: Dataset, device: torch.device, workers: int, collate_fn: Collate | None = None) -> Any:
    """Run the data set's transform over every sample once and keep the batches' rows on `device`.

    Returns one structure like a batch (``autotune.batch``) whose every tensor
    holds the whole data set, one row per sample. Raises ``BatchError`` for batches
    that cannot be kept that way (a list of per-sample targets, rows of varying shape).
    """
    # Iterating a DataLoader draws a seed from the global generator; materialising must not
    # shift the data order of the training that follows it (a runner materialises only once).
    with torch.random.fork_rng(devices=[]):
        return _materialize_now(dataset, device, workers, collate_fn)


def _materialize_now(dataset: Dataset, device: torch.device, workers: int, collate_fn: Collate | None) -> Any:
    loader = DataLoader(dataset, batch_size=1024, num_workers=workers, shuffle=False, collate_fn=collate_fn)
    resident: Any = None
    start = 0
    for batch in loader:
        rows = min(1024, len(dataset) - start)  # type: ignore[arg-type]
        reason = batches.why_not_stackable(batch, rows)
        if reason is not None:
            raise batches.BatchError(f"cannot keep the data set on the device: {reason}")
        if resident is None:
            # Filled in place, batch by batch: the host never holds the whole data set at once.
            resident = batches.map_tensors(
                batch, lambda t: torch.empty((len(dataset), *t.shape[1:]), dtype=t.dtype, device=device)
            )
        try:
            batches.copy_into(batches.index(resident, slice(start, start + rows)), batch)
        except RuntimeError as exc:  # a row of another shape than the first batch's
            raise batches.BatchError(f"cannot keep the data set on the device: rows differ in shape ({exc})") from None
        start += rows
    if resident is None:
        raise batches.BatchError("cannot materialize an empty data set")
    return resident


class DeviceLoader:
    """A data set materialised once on the device, batches sliced there; no DataLoader at all.

    Iterates like a DataLoader (``len``, ``iter``, ``batch_size``, ``drop_last``,
    ``shuffle``) and yields batches of the data set's own structure, already on the
    device. Its shuffled order is drawn exactly as a (non-persistent) DataLoader draws
    it, so under the same seed both loaders visit the samples in the same order, epoch
    after epoch; with a ``generator`` it is drawn from that, as RandomSampler(generator=...)
    does. ``augment(x)`` transforms the input of each ``(x, y)`` batch on the device.
    A ``sampler`` (a ``DistributedSampler`` under torchrun) chooses the rows instead, as it
    would for a DataLoader: each rank slices its own share, ``set_epoch`` reshuffles.

    For example::

        loader = DeviceLoader(dataset, batch_size=512, shuffle=True, device="cuda")
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int,
        shuffle: bool = False,
        drop_last: bool = False,
        device: str | torch.device = "cuda",
        augment: Callable[[torch.Tensor], torch.Tensor] | None = None,
        workers: int = 0,
        resident: Any = None,
        generator: torch.Generator | None = None,
        collate_fn: Collate | None = None,
        sampler: Any = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"`batch_size >= 1` must hold, but got {batch_size=}.")
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.augment = augment
        self.generator = generator
        self.device = torch.device(device)
        start = time.perf_counter()
        self.resident = resident if resident is not None else materialize(dataset, self.device, workers, collate_fn)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.materialize_s = time.perf_counter() - start  # one-time cost, reported with the trial
        self.rows = batches.samples_in(self.resident)
        self.dataset = dataset
        self.sampler = sampler
        if sampler is not None and shuffle:
            raise ValueError("`shuffle` and `sampler` both choose the order; pass shuffle=False with a sampler")

    def set_epoch(self, epoch: int) -> None:
        """The sampler's epoch (``DistributedSampler.set_epoch``): its shuffle differs from epoch to epoch."""
        if self.sampler is not None and hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def __len__(self) -> int:
        n = len(self.sampler) if self.sampler is not None else self.rows
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        n = self.rows
        order = None
        if self.sampler is not None:
            order = torch.as_tensor(list(iter(self.sampler)), dtype=torch.int64).to(self.device, non_blocking=True)
            n = len(order)
        elif self.shuffle:
            generator = self.generator
            if generator is None:
                # Exactly a DataLoader's draws: each new iterator takes a seed for its workers,
                # then RandomSampler takes the seed of its permutation.
                torch.empty((), dtype=torch.int64).random_()
                generator = torch.Generator()
                generator.manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
            order = torch.randperm(n, generator=generator).to(self.device, non_blocking=True)
        for i in range(len(self)):
            lo, hi = i * self.batch_size, min(n, (i + 1) * self.batch_size)
            batch = batches.index(self.resident, slice(lo, hi) if order is None else order[lo:hi])
            if self.augment is not None:
                batch = _augmented(batch, self.augment)
            yield batch


def _augmented(batch: Any, augment: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
        raise batches.BatchError(
            f"device_augment(x) transforms the input of an (x, y) batch, but the batch is a {type(batch).__name__}"
        )
    x, y = batch
    return type(batch)((augment(x), y)) if isinstance(batch, tuple) else [augment(x), y]


# The DataLoader arguments a workload (or a user's tuned_loader call) brings, kept as they are.
USER_LOADER_ARGS = ("collate_fn", "sampler", "batch_sampler", "worker_init_fn", "generator", "timeout")


def build_loader(
    dataset: Dataset,
    config: Config,
    shuffle: bool,
    drop_last: bool,
    device: torch.device,
    augment: Callable[[torch.Tensor], torch.Tensor] | None = None,
    resident: Any = None,
    materialize_workers: int = 0,
    collate_fn: Collate | None = None,
    lengths: Sequence[int] | None = None,
    **user_args: Any,
) -> DataLoader | DeviceLoader | WrappedLoader:
    """The loader a config describes; `user_args` are the workload's own DataLoader arguments, kept.

    `lengths` (one per sample, the workload's ``sample_lengths``) is what ``bucketing`` groups by.
    """
    unknown = sorted(set(user_args) - set(USER_LOADER_ARGS))
    if unknown:
        raise TypeError(f"build_loader got unknown DataLoader argument(s) {unknown}; it keeps {USER_LOADER_ARGS}")
    if config.placement == "device":
        return DeviceLoader(
            dataset,
            config.batch_size,
            shuffle,
            drop_last,
            device,
            augment,
            materialize_workers,
            resident,
            collate_fn=collate_fn,
            sampler=user_args.get("sampler"),
        )
    if config.pad_multiple:
        collate_fn = padded(collate_fn, config.pad_multiple)  # a collate_fn that cannot is a ValueError naming why
    order = _order(config, shuffle, drop_last, lengths, user_args)
    sampled = {"batch_sampler": order["batch_sampler"]} if "batch_sampler" in order else {}
    if config.decode == "gpu":  # the workers read JPEG bytes; the device decodes and augments (loop.device_decode)
        from autotune.loop.device_decode import decoding_loader

        return decoding_loader(dataset, config, shuffle, drop_last, device, collate_fn, **user_args, **sampled)
    if config.device_normalize:  # the workers make uint8 images; the device runs ToTensor and Normalize
        from autotune.loop.device_normalize import normalizing_loader

        return normalizing_loader(dataset, config, shuffle, drop_last, device, collate_fn, **user_args, **sampled)
    return DataLoader(
        dataset,
        num_workers=config.num_workers,
        pin_memory=config.pin_memory and device.type == "cuda",
        collate_fn=collate_fn,
        **dataloader_args(config, shuffle, drop_last, {**user_args, **sampled}),
    )


def _order(
    config: Config, shuffle: bool, drop_last: bool, lengths: Sequence[int] | None, user_args: dict[str, Any]
) -> dict[str, Any]:
    """The DataLoader arguments that make its batches: batch_size/shuffle/drop_last, or a bucketing batch sampler."""
    if not config.bucketing:
        return dict(batch_size=config.batch_size, shuffle=shuffle, drop_last=drop_last)
    if lengths is None:
        raise ValueError("bucketing=True needs each sample's length (the workload's sample_lengths(dataset)), "
                         "but none are given")
    given = sorted(key for key in ("sampler", "batch_sampler") if user_args.get(key) is not None)
    if given:
        raise ValueError(f"bucketing=True makes its own batches of similar length, but {' and '.join(given)} "
                         f"also chooses the order; pass bucketing=False to keep it")
    # Bucketing draws a random order; a loader that kept its samples in order must not get one silently.
    if not shuffle:
        raise ValueError("bucketing=True draws a random order of batches, but shuffle=False keeps the samples "
                         "in order; pass shuffle=True, or bucketing=False")
    generator = user_args.get("generator")  # shared with the DataLoader, as RandomSampler shares it
    return dict(batch_sampler=LengthBuckets(lengths, config.batch_size, drop_last, generator=generator))
