"""The processes a search will wait for, started before this process imports torch.

Python, torch and torchvision take ~7 s to import on a large GPU host, in every
process. The command line starts the first trial process (and, on a GPU, its
spare) and, under --gpus, the worker processes first, then imports the rest
while they start. Which device to use is guessed from NVML without torch; the
search uses what was started only if the guess was right, and closes it either
way. Nothing here writes a file that outlives a search stopped by bad input:
children that never ran leave no log (`TrialPool.close`), and a worker waits for
the study before it touches anything.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

from autotune.options import SearchOptions
from autotune.scaleout import ScaleoutError, Worker, parallel_options, parse_gpus, start_workers, stop_workers
from autotune.trial import TrialPool, visible_gpus
from autotune.workload import WorkloadError, resolve


@dataclasses.dataclass
class Ahead:
    options: SearchOptions  # under --gpus, the parent's (device, CPU share, run id), which the workers were given
    pool: TrialPool | None = None
    workers: list[Worker] = dataclasses.field(default_factory=list)
    devices: list[int] | None = None  # the --gpus devices the workers were started for

    def close(self) -> None:
        stop_workers(self.workers)
        if self.pool is not None:
            self.pool.close()


def start_ahead(recipe: str, options: SearchOptions, gpus: str | None, echo: Callable[[str], None] = print) -> Ahead:
    """Start what `autotune search` will need; start nothing if the recipe or --gpus cannot be used (the search says why)."""
    try:
        ref = resolve(recipe)
    except WorkloadError:
        return Ahead(options)
    seen = visible_gpus()
    devices: list[int] | None = None
    if gpus is not None:
        try:
            devices = parse_gpus(gpus, seen)
        except ScaleoutError:
            return Ahead(options)  # torch's count decides, after the imports
        options = parallel_options(options, devices)
    pool = pool_ahead(ref.workload_path, options, seen)
    workers = start_workers(recipe, options, devices, pool.device != "cpu", echo) if devices else []
    return Ahead(options, pool, workers, devices)


def pool_ahead(workload_path: Path, options: SearchOptions, gpus_seen: int | None = None) -> TrialPool:
    """A pool whose first trial processes start now, on the device NVML suggests.

    On a GPU three: one for each `cudnn.benchmark` value (trial.plan_class) and a spare.
    """
    seen = visible_gpus() if gpus_seen is None else gpus_seen
    cuda = seen > options.device_index
    share = options.cpu_share or len(os.sched_getaffinity(0))
    pool = TrialPool(workload_path, f"cuda:{options.device_index}" if cuda else "cpu", share,
                     options.state_dir / "logs", options.trial_timeout_s)
    pool.prestart(3 if cuda else 1)
    return pool
