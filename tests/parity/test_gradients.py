"""The numerics check in a trial process: amp's gradients against fp32's, in units of the batch's own noise.

The broken numerics are real bugs, built for real: fp16 without a GradScaler on a
workload whose gradients underflow (tests/fixtures/underflow.py), and a model whose
features bf16 rounds away (tests/fixtures/tiny.py with TINY_OFFSET=256). CPU autocast is real autocast;
`pytest -m gpu tests/trial/test_gradients.py` runs the same on CUDA.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from _steps import NoScalerStep, with_step
from torch import nn

from autotune.config import Config
from autotune.loop import Step
from autotune.parity import gradients
from autotune.parity import numerics as parity_numerics
from autotune.trial.runner import Runner
from autotune.workloads import load, resolve

FIXTURES = Path(__file__).parents[1] / "fixtures"
BASE = Config(batch_size=16)


def runner(name: str, root: Path, device: str = "cpu") -> Runner:
    return Runner(load(resolve(str(FIXTURES / name))), torch.device(device), root=root)


def checked(
    run: Runner, amp: str, build: object = None, channels_last: bool = False
) -> parity_numerics.NumericsVerdict:
    config = Config(batch_size=16, amp=amp, channels_last=channels_last)
    found = gradients.compare(build or run.build, BASE, config, float(run.workload.defaults["lr"]))
    assert (found["batches"], found["batch_size"]) == (gradients.BATCHES, 16)
    return parity_numerics.judge(found, amp)


def test_fp16_with_its_scaler_and_bf16_keep_the_gradients_and_fp16_without_a_scaler_loses_them(
    tmp_path: Path,
) -> None:
    run = runner("underflow.py", tmp_path)
    scaled, bf16 = checked(run, "fp16"), checked(run, "bf16")
    assert scaled.passed and scaled.ratio < 0.01, scaled.summary()
    assert bf16.passed and bf16.ratio < 0.01, bf16.summary()
    lost = checked(run, "fp16", with_step(run, NoScalerStep))
    assert not lost.passed and lost.reason is None
    # Every gradient underflowed to zero: the error is each fp32 gradient's whole square, the mean's plus the noise.
    found = gradients.compare(with_step(run, NoScalerStep), BASE, Config(batch_size=16, amp="fp16"),
                              float(run.workload.defaults["lr"]))
    batches = gradients.BATCHES
    assert found["error"] == pytest.approx(found["signal"] + found["noise"] * (batches - 1) / batches, rel=1e-9)
    assert lost.summary() == (
        f"fp16's gradients are beyond the batch's own noise: their error is {lost.ratio:.3g}x the variance of fp32's "
        f"gradient from batch to batch (limit 0.25x), 8 batches of 16"
    )


def test_a_model_whose_features_bf16_rounds_away_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINY_OFFSET", "256")
    run = runner("tiny.py", tmp_path)
    assert checked(run, "off", channels_last=True).ratio < 1e-6  # fp32 with another memory format: the same math
    broken = checked(run, "bf16")
    assert not broken.passed and broken.ratio > 1, broken.summary()


def test_the_gradients_are_compared_at_the_weights_the_baseline_trained_to(tmp_path: Path) -> None:
    run = runner("tiny.py", tmp_path)
    steps: list[Step] = []
    trained: list[int] = []

    class Counted(Step):
        def __call__(self, *batch: Any) -> torch.Tensor:
            trained.append(len(steps))
            return super().__call__(*batch)

        def gradient(self, batch: Any) -> list[torch.Tensor]:
            # Every gradient, the candidate's too, is taken at the baseline's weights after its steps.
            assert all(torch.equal(a, b) for a, b in zip(self.model.parameters(), steps[0].model.parameters()))
            return super().gradient(batch)

    def build(config: Config, lr: float) -> tuple[Any, Step, float]:
        loader, step, seconds = with_step(run, Counted)(config, lr)
        steps.append(step)
        return loader, step, seconds

    found = gradients.compare(build, BASE, Config(batch_size=16, amp="bf16"), 0.05)
    assert found["warm_steps"] == 50 and trained == [1] * 50, "50 steps of the baseline (one build), none after"
    assert len(steps) == 2 and steps[1].config.amp == "bf16"


def dropout_step(amp: str, optimised: slice = slice(None)) -> Step:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 64), nn.Dropout(0.5), nn.Linear(64, 4))
    params = list(model.parameters())[optimised]
    return Step(model, nn.CrossEntropyLoss(), torch.optim.SGD(params, lr=0.1), Config(batch_size=16, amp=amp),
                torch.device("cpu"))


BATCH = (torch.linspace(-1, 1, 128).view(16, 8), torch.arange(16) % 4)


def test_fp16_s_gradient_backs_off_an_overflowing_scale_on_the_same_dropout_mask() -> None:
    step = dropout_step("fp16")

    def gradient(scale: float) -> torch.Tensor:
        step.scaler = torch.amp.GradScaler("cpu", init_scale=scale)
        torch.manual_seed(1)
        return torch.cat([g.flatten() for g in step.gradient(step.to_device(BATCH))])

    backed_off = gradient(2.0**40)  # fp16's largest is 65,504: the scaled gradient overflows, and is run again
    assert torch.isfinite(backed_off).all()
    torch.testing.assert_close(backed_off, gradient(2.0**8), rtol=2e-2, atol=1e-4)


def test_a_gradient_is_the_batch_s_alone_for_parameters_the_optimizer_does_not_hold() -> None:
    step = dropout_step("off", optimised=slice(2, None))  # the first layer frozen: not in the optimizer
    torch.manual_seed(1)
    first = step.gradient(step.to_device(BATCH))[0].clone()
    torch.manual_seed(1)
    assert torch.equal(step.gradient(step.to_device(BATCH))[0], first), "no gradient left over from the last call"
    assert all(p.grad is None for p in step.model.parameters())


def test_the_candidate_s_numerics_at_the_baseline_s_batch() -> None:
    candidate = Config(batch_size=256, num_workers=8, amp="bf16", channels_last=True, cuda_graph=True, decode="gpu",
                       cudnn_benchmark=True)
    assert gradients.numerics_of(BASE, candidate) == Config(batch_size=16, amp="bf16", channels_last=True)


def test_a_search_s_trial_process_makes_the_numerics_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check as a search asks for it: in a trial process of the workload, its numbers sent back as data."""
    from autotune.procs.pool import TrialPool

    monkeypatch.setenv("AUTOTUNE_DATA", str(tmp_path / "data"))
    pool = TrialPool(FIXTURES / "underflow.py", "cpu", 1, tmp_path / "logs", 60.0)
    try:
        outcome = pool.numerics_check(BASE, Config(batch_size=16, amp="bf16", num_workers=2), 0.05, 60.0)
    finally:
        pool.stop()
    assert outcome.state == "complete" and outcome.result is not None, outcome.reason
    verdict = parity_numerics.judge(outcome.result, "bf16")
    assert verdict.passed and verdict.batches == 8 and verdict.batch_size == 16


@pytest.mark.gpu
def test_gpu_bf16_and_scaled_fp16_pass_and_the_broken_ones_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    run = runner("underflow.py", tmp_path, "cuda")
    assert checked(run, "bf16").passed and checked(run, "fp16").passed
    assert checked(run, "bf16", channels_last=True).passed
    assert not checked(run, "fp16", with_step(run, NoScalerStep)).passed
    monkeypatch.setenv("TINY_OFFSET", "256")
    assert not checked(runner("tiny.py", tmp_path, "cuda"), "bf16").passed
