"""The processes a search will wait for, started before the command line imports torch.

Python, torch and torchvision take ~7 s to import on a large GPU host, in every
process. The command line starts the first trial processes (and, on a GPU, a
spare) and, under --gpus, the searcher processes first, then imports the rest
while they start. Which device to use is guessed from NVML without torch; the
search adopts what was started only if the guess was right, and stops it
either way. Nothing here writes a file that outlives a search stopped by bad
input: trial processes that never ran leave no log (`TrialPool.stop`), and a
searcher waits for the study before it touches anything.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

from autotune.options import SearchOptions
from autotune.procs import compile_cache, lifecycle
from autotune.procs.pool import TrialPool
from autotune.procs.searchers import GpusError, Searcher, parallel_options, parse_gpus, start_searchers
from autotune.workloads.locate import WorkloadError, resolve


@dataclasses.dataclass
class StartedEarly:
    """What the command line started before importing torch; the search adopts it or stops it."""

    options: SearchOptions  # under --gpus, the search's (device, CPU share, run id), which the searchers were given
    pool: TrialPool | None = None
    searchers: list[Searcher] = dataclasses.field(default_factory=list)
    devices: list[int] | None = None  # the --gpus devices the searchers were started for

    def ask_to_exit(self) -> None:
        for handle in self._handles():
            handle.ask_to_exit()

    def stop(self) -> None:
        lifecycle.stop_all(self._handles())

    def _handles(self) -> list[lifecycle.Stoppable]:
        return [*self.searchers, *([self.pool] if self.pool is not None else [])]


def start_early(
    recipe: str, options: SearchOptions, gpus: str | None, echo: Callable[[str], None] = print
) -> StartedEarly:
    """Start what `autotune search` will need; nothing if the recipe or --gpus cannot be used (the search says why)."""
    try:
        ref = resolve(recipe)
    except WorkloadError:
        return StartedEarly(options)
    seen = visible_gpus()
    devices: list[int] | None = None
    if gpus is not None:
        try:
            devices = parse_gpus(gpus, seen)
        except GpusError:
            return StartedEarly(options)  # torch's count decides, after the imports
        options = parallel_options(options, devices)
    pool = pool_started_early(ref.workload_path, options, seen)
    searchers = start_searchers(recipe, options, devices, pool.device != "cpu", echo) if devices else []
    return StartedEarly(options, pool, searchers, devices)


def pool_started_early(workload_path: Path, options: SearchOptions, gpus_seen: int | None = None) -> TrialPool:
    """A pool whose first trial processes start now, on the device NVML suggests.

    On a GPU three: one for each `cudnn.benchmark` value (`autotune.procs.pool.cudnn_plan_key`) and a spare.
    """
    seen = visible_gpus() if gpus_seen is None else gpus_seen
    cuda = seen > options.device_index
    share = options.cpu_share or len(os.sched_getaffinity(0))
    pool = TrialPool(
        workload_path,
        f"cuda:{options.device_index}" if cuda else "cpu",
        share,
        options.state_dir / "logs",
        options.trial_timeout_s,
        env=compile_cache.environment(options.state_dir, workload_path),
    )
    pool.prestart_in_background(3 if cuda else 1)
    return pool


def visible_gpus() -> int:
    """How many CUDA devices this process would see, from NVML and CUDA_VISIBLE_DEVICES, without importing torch.

    A guess made to start processes early; torch's count decides what is used.
    """
    try:
        import pynvml

        pynvml.nvmlInit()
        count = int(pynvml.nvmlDeviceGetCount())
    except Exception:  # no driver or no NVML: nothing to start early on a GPU
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return count
    listed = 0
    for entry in visible.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):
            break  # CUDA ignores this entry and every one after it
        listed += 1
    return min(listed, count)
