"""A loss that became NaN or inf fails its trial with a reason naming the step and the config; the search goes on.

The workload is real (tests/fixtures/tiny.py with TINY_FAIL=nan: its output becomes NaN from a given training step,
at batch 64 and above); the losses are read where the measurement synchronises anyway, never inside a window.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from autotune.config import Config
from autotune.procs.pool import TrialPool
from autotune.trial.losses import LossWatch, NonFiniteLoss
from autotune.trial.runner import Runner
from autotune.trial.timing import Windows
from autotune.workloads import load, resolve

QUICK = Windows(warmup_steps=2, window_s=0.05, min_windows=2, max_windows=3, boundaries=1)


def test_the_losses_are_read_only_when_checked_and_the_first_bad_step_is_named() -> None:
    values = [1.0, 0.5, float("inf"), float("nan")]
    watch = LossWatch(lambda i: torch.tensor(values[i]), "bs=16 workers=0")
    for i in range(2):
        watch(i)
    watch.check()  # finite so far
    for i in range(2, 4):
        assert watch(i) is not None
    assert len(watch._kept) == 2, "kept, unread, until the check"
    with pytest.raises(NonFiniteLoss, match=r"^the loss became inf at step 3 \(bs=16 workers=0\)$"):
        watch.check()
    with pytest.raises(NonFiniteLoss, match=r"^the loss became inf at step 3 "):  # the first one stays the one named
        watch.check()


@pytest.mark.parametrize("step", [1, 7])  # 7: warm-up, the first window's probe, and two windows take more
def test_a_diverging_loss_fails_the_measurement_at_its_step(
    project: Path, monkeypatch: pytest.MonkeyPatch, step: int
) -> None:
    monkeypatch.setenv("TINY_FAIL", "nan")
    monkeypatch.setenv("TINY_NAN_STEP", str(step))
    runner = Runner(load(resolve("tiny")), torch.device("cpu"))
    config = Config(batch_size=64)
    with pytest.raises(NonFiniteLoss, match=rf"^the loss became NaN at step {step} \({config.describe()}\)$"):
        runner.run(config, 0.05, QUICK)
    assert runner.run(Config(batch_size=16), 0.05, QUICK)["samples_per_s"] > 0  # a smaller batch: no NaN


def test_a_trial_whose_loss_diverges_fails_with_the_step_and_config_and_the_next_trial_runs(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TINY_FAIL", "nan")
    monkeypatch.setenv("TINY_NAN_STEP", "7")
    pool = TrialPool(project / "recipes" / "tiny.py", "cpu", 1, project / "logs", timeout_s=60.0)
    try:
        diverged = Config(batch_size=64, amp="bf16")
        outcome = pool.run(diverged, 0.2, QUICK)
        assert (outcome.state, outcome.reason) == ("failed", f"the loss became NaN at step 7 ({diverged.describe()})")
        outcome = pool.run(Config(batch_size=16), 0.05, QUICK)
        assert outcome.state == "complete" and outcome.result is not None and outcome.result["samples_per_s"] > 0
    finally:
        pool.stop()
