"""One feed of the step, measured: the loop, its loader alone, synthetic batches on the device.

Each feed is timed with the same windows as a trial (``autotune.trial.timing``),
with GPU utilisation sampled through NVML and the CPU time of this process and
its DataLoader workers read around it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import torch

from autotune.diagnosis.cputime import cpu_times
from autotune.trial.gpu import GpuSampler, nvml_index
from autotune.trial.timing import Windows, measure

LOW_UTIL_PERCENT = 50  # the health check reports the share of GPU samples below this
SYNTHETIC_EPOCH = 1_000_000  # steps: a repeated batch has no epoch, so a window is never cut short by one


@dataclasses.dataclass(frozen=True)
class Probe:
    """One way of feeding the step, measured."""

    label: str
    samples_per_s: float  # steady: median over windows, epoch boundaries excluded
    end_to_end: float  # with each epoch's start-up spread over the epoch
    spread: float
    epoch_overhead_s: float
    gpu_util: float | None  # mean %, NVML
    gpu_util_low: float | None  # share of NVML samples under LOW_UTIL_PERCENT
    main_cpu: float  # cores busy in this process
    worker_cpu: float | None  # cores busy in its child processes (DataLoader workers)
    peak_memory_bytes: int | None
    seconds: float


class Repeat:
    """The same few batches over and over, shaped like a loader for `measure` (len, iter, dataset)."""

    def __init__(self, batches: list[tuple[torch.Tensor, torch.Tensor]], steps: int = SYNTHETIC_EPOCH) -> None:
        self.batches, self.steps = batches, max(2, steps)
        self.batch_size = int(batches[0][0].shape[0])
        self.drop_last = True
        self.dataset = range(self.steps * self.batch_size)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Any:
        return (self.batches[i % len(self.batches)] for i in range(self.steps))


def synthetic(x: torch.Tensor, y: torch.Tensor, n: int = 2) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Batches shaped like (x, y), made on x's device: random inputs at x's scale, y's labels shuffled."""
    g = torch.Generator(device=x.device).manual_seed(0)
    batches = []
    for _ in range(n):
        perm = torch.randperm(len(x), generator=g, device=x.device)
        if x.is_floating_point():
            xf = x.float()
            xs = (torch.randn(x.shape, generator=g, device=x.device) * xf.std() + xf.mean()).to(x.dtype)
        else:
            xs = x[perm].clone()
        batches.append((xs.contiguous(), y[perm].clone()))
    return batches


def probe(label: str, step: Callable, loader: Any, device: torch.device, windows: Windows) -> Probe:
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    sampler = GpuSampler(nvml_index(device.index or 0)) if cuda else None
    before, start = cpu_times(), time.perf_counter()
    with sampler or contextlib.nullcontext():
        m = measure(step, loader, windows, sync=sync)
    wall, after = time.perf_counter() - start, cpu_times()
    workers = None
    if after.children_s is not None and before.children_s is not None:
        workers = (after.children_s - before.children_s) / wall
    return Probe(
        label=label,
        samples_per_s=m.steady_samples_per_s,
        end_to_end=m.samples_per_s,
        spread=m.spread,
        epoch_overhead_s=m.epoch_overhead_s,
        gpu_util=sampler.mean_util if sampler else None,
        gpu_util_low=sampler.share_below(LOW_UTIL_PERCENT) if sampler else None,
        main_cpu=(after.main_s - before.main_s) / wall,
        worker_cpu=workers,
        peak_memory_bytes=torch.cuda.max_memory_allocated(device) if cuda else None,
        seconds=wall,
    )
