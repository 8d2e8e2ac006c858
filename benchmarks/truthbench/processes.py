"""The processes the truth benchmark starts: each hand slice in one started afresh, each autotune round in a trial one.

Afresh, as a user's training script starts, not in the process that ran the rows before (their heaps, pinned buffers
and CUDA caches); autotune's rounds in trial processes, as a search measures a finalist.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import torch

from autotune.config import Config
from autotune.procs.pool import TrialPool
from autotune.trial.timing import Windows
from autotune.workloads import load, resolve

from .loop import by_hand

SEARCH_WINDOWS = Windows(window_s=0.2)  # what a search times a trial with on a GPU (autotune.study.setup)


def in_a_fresh_process(workload_path: Path, config: Config, lr: float, seconds: float,
                       device: torch.device, longest: float | None = None) -> dict[str, Any]:
    """`by_hand` in a process of its own, started afresh, as a user's training script runs.

    Not in this one, which has run the rows before (their heaps, pinned buffers and CUDA caches), while
    autotune measures each config in a trial process started for the search.
    """
    context = multiprocessing.get_context("spawn")
    results, sender = context.Pipe(duplex=False)
    process = context.Process(target=hand_loop_process, args=(str(workload_path), config, lr, seconds, str(device),
                                                              sender, longest))
    process.start()
    sender.close()  # ours: the pipe ends (EOFError) when the child's end closes, with or without a result
    try:
        result = results.recv()
    except EOFError:
        result = RuntimeError(f"its process ended without a result, with exit status {process.exitcode}")
    finally:
        process.join()
    if isinstance(result, Exception):
        raise SystemExit(f"the hand loop of {config.describe()} failed: {result}")
    return result


def hand_loop_process(workload_path: str, config: Config, lr: float, seconds: float, device: str,
                      sender: Any, longest: float | None = None) -> None:
    """A hand loop's process: `by_hand` on the workload at `workload_path`, its result (or failure) sent back."""
    # A spawned child inherits the spawn start method; the loop's DataLoader workers must start the way a
    # training script's do on Linux, by fork (spawned, they could not even unpickle the workload's data set).
    multiprocessing.set_start_method("fork", force=True)
    try:
        result: Any = by_hand(load(resolve(workload_path)), config, lr, seconds, torch.device(device), longest)
    except Exception as exc:  # said by the parent; an exception need not pickle, its text does
        result = RuntimeError(f"{type(exc).__name__}: {exc}")
    sender.send(result)
    sender.close()


def by_autotune(workload_path: Path, config: Config, lr: float, cores: int, logs: Path,
                device: torch.device) -> dict[str, Any]:
    """autotune's measurement, made as a search makes it: a trial process, the search's windows."""
    pool = TrialPool(workload_path, str(device), cores, logs, timeout_s=600.0)
    try:
        outcome = pool.run(config, lr, SEARCH_WINDOWS)
    finally:
        pool.stop()
    if outcome.state != "complete" or outcome.result is None:
        raise SystemExit(f"autotune could not measure {config.describe()}: {outcome.reason}")
    return outcome.result
