"""amp at the baseline's batch is judged by its gradients, with no training run: a check that passes it or rejects it,
an inconclusive baseline or not.

Verdicts on fabricated numbers here (tests/parity/test_by_gradients.py: which configs get no run);
tests/trial/test_gradients.py computes them for real.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from autotune.config import Config
from autotune.parity.check import ParityCheck
from autotune.parity.inputs import judge as judge_inputs
from autotune.parity.numerics import NumericsVerdict, failed, judge
from autotune.parity.run import ParityRun
from autotune.tuned.schema import validate, validate_parity
from autotune.tuned.show import render

BASE = Config(batch_size=16)


def found(error: float, noise: float = 1.0, finite: bool = True) -> dict:
    return {"error": error, "noise": noise, "signal": 0.5, "finite": finite, "batches": 8, "batch_size": 16,
            "seconds": 2.0}


@pytest.mark.parametrize(
    ("numbers", "passed", "ratio"),
    [
        (found(0.12), True, 0.12),  # ResNet-18 in bf16, measured on a CPU
        (found(0.25), True, 0.25),  # the limit itself
        (found(0.3), False, 0.3),
        (found(0.0, noise=0.0), True, 0.0),  # one batch's gradient only, met exactly
        (found(0.1, noise=0.0), False, math.inf),
    ],
)
def test_amp_passes_when_its_error_is_at_most_a_quarter_of_the_batch_s_noise(
    numbers: dict, passed: bool, ratio: float
) -> None:
    verdict = judge(numbers, "bf16")
    assert (verdict.passed, verdict.ratio, verdict.reason) == (passed, ratio, None)


def test_a_gradient_that_is_not_finite_fails_whatever_the_ratio() -> None:
    verdict = judge(found(0.01, finite=False), "fp16")
    assert not verdict.passed
    assert verdict.summary() == "numerics check of fp16: a gradient is not finite (inf or NaN)"


def inconclusive_run(config: Config, lr: float, samples: int) -> ParityRun:
    """Random labels: every run, the baseline's included, learns 0.4% of its initial loss 2.0."""
    return ParityRun(config.batch_size, lr, 2.0, 1.992, (samples,), (1.992,), True, 0.0)


@pytest.mark.parametrize("within", [True, False])
def test_an_inconclusive_check_judges_amp_by_its_gradients_once_per_dtype_and_memory_format(within: bool) -> None:
    bf16_cl = Config(batch_size=16, amp="bf16", channels_last=True)
    bf16_cl_graph = Config(batch_size=16, amp="bf16", channels_last=True, cuda_graph=True, num_workers=2)
    bf16_larger = Config(batch_size=64, amp="bf16", channels_last=True)
    fp16 = Config(batch_size=16, amp="fp16")
    checked: list[Config] = []

    def check_numerics(config: Config) -> NumericsVerdict:
        checked.append(config)
        return judge(found(0.12 if within else 0.4), config.amp)

    lines: list[str] = []
    gate = ParityCheck(BASE, lambda c: 0.05, inconclusive_run, [bf16_cl], lines.append,
                       check_numerics=check_numerics)
    ranked = [bf16_larger, bf16_cl, bf16_cl_graph, fp16]
    passed = gate.select(ranked, want=4, max_runs=5)
    assert gate.conclusive is False
    assert checked == [bf16_cl, fp16], "one check per dtype and memory format; none for a new batch size"
    assert gate.verdicts[bf16_larger].word == "inconclusive", "a new batch size is still judged by a run alone"
    summary = (f"bf16's gradients are {'within' if within else 'beyond'} the batch's own noise: their error is "
               f"{0.12 if within else 0.4:.3g}x the variance of fp32's gradient from batch to batch (limit 0.25x), "
               f"8 batches of 16")
    assert f"  numerics {'pass' if within else 'FAIL':<6} {summary}  [2.0 s]" in lines
    verdict = gate.verdicts[bf16_cl]
    assert (verdict.numerics_passed, verdict.numerics_ratio) == (within, 0.12 if within else 0.4)
    # Its gradients judge it, whatever the baseline's run learned: conclusively, a pass as a rejection.
    assert verdict.reason == f"judged by its gradients, with no training run: {summary}"
    assert verdict.conclusive
    if within:
        assert passed == [bf16_cl, bf16_cl_graph, fp16]
        assert verdict.passed
    else:
        assert passed == []
        assert verdict.word == "REJECT"
    record = gate.record(bf16_cl)
    assert (record["numerics_passed"], record["numerics_ratio"]) == (within, 0.12 if within else 0.4)
    assert validate_parity("parity", record) == []


