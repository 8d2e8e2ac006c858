"""An iterator of batches made from a DataLoader iterator's, which names that iterator as its `source`.

A loader that wraps a DataLoader (the device decode path's, the device normalize
path's) yields batches the DataLoader's workers did not make whole. A measurement
still has to read how many of the workers' batches wait ready
(``autotune.trial.backlog``): it reads them off ``source``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class Sourced:
    """Yields what `batches` yields; `source` is the DataLoader iterator whose workers fill the queues."""

    def __init__(self, source: Iterator[Any], batches: Iterator[Any]) -> None:
        self.source, self.batches = source, batches

    def __iter__(self) -> "Sourced":
        return self

    def __next__(self) -> Any:
        return next(self.batches)
