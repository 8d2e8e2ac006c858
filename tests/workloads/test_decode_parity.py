"""The parity check passes the device decode path autotune derives from a pipeline, and rejects a wrong one.

On a CPU the device path runs inline, the same code as on a GPU (autotune.loop.device_decode). The
wrong one is the derived pipeline with its horizontal flip turned vertical: on `jpeg_halves`, whose
class is which half of the image is bright, half of its flipped images then lie about their class.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from autotune.config import Config
from autotune.loop import Step
from autotune.study import parity
from autotune.trial import parity_run
from autotune.trial.runner import Runner
from autotune.workloads import load, resolve
from autotune.workloads.decode import Flip

WORKLOAD = Path(__file__).parents[1] / "fixtures" / "jpeg_halves.py"
BASELINE = Config(batch_size=16)
GPU_DECODE = Config(batch_size=16, decode="gpu")


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> tuple[Runner, parity_run.ProbeSet, parity_run.ParityRun]:
    runner = Runner(load(resolve(str(WORKLOAD))), torch.device("cpu"), root=tmp_path_factory.mktemp("data"))
    probe = parity_run.probe(runner.dataset)
    samples, _ = parity.run_length(16, 16, baseline_rate=20.0)  # as a search sizes it for a slow baseline: 1,024
    return runner, probe, parity_run.train(runner.build, BASELINE, 0.05, samples, probe, 16)


def judge(bench: tuple[Runner, parity_run.ProbeSet, parity_run.ParityRun], build: Any = None) -> parity.ParityVerdict:
    runner, probe, base = bench
    samples, window = parity.run_length(16, 16, baseline_rate=20.0)
    run = parity_run.train(build or runner.build, GPU_DECODE, 0.05, samples, probe, 16)
    return parity.compare(base, run, parity.family(BASELINE, GPU_DECODE), samples, window)


def vertical_flips(runner: Runner) -> Any:
    """Runner.build, with the decoding loader's flip turned from horizontal to vertical."""

    def build(config: Config, lr: float) -> tuple[Any, Step, float]:
        loader, step, seconds = runner.build(config, lr)
        geometry = tuple(Flip(g.p, "vertical") if isinstance(g, Flip) else g for g in loader.pipeline.geometry)
        loader.pipeline = dataclasses.replace(loader.pipeline, geometry=geometry)
        return loader, step, seconds

    return build


@pytest.mark.slow
def test_the_derived_device_pipeline_trains_like_the_cpu_one(bench: Any) -> None:
    verdict = judge(bench)
    assert verdict.passed and verdict.family == "numerics", verdict.summary()


@pytest.mark.slow
def test_a_device_pipeline_that_flips_the_wrong_axis_is_rejected(bench: Any) -> None:
    verdict = judge(bench, vertical_flips(bench[0]))
    assert not verdict.passed, verdict.summary()
    # It learns nothing of what the baseline learned: its loss stays near log 2, on the probe set too.
    assert verdict.deviation is not None and verdict.deviation > 0.9
    assert verdict.probe_deviation is not None and verdict.probe_deviation > 0.9
