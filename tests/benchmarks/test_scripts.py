"""The benchmark scripts' loops run on a CPU: they only run on a GPU host otherwise, where a broken one costs a call.

Seen on an H200: `benchmarks/speed.py` ran its three searches (288 s), then failed at its first row, because
its seed loop still took `(x, y)` where a measurement hands a step one batch.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch.utils.data import TensorDataset

from autotune.config import Config
from autotune.trial.timing import Windows
from autotune.workloads import load, resolve

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _script(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("BENCH_DEVICE", "cpu")
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_speed_times_the_seeds_loop_as_written_and_runs_it_end_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    speed = _script("speed", monkeypatch)
    monkeypatch.setattr(speed, "WINDOWS", Windows(warmup_steps=2, window_s=0.05, min_windows=3, max_windows=4))
    images = TensorDataset(torch.rand(512, 1, 28, 28), torch.randint(0, 10, (512,)))
    assert speed.rate_of(*speed.seed_loop_as_written(images)) > 0
    step, loader = speed.seed_loop_as_written(images)
    assert speed.whole_run(step, loader, epochs=1) > 0
    assert loader.batch_size == 128 and loader.num_workers == 0  # the seed's loop, as written


def test_truth_times_a_config_by_hand(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    truth = _script("truth", monkeypatch)
    config = Config(batch_size=32, num_workers=2, prefetch_factor=2, persistent_workers=True)
    result = truth.by_hand(load(resolve("tiny")), config, 0.05, 0.5, torch.device("cpu"))
    assert result["seconds"] >= 0.5
    assert result["samples"] > 0 and result["samples"] % 32 == 0  # whole batches of 32 (of a data set of 512)
    assert result["samples_per_s"] == pytest.approx(result["samples"] / result["seconds"])
