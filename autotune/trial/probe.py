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

from autotune.batch import leaves, map_tensors, samples_in
from autotune.trial.cputime import cpu_times
from autotune.trial.gpu import GpuSampler, nvml_index
from autotune.trial.timing import Windows, measure

Count = Callable[[Any], int]
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
    whole_epochs: bool = False  # timed over whole epochs, each start included (autotune.trial.timing)
    setup_s: float = 0.0  # of `seconds`, the first batch and the warm-up steps
    backlog_steps: int = 0  # batches taken untimed after the warm-up: what the loader had prefetched


class Repeat:
    """The same few batches over and over, shaped like a loader for `measure` (len, iter, dataset)."""

    def __init__(self, batches: list[Any], steps: int = SYNTHETIC_EPOCH, count: Count = samples_in) -> None:
        self.batches, self.steps = batches, max(2, steps)
        self.batch_size = count(batches[0])
        self.drop_last = True
        self.dataset = range(self.steps * self.batch_size)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Any:
        return (self.batches[i % len(self.batches)] for i in range(self.steps))


def synthetic(batch: Any, n: int = 2) -> list[Any]:
    """Batches of `batch`'s structure, made on its device: random floats at each tensor's scale, the rest shuffled.

    Integer tensors (labels, token ids, masks) keep their values, with their rows
    drawn in another order: one permutation for the whole batch, so a token row
    keeps its own mask.
    """
    tensors = list(leaves(batch))
    if not tensors:
        raise ValueError(f"a batch of type {type(batch).__name__} holds no tensor to imitate")
    device = tensors[0].device
    g = torch.Generator(device=device).manual_seed(0)
    made = []
    for _ in range(n):
        rows = samples_in(batch)
        perm = torch.randperm(rows, generator=g, device=device)

        def imitate(t: torch.Tensor) -> torch.Tensor:
            if t.is_floating_point() and t.numel() > 1:
                tf = t.float()
                noise = torch.randn(t.shape, generator=g, device=t.device)
                return (noise * tf.std() + tf.mean()).to(t.dtype).contiguous(memory_format=_layout(t))
            if t.dim() > 0 and t.shape[0] == rows:
                return t[perm.to(t.device)].clone()
            return t.clone()

        made.append(map_tensors(batch, imitate))
    return made


def _layout(t: torch.Tensor) -> torch.memory_format:
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous():
        return torch.channels_last
    return torch.contiguous_format


def probe(
    label: str, step: Callable, loader: Any, device: torch.device, windows: Windows, count: Count = samples_in
) -> Probe:
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    sampler = GpuSampler(nvml_index(device.index or 0)) if cuda else None
    before, start = cpu_times(), time.perf_counter()
    with sampler or contextlib.nullcontext():
        m = measure(step, loader, windows, sync=sync, count=count)
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
        whole_epochs=m.whole_epochs,
        setup_s=m.setup_s,
        backlog_steps=m.backlog_steps,
    )