def test_device_decode_with_amp_needs_both_its_images_and_its_gradients() -> None:
    both = Config(batch_size=16, decode="gpu", amp="bf16")
    lines: list[str] = []
    gate = ParityCheck(
        BASE, lambda c: 0.05, inconclusive_run, [both], lines.append,
        check_inputs=lambda c: judge_inputs({"host_to_host": 1.0, "host_to_device": 0.9, "images": 64, "draws": 32,
                                             "seconds": 3.0}),
        check_numerics=lambda c: judge(found(0.1), c.amp),
    )
    assert gate.select([both], want=1, max_runs=1) == [both]
    verdict = gate.verdicts[both]
    assert verdict.reason is not None and verdict.reason.startswith("decode: the device path's images match")
    assert "; judged by its gradients, with no training run: bf16's gradients are within the batch's own noise" in (
        verdict.reason)
    assert (verdict.inputs_passed, verdict.numerics_passed, verdict.conclusive) == (True, True, True)


def test_a_numerics_check_that_failed_to_run_leaves_amp_unjudged_not_rejected() -> None:
    bf16 = Config(batch_size=16, amp="bf16")
    gate = ParityCheck(BASE, lambda c: 0.05, inconclusive_run, [bf16], lambda line: None,
                       check_numerics=lambda c: failed("timeout: no result within 90 s", c.amp))
    assert gate.select([bf16], want=1, max_runs=1) == []
    verdict = gate.verdicts[bf16]
    assert (verdict.word, verdict.numerics_passed, verdict.numerics_ratio) == ("inconclusive", False, None)
    assert verdict.reason == ("numerics check of bf16: failed to run: timeout: no result within 90 s; only its "
                              "gradients judge a change of amp or compile, with no training run")


def test_a_check_without_a_numerics_check_cannot_judge_amp() -> None:
    gate = ParityCheck(BASE, lambda c: 0.05, inconclusive_run, [], lambda line: None)
    bf16 = Config(batch_size=16, amp="bf16")
    assert gate.select([bf16], want=1, max_runs=1) == []
    assert gate.verdicts[bf16].word == "inconclusive" and gate.verdicts[bf16].numerics_passed is None


def test_the_schema_lets_amp_pass_an_inconclusive_check_only_by_its_gradients() -> None:
    knobs = {"batch_size": 16, "num_workers": 0, "pin_memory": False, "persistent_workers": False,
             "cudnn_benchmark": False, "channels_last": True, "amp": "bf16", "cuda_graph": False,
             "placement": "stream"}
    check = {"checked": True, "passed": True, "conclusive": False, "family": "numerics", "tolerance": 0.05,
             "samples": 8192, "window": 2048, "lr": 0.05, "baseline_lr": 0.05, "configs_checked": 1,
             "configs_rejected": 0, "check_s": 1.0}
    profile = {"samples_per_s": 2.0, "baseline_samples_per_s": 1.0, "speedup": 2.0, "versions": {}, "knobs": knobs,
               "parity": check}
    assert validate({"schema": 1, "profiles": {"cpu": profile}}) == [
        "profiles.'cpu'.knobs.amp must be 'off' when profiles.'cpu'.parity says passed and conclusive = false (an "
        "inconclusive check passes only configs that leave the math unchanged), but got 'bf16'"
    ]
    profile["parity"] = {**check, "numerics_passed": True, "numerics_ratio": 0.031}
    assert validate({"schema": 1, "profiles": {"cpu": profile}}) == []
    shown = render({"schema": 1, "profiles": {"cpu": profile}}, Path("x.tuned.toml")).splitlines()
    assert [line for line in shown if line.startswith("parity numerics")] == [
        "parity numerics          within: error 0.031x the batch noise"
    ]
