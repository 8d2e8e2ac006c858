"""One config, built and measured in this process: what a trial child does.

The runner keeps what trials may share (the data set, its device-resident copy)
and rebuilds what they must not (model, optimizer, loader, step) from the same
seed for every config.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path
from typing import Any, Callable

import torch

from autotune.batch import leaves
from autotune.config import Config
from autotune.knobs import DataFacts
from autotune.loop import Step, build_loader, materialize
from autotune.loop.compiled import CompileError
from autotune.streams.sources import is_stream, length, shard_failure
from autotune.trial import capture, oom
from autotune.trial.facts import read_facts
from autotune.trial.failure_site import where, worker_raised
from autotune.trial.gpu import GpuSampler, nvml_index
from autotune.trial.losses import LossWatch, NonFiniteLoss
from autotune.trial.timing import Windows, measure
from autotune.trial.window import loop_cpu
from autotune.workloads import Workload
from autotune.workloads.locate import data_root

SEED = 0  # every trial starts from the same initial weights and data order
KEEP_SHARE = 0.05  # an idle trial process keeps a device-resident data set smaller than this share of the GPU


def classify_failure(exc: BaseException) -> str:
    """A one-line reason for a failed trial: a compile failure (``autotune.loop.compiled``), a loss that became NaN
    or inf (``autotune.trial.losses``), oom (with its numbers),
    worker died, a host sync that a CUDA graph capture refused (``autotune.trial.capture``), cuda error, or error."""
    if isinstance(exc, (CompileError, NonFiniteLoss)):
        return str(exc)
    text = str(exc).strip()
    lines = text.splitlines()
    first = lines[0] if text else type(exc).__name__
    if first.endswith(":") and len(lines) > 1:  # a heading whose list follows (a workload's problems): keep the list
        first = f"{first} {'; '.join(line.strip().removeprefix('- ') for line in lines[1:] if line.strip())}"
    if oom.is_oom(exc):
        return oom.oom_reason(text, oom.free_at_failure())
    if "DataLoader worker" in text and ("exited unexpectedly" in text or "killed by signal" in text):
        return f"worker died: {first[:200]}"
    raised = worker_raised(text)
    if raised is not None:
        return f"error: {raised}"
    sync = capture.host_sync_reason(exc)
    if sync is not None:
        return sync
    if "CUDA error" in text or "cuda runtime error" in text.lower():
        return f"cuda error: {first[:200]}"
    named = shard_failure(exc)  # a stream's shard that cannot be read, named
    return f"error: {named or f'{type(exc).__name__}: {first[:200]}'}{where(exc.__traceback__)}"


class Runner:
    """Builds and measures configs of one workload on one device."""

    def __init__(
        self, workload: Workload, device: torch.device, root: Path | None = None, cpu_share: int | None = None
    ) -> None:
        self.root = root or data_root()
        if device.type == "cuda":
            torch.cuda.init()  # memory statistics raise "Invalid device argument" before CUDA is initialised
            if device.index is None:  # plain "cuda": the current device, named, since set_device needs an index
                device = torch.device("cuda", torch.cuda.current_device())
            torch.cuda.set_device(device)
        self.workload, self.device = workload, device
        self.cpu_share = cpu_share or 1
        self._dataset: Any = None
        self._lengths: Any = None  # the workload's sample_lengths, read once, when a config buckets
        self._device_tensors: dict[str, tuple[Any, float]] = {}  # a batch-like structure of whole-data-set tensors
        self.part_batch: tuple[Any, Any] | None = None  # the latest step part's batch, on the host (trial.parts)

    @property
    def dataset(self) -> Any:
        if self._dataset is None:
            self._dataset = self.workload.build_dataset(self.root)
        return self._dataset

    def pass_samples(self) -> int | None:
        """A stream's pass: the workload's samples_per_epoch, else the stream's own len(); None otherwise."""
        if not is_stream(self.dataset):
            return None
        return self.workload.defaults.get("samples_per_epoch") or length(self.dataset)

    def facts(self) -> DataFacts:
        """What the data set allows, read from a few small batches made the workload's way.

        Size, bytes per sample, whether batches hold 4-D images, whether their
        shapes repeat (a CUDA graph replays one shape), whether their rows can live
        on the device, and whether the transform is deterministic.
        """
        return read_facts(self.dataset, self.workload)

    def _resident(self) -> tuple[Any, float, Callable | None]:
        """The data set on the device, built once per runner; its build time is a one-time cost."""
        augment = None
        key = "plain"
        if self.workload.build_device_dataset is not None and self.workload.deterministic_transform is not True:
            key, augment = "device_dataset", self.workload.device_augment
        if key not in self._device_tensors:
            start = time.perf_counter()
            source = self.dataset if key == "plain" else self.workload.build_device_dataset(self.root)  # type: ignore[misc]
            tensors = materialize(source, self.device, min(self.cpu_share, 8), self.workload.collate_fn)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self._device_tensors[key] = (tensors, time.perf_counter() - start)
        tensors, seconds = self._device_tensors[key]
        return tensors, seconds, augment

    def release(self) -> int:
        """Give back cached device memory and, unless they are small, the device-resident data sets.

        A trial pool on a GPU keeps a process per cuDNN plan key (autotune.procs.pool.cudnn_plan_key):
        the idle one lets go, so the other's trials have about the memory a single process
        would. A copy under KEEP_SHARE of the GPU stays: building it again after every
        switch would cost more search time than its memory is worth. Returns how many
        data sets were dropped.
        """
        held = sum(
            t.element_size() * t.numel() for (tensors, _) in self._device_tensors.values() for t in leaves(tensors)
        )
        dropped = 0
        self.part_batch = None  # a step part's batch, up to hundreds of MB of the host's pinned memory
        if self.device.type != "cuda" or held > KEEP_SHARE * torch.cuda.get_device_properties(self.device).total_memory:
            dropped = len(self._device_tensors)
            self._device_tensors.clear()
        gc.collect()  # blocks held by reference cycles too
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return dropped

    def build(self, config: Config, lr: float) -> tuple[Any, Step, float]:
        """Loader and step for `config`, from the seed; returns them and the materialisation time."""
        if config.compile != "off":
            # A process serves many trials, and Dynamo's graphs outlive them: a later trial would reuse an earlier one's
            # (it takes the parameters as inputs) and count no compile, and past recompile_limit graphs per function
            # Dynamo runs it eagerly without a word. Each compiling trial starts as a fresh process would, and as the
            # user's run does; Inductor's on-disk caches (autotune.procs.compile_cache) still serve it.
            torch._dynamo.reset()
        torch.manual_seed(SEED)
        model = self.workload.build_model().to(self.device)
        optimizer = self.workload.build_optimizer(model.parameters(), lr)
        loss_fn = self.workload.build_loss() if self.workload.build_loss is not None else None
        step = Step(model, loss_fn, optimizer, config, self.device, compute_loss=self.workload.compute_loss)
        stream = is_stream(self.dataset)
        shuffle = bool(self.workload.default("shuffle")) and not stream  # a stream's order is its own
        drop_last = bool(self.workload.default("drop_last"))
        materialize_s = 0.0
        if config.placement == "device":
            tensors, materialize_s, augment = self._resident()
            loader = build_loader(self.dataset, config, shuffle, drop_last, self.device, augment, resident=tensors)
        else:
            sampler = self.workload.build_sampler(self.dataset) if self.workload.build_sampler and not stream else None
            if config.bucketing and self._lengths is None:
                self._lengths = self.workload.lengths(self.dataset)
            loader = build_loader(
                self.dataset, config, shuffle, drop_last, self.device, collate_fn=self.workload.collate_fn,
                sampler=sampler, lengths=self._lengths if config.bucketing else None,
            )
        return loader, step, materialize_s

    def run(
        self,
        config: Config,
        lr: float,
        windows: Windows = Windows(),
        on_window: Callable[[int, float], bool] | None = None,
        time_limit_s: float | None = None,
    ) -> dict[str, Any]:
        """Measure one config; returns the measurement and its one-time costs as plain data.

        `time_limit_s`: seconds from now that the measurement should end by (``timing.measure``); building the
        config spends some of them.
        """
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        start = time.perf_counter()
        loader, step, materialize_s = self.build(config, lr)
        build_s = time.perf_counter() - start
        sync = (lambda: torch.cuda.synchronize(self.device)) if cuda else (lambda: None)
        # A diverged loss fails the trial: read at each window's edge, after its sync, and at the end.
        watch = LossWatch(step, config.describe())

        def edge(i: int, rate: float) -> bool:
            watch.check()
            return on_window is not None and on_window(i, rate)

        with GpuSampler(nvml_index(self.device.index or 0)) if cuda else _NoSampler() as gpu:
            m = measure(
                watch, loader, windows, sync=sync, on_window=edge, count=self.workload.count,
                tokens=self.workload.tokens_in, cpu=loop_cpu,
                time_limit_s=None if time_limit_s is None else max(0.0, time_limit_s - build_s),
                pass_samples=self.pass_samples(),
            )
        watch.check()
        result = m.as_dict()
        result.update(
            build_s=build_s,
            materialize_s=materialize_s,
            capture_s=step.capture_s,
            compile_s=step.compile_s,  # part of setup_s: the warm-up steps compiled it
            gpu_util=gpu.mean_util,
            peak_memory_bytes=torch.cuda.max_memory_allocated(self.device) if cuda else None,
            measure_s=time.perf_counter() - start,  # the trial's own time, its process's start-up not counted
        )
        del loader, step
        return result


class _NoSampler:
    mean_util = None

    def __enter__(self) -> "_NoSampler":
        return self

    def __exit__(self, *exc: object) -> None:
        return None
