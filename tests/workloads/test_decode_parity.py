"""The parity check passes the device decode path autotune derives from a pipeline, and rejects a wrong one,
by a training run and by the inputs check (the images alone).

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
from autotune.parity import images as inputs
from autotune.parity import inputs as parity_inputs
from autotune.parity import run as parity_run
from autotune.parity import verdict as parity
from autotune.trial.runner import Runner
from autotune.workloads import load, resolve
from autotune.workloads.decode import Flip, RandomResizedCrop, derive

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
@pytest.mark.steady  # a small model in this process, on one thread: it may run beside the alone tests
def test_the_derived_device_pipeline_trains_like_the_cpu_one(bench: Any) -> None:
    verdict = judge(bench)
    assert verdict.passed and verdict.family == "numerics", verdict.summary()


@pytest.mark.slow
@pytest.mark.steady  # a small model in this process, on one thread: it may run beside the alone tests
def test_a_device_pipeline_that_flips_the_wrong_axis_is_rejected(bench: Any) -> None:
    verdict = judge(bench, vertical_flips(bench[0]))
    assert not verdict.passed, verdict.summary()
    # It learns nothing of what the baseline learned: its loss stays near log 2, on the probe set too.
    assert verdict.deviation is not None and verdict.deviation > 0.9
    assert verdict.probe_deviation is not None and verdict.probe_deviation > 0.9


# -- the inputs check: the device path's images against the host pipeline's, no training -------------------------


def halves_dataset(root: Path) -> Any:
    return load(resolve(str(WORKLOAD))).build_dataset(root)


def _wrong(pipeline: Any, flip_axis: str | None = None, scale: tuple[float, float] | None = None) -> Any:
    geometry = tuple(
        Flip(g.p, flip_axis) if isinstance(g, Flip) and flip_axis
        else dataclasses.replace(g, scale=scale) if isinstance(g, RandomResizedCrop) and scale
        else g
        for g in pipeline.geometry
    )
    return dataclasses.replace(pipeline, geometry=geometry)


@pytest.fixture(scope="module")
def halves(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return halves_dataset(tmp_path_factory.mktemp("halves"))


def test_the_derived_device_path_makes_the_host_pipelines_images(halves: Any) -> None:
    found = inputs.compare(halves, torch.device("cpu"), workers=2)
    verdict = parity_inputs.judge(found)
    assert verdict.passed, verdict.summary()
    assert (verdict.images, verdict.draws) == (64, 32)
    assert 0.5 < verdict.host_to_host < 3.0, "about 1: two draws of one pipeline"


@pytest.mark.parametrize(
    ("flip_axis", "scale"),
    [("vertical", None), (None, (0.15, 1.0))],  # the flip's axis; RandomResizedCrop(scale=(0.6, 1)) drawn wider
)
def test_a_device_path_with_a_wrong_flip_or_crop_scale_makes_other_images(
    halves: Any, flip_axis: str | None, scale: tuple[float, float] | None
) -> None:
    pipeline, files = derive(halves)
    found = inputs.compare(halves, torch.device("cpu"), workers=2, pipeline=_wrong(pipeline, flip_axis, scale),
                           files=files)
    verdict = parity_inputs.judge(found)
    assert not verdict.passed, verdict.summary()
    assert verdict.host_to_device > 5 * parity_inputs.LIMIT * verdict.host_to_host


def test_distance_is_about_one_for_two_draws_of_one_distribution_and_names_bad_shapes() -> None:
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 32, 48, generator=g, dtype=torch.float64), torch.randn(64, 32, 48, generator=g,
                                                                                  dtype=torch.float64)
    assert 0.9 < parity_inputs.distance(a, b) < 1.15
    # Every block one standard deviation brighter: the means 1 + 1 / (2 / 32) = 17 apart, the spreads 1; (17 + 1) / 2.
    assert 8.5 < parity_inputs.distance(a, b + 1.0) < 9.5
    with pytest.raises(ValueError, match=r"but got \(64, 32, 48\) and \(64, 2, 48\)"):
        parity_inputs.distance(a, b[:, :2])


def test_a_search_s_trial_process_makes_the_inputs_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check as a search asks for it: in a trial process of the workload, its distances sent back as data."""
    from autotune.procs.pool import TrialPool

    monkeypatch.setenv("AUTOTUNE_DATA", str(tmp_path / "data"))
    pool = TrialPool(WORKLOAD, "cpu", 2, tmp_path / "logs", 60.0)
    try:
        outcome = pool.inputs_check(GPU_DECODE, 60.0)
    finally:
        pool.stop()
    assert outcome.state == "complete" and outcome.result is not None, outcome.reason
    assert parity_inputs.judge(outcome.result).passed
    assert (outcome.result["images"], outcome.result["draws"]) == (64, 32)


@pytest.mark.gpu
def test_gpu_the_inputs_check_on_the_device_passes_the_derived_path_and_rejects_a_wrong_flip(halves: Any) -> None:
    pipeline, files = derive(halves)
    right = parity_inputs.judge(inputs.compare(halves, torch.device("cuda"), workers=4))
    wrong = parity_inputs.judge(inputs.compare(halves, torch.device("cuda"), workers=4,
                                               pipeline=_wrong(pipeline, "vertical"), files=files))
    assert right.passed and not wrong.passed, (right.summary(), wrong.summary())
