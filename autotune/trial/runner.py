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

from autotune.config import Config
from autotune.loop import Step, build_loader, materialize
from autotune.study.space import DataFacts
from autotune.trial.gpu import GpuSampler, nvml_index
from autotune.trial.timing import Windows, measure
from autotune.workloads import Workload
from autotune.workloads.locate import data_root

SEED = 0  # every trial starts from the same initial weights and data order
KEEP_SHARE = 0.05  # an idle trial process keeps a device-resident data set smaller than this share of the GPU


def classify_failure(exc: BaseException) -> str:
    """A one-line reason for a failed trial: oom, cuda error, worker died, or error."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in text.lower():
        return "oom"
    if "DataLoader worker" in text and ("exited unexpectedly" in text or "killed by signal" in text):
        return f"worker died: {first[:200]}"
    if "CUDA error" in text or "cuda runtime error" in text.lower():
        return f"cuda error: {first[:200]}"
    return f"error: {type(exc).__name__}: {first[:200]}"


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
        self._device_tensors: dict[str, tuple[tuple[torch.Tensor, torch.Tensor], float]] = {}

    @property
    def dataset(self) -> Any:
        if self._dataset is None:
            self._dataset = self.workload.build_dataset(self.root)
        return self._dataset

    def facts(self) -> DataFacts:
        """What the data set allows: size, sample bytes, shape, and whether the transform is deterministic."""
        ds = self.dataset
        x0, y0 = ds[0]
        x0b, y0b = ds[0]
        x1, _ = ds[1 if len(ds) > 1 else 0]
        tx, ty = torch.as_tensor(x0), torch.as_tensor(y0)
        deterministic = self.workload.deterministic_transform
        if deterministic is None:  # not declared: prove it by transforming one sample twice
            deterministic = bool(torch.equal(tx, torch.as_tensor(x0b)) and torch.equal(ty, torch.as_tensor(y0b)))
        return DataFacts(
            load_cpu_share=load_cpu_share(ds),
            size=len(ds),
            sample_bytes=tx.element_size() * tx.numel() + max(ty.element_size() * ty.numel(), 8),
            image_4d=tx.dim() == 3,
            static_shapes=tuple(tx.shape) == tuple(torch.as_tensor(x1).shape),
            deterministic=bool(deterministic),
            device_dataset=self.workload.build_device_dataset is not None,
        )

    def _resident(self) -> tuple[tuple[torch.Tensor, torch.Tensor], float, Callable | None]:
        """The data set on the device, built once per runner; its build time is a one-time cost."""
        augment = None
        key = "plain"
        if self.workload.build_device_dataset is not None and self.workload.deterministic_transform is not True:
            key, augment = "device_dataset", self.workload.device_augment
        if key not in self._device_tensors:
            start = time.perf_counter()
            source = self.dataset if key == "plain" else self.workload.build_device_dataset(self.root)  # type: ignore[misc]
            tensors = materialize(source, self.device, min(self.cpu_share, 8))
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
        held = sum(t.element_size() * t.numel() for (tensors, _) in self._device_tensors.values() for t in tensors)
        dropped = 0
        if self.device.type != "cuda" or held > KEEP_SHARE * torch.cuda.get_device_properties(self.device).total_memory:
            dropped = len(self._device_tensors)
            self._device_tensors.clear()
        gc.collect()  # blocks held by reference cycles too
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return dropped

    def build(self, config: Config, lr: float) -> tuple[Any, Step, float]:
        """Loader and step for `config`, from the seed; returns them and the materialisation time."""
        torch.manual_seed(SEED)
        model = self.workload.build_model().to(self.device)
        optimizer = self.workload.build_optimizer(model.parameters(), lr)
        step = Step(model, self.workload.build_loss(), optimizer, config, self.device)
        shuffle = bool(self.workload.default("shuffle"))
        drop_last = bool(self.workload.default("drop_last"))
        materialize_s = 0.0
        if config.placement == "device":
            tensors, materialize_s, augment = self._resident()
            loader = build_loader(
                self.dataset, config, shuffle, drop_last, self.device, augment, device_tensors=tensors
            )
        else:
            loader = build_loader(self.dataset, config, shuffle, drop_last, self.device)
        return loader, step, materialize_s

    def run(
        self,
        config: Config,
        lr: float,
        windows: Windows = Windows(),
        on_window: Callable[[int, float], bool] | None = None,
    ) -> dict[str, Any]:
        """Measure one config; returns the measurement and its one-time costs as plain data."""
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        start = time.perf_counter()
        loader, step, materialize_s = self.build(config, lr)
        build_s = time.perf_counter() - start
        sync = (lambda: torch.cuda.synchronize(self.device)) if cuda else (lambda: None)
        with GpuSampler(nvml_index(self.device.index or 0)) if cuda else _NoSampler() as gpu:
            m = measure(step, loader, windows, sync=sync, on_window=on_window)
        result = m.as_dict()
        result.update(
            build_s=build_s,
            materialize_s=materialize_s,
            capture_s=step.capture_s,
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


def load_cpu_share(dataset: Any, samples: int = 8, min_wall_s: float = 0.005) -> float:
    """CPU time over wall time while loading a few samples in this process: 1.0 when it cannot be told.

    A share well below 1 means loading waits (on a disk, a network): more workers than cores can help.
    Loads too quick to time (under `min_wall_s` together) count as CPU-bound.
    """
    n = min(samples, len(dataset))
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for i in range(n):
        dataset[(i * 7919) % len(dataset)]  # spread over the data set, not only its first files
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return 1.0 if wall < min_wall_s else min(1.0, cpu / wall)
