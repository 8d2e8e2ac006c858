"""A loop's two parts, measured apart in a trial process: its step on device-resident batches, and its loader alone.

A loop runs at about the slower of the two where they overlap (DataLoader workers, a
GPU's queue), and at their harmonic sum where one process does both in turn (no
workers on a CPU). These are the feeds ``autotune diagnose`` times (``(a)`` and
``(b)``, ``autotune.trial.probe``): the step fed synthetic batches of the
workload's own structure already on the device, and the loader with the model
removed, each batch copied to the device. Each takes seconds where an end-to-end
trial of a heavy model takes most of a minute; ``autotune.study.planning.valuation`` turns
them into a predicted rate per config.
"""

from __future__ import annotations

import dataclasses
import gc
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import IterableDataset

from autotune.batch import map_tensors, to_device
from autotune.config import Config
from autotune.loop.graph import GRAPH_WARMUP_STEPS
from autotune.trial.probe import Repeat, probe, synthetic
from autotune.trial.timing import Windows

# Short windows, as a diagnosis's, and never measured longer: a part is a guide to which configs to measure, and the
# interference factor learned from the end-to-end trials absorbs what is systematic in its error. A heavy model's
# step takes longer than a window, so each window is a step: a part is then a few of its steps, seconds
# (docs/search.md#the-plan-and-valuation).
PART_WINDOWS = Windows(warmup_steps=5, window_s=0.1, min_windows=3, max_windows=6, rel_tol=0.05, boundaries=1,
                       extra_windows=0, backlog_held=True)
STEADY = 0.25  # a warm-up step within this share of the one before it: the step is warm, its windows may begin
WARM_AT_LEAST = 2  # steps: the first compiles, autotunes, allocates; the second shows whether that is done
STEP_ONLY = ("amp", "cuda_graph", "compile", "cudnn_benchmark")  # knobs the step's batch does not depend on


def step_rate(runner: Any, config: Config, lr: float, windows: Windows = PART_WINDOWS) -> dict[str, float]:
    """Samples/s of `config`'s step on synthetic batches of the workload's structure, already on the device."""
    # One batch of the loop's own structure is all the step needs: made in this process, not by the config's
    # workers, whose start (as many as the cores, each decoding a batch of JPEGs) the step never uses.
    alone = dataclasses.replace(config, num_workers=0, persistent_workers=False, prefetch_factor=None)
    began = time.perf_counter()
    loader, step, _ = runner.build(alone, lr)
    built = time.perf_counter()
    on_device = to_device(first_batch(runner, alone, loader), runner.device)
    del loader
    fed = Repeat(synthetic(on_device), count=runner.workload.count)
    fed_at = time.perf_counter()
    # A graph captures after its eager warm-up steps, then replays: its windows begin once it replays.
    least = WARM_AT_LEAST + (GRAPH_WARMUP_STEPS + 1 if config.cuda_graph else 0)
    warmed = warm_up(step, fed, runner.device, least, max(least, windows.warmup_steps))
    warm_at = time.perf_counter()
    p = probe("step", step, fed, runner.device, dataclasses.replace(windows, warmup_steps=0), runner.workload.count)
    # What its compile cost, where it compiles: the search weighs it against the best declared run
    # (autotune.study.planning.compile_cost). Where its seconds went: the plan's line of each part says.
    made = {"samples_per_s": p.samples_per_s, "spread": p.spread, "seconds": round(p.seconds, 3),
            "compile_s": round(step.compile_s, 3), "build_s": round(built - began, 3),
            "first_batch_s": round(fed_at - built, 3), "warmup_s": round(warm_at - fed_at, 3), "warmup_steps": warmed}
    if config.compile != "off":
        del step  # its graphs and its memory go before the second step is built
        gc.collect()
        if runner.device.type == "cuda":
            torch.cuda.empty_cache()
        try:
            made["recompile_s"] = round(recompile_s(runner, alone, lr, fed), 3)
        except Exception:  # noqa: BLE001  (an OOM, a compile error: the rate stands, without a second compile)
            pass
    return made


