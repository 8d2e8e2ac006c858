"""A loader that wraps a DataLoader and makes its batches from the DataLoader's, and the arguments both share.

The device decode path's loader and the device normalize path's yield batches the
DataLoader's workers did not make whole. A measurement still has to read how many of
the workers' batches wait ready (``autotune.trial.backlog``): it reads them off the
iterator's ``source``, and the loader's ``num_workers`` and ``prefetch_factor``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader

from autotune.config import Config


class Sourced:
    """Yields what `batches` yields; `source` is the DataLoader iterator whose workers fill the queues."""

    def __init__(self, source: Iterator[Any], batches: Iterator[Any]) -> None:
        self.source, self.batches = source, batches

    def __iter__(self) -> "Sourced":
        return self

    def __next__(self) -> Any:
        return next(self.batches)


class WrappedLoader:
    """Iterates like the DataLoader it wraps (``len``, ``iter``, ``batch_size``, ``drop_last``, ``dataset``,
    ``num_workers``, ``prefetch_factor``); a subclass makes each batch from the DataLoader's in ``made_from``."""

    def __init__(self, loader: DataLoader, dataset: Any = None) -> None:
        self.loader = loader
        self.dataset = loader.dataset if dataset is None else dataset  # the user's, where the loader reads another
        self.batch_size, self.drop_last = loader.batch_size, loader.drop_last
        self.num_workers, self.prefetch_factor = loader.num_workers, loader.prefetch_factor

    @property
    def sampler(self) -> Any:
        """The DataLoader's: a parity run seeds its order through it (autotune.parity.run.own_order)."""
        return self.loader.sampler

    @property
    def batch_sampler(self) -> Any:
        return self.loader.batch_sampler

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Sourced:
        source = iter(self.loader)
        return Sourced(source, self.made_from(source))

    def made_from(self, source: Iterator[Any]) -> Iterator[Any]:
        raise NotImplementedError


def dataloader_args(config: Config, shuffle: bool, drop_last: bool, user_args: dict[str, Any]) -> dict[str, Any]:
    """The DataLoader arguments of `config` beside the user's own (those given as None are left to DataLoader)."""
    kwargs: dict[str, Any] = {key: value for key, value in user_args.items() if value is not None}
    if config.num_workers > 0:
        kwargs["persistent_workers"] = config.persistent_workers
        kwargs["prefetch_factor"] = config.prefetch_factor or 2
    if "batch_sampler" not in kwargs:  # a batch sampler (bucketing's) makes the batches and their order itself
        kwargs.update(batch_size=config.batch_size, shuffle=shuffle, drop_last=drop_last)
    return kwargs
