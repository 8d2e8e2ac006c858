"""The loader a config describes: a DataLoader, or the whole data set on the device.

The loader is a ``torch.utils.data.DataLoader`` (placement ``stream``) or a
``DeviceLoader`` whose whole transformed data set lives on the device
(placement ``device``). The same objects serve the trials and the user's
training code (``autotune.tuned.api``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from autotune.config import Config


def materialize(dataset: Dataset, device: torch.device, workers: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the data set's transform over every sample once and stack the results on `device`."""
    # Iterating a DataLoader draws a seed from the global generator; materialising must not
    # shift the data order of the training that follows it (a runner materialises only once).
    with torch.random.fork_rng(devices=[]):
        return _materialize_now(dataset, device, workers)


def _materialize_now(dataset: Dataset, device: torch.device, workers: int) -> tuple[torch.Tensor, torch.Tensor]:
    loader = DataLoader(dataset, batch_size=1024, num_workers=workers, shuffle=False)
    inputs: torch.Tensor | None = None
    targets: torch.Tensor | None = None
    start = 0
    for x, y in loader:
        y = torch.as_tensor(y)
        if inputs is None:
            inputs = torch.empty((len(dataset), *x.shape[1:]), dtype=x.dtype, device=device)
            targets = torch.empty((len(dataset), *y.shape[1:]), dtype=y.dtype, device=device)
        inputs[start : start + len(x)].copy_(x)
        targets[start : start + len(x)].copy_(y)  # type: ignore[index]
        start += len(x)
    assert inputs is not None and targets is not None, "cannot materialize an empty data set"
    return inputs, targets


class DeviceLoader:
    """A data set materialised once on the device, batches sliced there; no DataLoader at all.

    Iterates like a DataLoader (``len``, ``iter``, ``batch_size``, ``drop_last``,
    ``shuffle``) and yields ``(inputs, targets)`` already on the device. Its shuffled
    order is drawn exactly as a (non-persistent) DataLoader draws it, so under the same
    seed both loaders visit the samples in the same order, epoch after epoch; with a
    ``generator`` it is drawn from that, as RandomSampler(generator=...) does.

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
        tensors: tuple[torch.Tensor, torch.Tensor] | None = None,
        generator: torch.Generator | None = None,
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
        self.inputs, self.targets = tensors if tensors is not None else materialize(dataset, self.device, workers)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.materialize_s = time.perf_counter() - start  # one-time cost, reported with the trial
        self.dataset = dataset

    def __len__(self) -> int:
        n = len(self.inputs)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n = len(self.inputs)
        order = None
        if self.shuffle:
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
            if order is None:
                x, y = self.inputs[lo:hi], self.targets[lo:hi]
            else:
                idx = order[lo:hi]
                x, y = self.inputs[idx], self.targets[idx]
            if self.augment is not None:
                x = self.augment(x)
            yield x, y


def build_loader(
    dataset: Dataset,
    config: Config,
    shuffle: bool,
    drop_last: bool,
    device: torch.device,
    augment: Callable[[torch.Tensor], torch.Tensor] | None = None,
    device_tensors: tuple[torch.Tensor, torch.Tensor] | None = None,
    materialize_workers: int = 0,
) -> DataLoader | DeviceLoader:
    """The loader a config describes."""
    if config.placement == "device":
        return DeviceLoader(
            dataset, config.batch_size, shuffle, drop_last, device, augment, materialize_workers, device_tensors
        )
    kwargs: dict[str, Any] = {}
    if config.num_workers > 0:
        kwargs["persistent_workers"] = config.persistent_workers
        kwargs["prefetch_factor"] = config.prefetch_factor or 2
    return DataLoader(
        dataset,
        batch_size=config.batch_size,
        shuffle=shuffle,
        drop_last=drop_last,
        num_workers=config.num_workers,
        pin_memory=config.pin_memory and device.type == "cuda",
        **kwargs,
    )
