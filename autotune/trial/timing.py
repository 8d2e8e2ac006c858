"""Timing windows over the real loop, start-up costs, and GPU sampling through NVML.

The number is end-to-end training samples per second: loader, copy, forward,
backward, optimizer step. Warm-up (worker spin-up, cuDNN autotuning, graph
capture) is timed separately as a one-time cost. The device is synchronised at
window edges only. A fresh epoch's iterator start-up is measured at epoch
boundaries and spread over the epoch's steps, so persistent workers show their
worth. No Optuna here: a caller that wants to stop early answers ``on_window``.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

Clock = Callable[[], float]


@dataclasses.dataclass(frozen=True)
class Measurement:
    samples_per_s: float  # end to end: steady steps plus each epoch's start-up, spread over the epoch
    steady_samples_per_s: float  # median over windows, epoch boundaries excluded
    spread: float  # interquartile range of the window rates over their median
    window_rates: tuple[float, ...]  # samples/s of each steady window
    step_s: float  # median seconds per step
    epoch_overhead_s: float  # extra seconds a fresh epoch costs (iterator and worker start-up)
    steps_per_epoch: int
    epoch_s: float  # seconds one epoch takes at this rate
    setup_s: float  # one-time cost: first iterator, warm-up steps, capture, autotuning
    stopped_early: bool  # on_window asked to stop

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Windows:
    """How long and how many windows to time; measuring stops once the noise allows."""

    warmup_steps: int = 5
    window_s: float = 0.25  # target seconds of work in one window
    min_windows: int = 3
    max_windows: int = 10
    rel_tol: float = 0.03  # stop when the last min_windows rates lie within this fraction of their median
    boundaries: int = 2  # epoch boundaries to time


def spread(rates: Iterable[float]) -> float:
    """Interquartile range over median: a noise figure that one outlier does not move."""
    values = sorted(rates)
    if len(values) < 2:
        return 0.0
    q = statistics.quantiles(values, n=4, method="inclusive")
    return (q[2] - q[0]) / statistics.median(values)


class _Feed:
    """Batches across epochs; knows how far into the epoch it is."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.steps_per_epoch = len(loader)
        self.iterator: Iterator | None = iter(loader)
        self.position = 0

    def next(self) -> Any:
        if self.position >= self.steps_per_epoch:
            self.restart()
        assert self.iterator is not None
        batch = next(self.iterator)
        self.position += 1
        return batch

    def restart(self) -> None:
        # Drop the old iterator first, as an epoch's end does: its workers shut down now.
        self.iterator = None
        self.iterator = iter(self.loader)
        self.position = 0

    @property
    def remaining(self) -> int:
        return self.steps_per_epoch - self.position


def _batch_len(batch: Any) -> int:
    first = batch[0] if isinstance(batch, (tuple, list)) else batch
    return int(first.shape[0])


def measure(
    step: Callable[..., Any],
    loader: Any,
    windows: Windows = Windows(),
    *,
    clock: Clock = time.perf_counter,
    sync: Callable[[], None] = lambda: None,
    on_window: Callable[[int, float], bool] | None = None,
) -> Measurement:
    """Time `step` over batches from `loader`; see the module docstring for what counts.

    ``on_window(i, samples_per_s)`` is called after each steady window; returning
    True stops measuring (a pruned trial).

    For example::

        m = measure(step, loader, sync=torch.cuda.synchronize)
    """
    start = clock()
    feed = _Feed(loader)
    if feed.steps_per_epoch < 1:
        raise ValueError(f"the loader yields no batch: `len(loader) >= 1` must hold, but got {feed.steps_per_epoch}.")
    for _ in range(windows.warmup_steps):
        batch = feed.next()
        step(*batch)
    sync()
    setup_s = clock() - start

    # Calibrate the window to the step's speed; a window never crosses an epoch boundary.
    probe = min(3, feed.steps_per_epoch)
    t0 = clock()
    for _ in range(probe):
        step(*feed.next())
    sync()

    def steps_for(step_s: float) -> int:
        return max(1, min(math.ceil(windows.window_s / max(step_s, 1e-9)), max(1, feed.steps_per_epoch - 1)))

    window_steps = steps_for((clock() - t0) / probe)

    rates: list[float] = []
    step_times: list[float] = []
    boundary: list[tuple[float, int]] = []  # (seconds, steps) of windows that start a new epoch
    stopped = False
    while len(rates) < windows.max_windows:
        crossing = feed.remaining < window_steps
        if crossing and len(boundary) >= windows.boundaries:
            feed.restart()  # enough boundaries timed; start the new epoch outside the clock
            crossing = False
        n_steps = min(window_steps, feed.steps_per_epoch)
        samples = 0
        t0 = clock()
        if crossing:
            feed.restart()
        for _ in range(n_steps):
            batch = feed.next()
            samples += _batch_len(batch)
            step(*batch)
        sync()
        elapsed = max(clock() - t0, 1e-12)
        if crossing:
            boundary.append((elapsed, n_steps))
            continue
        rates.append(samples / elapsed)
        step_times.append(elapsed / n_steps)
        # The probe can run on batches the loader's workers had ready: a loader-bound config then looks
        # fast and its windows last many times window_s. Each window sets the next one's length.
        window_steps = steps_for(step_times[-1])
        if on_window is not None and on_window(len(rates) - 1, rates[-1]):
            stopped = True
            break
        if len(rates) >= windows.min_windows:
            recent = rates[-windows.min_windows :]
            if (max(recent) - min(recent)) / statistics.median(recent) <= windows.rel_tol:
                break

    step_s = statistics.median(step_times)
    if not stopped:
        while len(boundary) < min(1, windows.boundaries):
            # No epoch ended while we timed: force one, so start-up cost is never assumed away.
            n_steps = min(window_steps, feed.steps_per_epoch)
            t0 = clock()
            feed.restart()
            for _ in range(n_steps):
                step(*feed.next())
            sync()
            boundary.append((clock() - t0, n_steps))
    overheads = [max(0.0, seconds - n * step_s) for seconds, n in boundary]
    epoch_overhead = statistics.median(overheads) if overheads else 0.0
    epoch_samples = _epoch_samples(loader)
    epoch_s = feed.steps_per_epoch * step_s + epoch_overhead
    return Measurement(
        samples_per_s=epoch_samples / epoch_s,
        steady_samples_per_s=statistics.median(rates),
        spread=spread(rates),
        window_rates=tuple(rates),
        step_s=step_s,
        epoch_overhead_s=epoch_overhead,
        steps_per_epoch=feed.steps_per_epoch,
        epoch_s=epoch_s,
        setup_s=setup_s,
        stopped_early=stopped,
    )


def _epoch_samples(loader: Any) -> int:
    n = len(loader.dataset)
    if getattr(loader, "drop_last", False):
        return (n // loader.batch_size) * loader.batch_size
    return n