def first_batch(runner: Any, alone: Config, loader: Any) -> Any:
    """The first batch `loader` makes, kept on the host for the next step part of the same batch: a step rate at
    another amp, graph or compile takes the same batch, and a batch of a heavy model's JPEGs, decoded in this process,
    costs seconds to make again. One is kept, the latest: the plan asks for a batch's step variants in a row."""
    key = tuple((k, v) for k, v in alone.as_dict().items() if k not in STEP_ONLY)
    kept = runner.part_batch
    if kept is not None and kept[0] == key:
        return kept[1]
    made = map_tensors(next(iter(loader)), lambda t: t.cpu())  # none of the device's memory held between requests
    runner.part_batch = (key, made)
    return made


def recompile_s(runner: Any, alone: Config, lr: float, fed: Repeat) -> float:
    """Seconds the compile of `alone`'s step takes again in this process, after the part paid the whole compile: what
    the trial of that config pays here. Dynamo traces again; Inductor finds its graphs in memory and in the compile
    cache (``autotune.procs.compile_cache``). A fresh process pays more: ResNet-50 on an H100 compiled in 1.8 s here,
    in 16.2 s in a fresh process from the cache, in 41.5 s cold."""
    _, step, _ = runner.build(alone, lr)  # resets Dynamo: it traces again
    batch = next(iter(fed))
    step(batch)
    if runner.device.type == "cuda":
        torch.cuda.synchronize(runner.device)
    return float(step.compile_s)


def warm_up(step: Callable[[Any], Any], fed: Repeat, device: torch.device, least: int, most: int,
            clock: Callable[[], float] = time.perf_counter) -> int:
    """Run `step` on `fed`'s batches until it is warm: at least `least` steps, then until one takes within STEADY of
    the one before it, at most `most`; the steps it took. Five fixed warm-up steps of a heavy model cost seconds a
    part, most of them after its rate is steady."""
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    batches = iter(fed)
    took: list[float] = []
    while len(took) < most:
        start = clock()
        step(next(batches))
        sync()
        took.append(clock() - start)
        if len(took) >= least and abs(took[-1] - took[-2]) <= STEADY * took[-2]:
            break
    return len(took)


def loader_rate(runner: Any, config: Config, lr: float, windows: Windows = PART_WINDOWS) -> dict[str, float]:
    """Samples/s of `config`'s loader alone, each batch copied to the device; each epoch's start-up spread over it."""
    if config.persistent_workers or config.num_workers == 0 or isinstance(runner.dataset, IterableDataset):
        # An epoch's start costs such a loader little (its workers stay up, or there are none), and timing one
        # costs a whole epoch (docs/measuring.md, "How it measures"). What the start does cost is in the
        # interference factor the end-to-end trials learn. A stream's start (its shards opened, its buffer filled)
        # is its time to the first batch, which its trials measure apart; reaching its next one is a whole pass.
        windows = dataclasses.replace(windows, boundaries=0)
    began = time.perf_counter()
    loader, _, _ = runner.build(config, lr)
    built = time.perf_counter()
    non_blocking = config.pin_memory and runner.device.type == "cuda"

    def copy(batch: Any) -> Any:
        return to_device(batch, runner.device, non_blocking)

    p = probe("loader", copy, loader, runner.device, windows, runner.workload.count)
    return {"samples_per_s": p.end_to_end, "spread": p.spread, "seconds": round(p.seconds, 3),
            "build_s": round(built - began, 3), "warmup_s": round(p.setup_s, 3), "backlog_steps": p.backlog_steps}


def measure(runner: Any, config: Config, lr: float, which: list[str]) -> dict[str, dict[str, float]]:
    """The parts named in `which` ("step", "loader") of `config`, each measured once."""
    made: dict[str, dict[str, float]] = {}
    if "step" in which:
        made["step"] = step_rate(runner, config, lr)
    if "loader" in which:
        made["loader"] = loader_rate(runner, config, lr)
    return made
