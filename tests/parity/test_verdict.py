"""The parity check's verdict maths and its walk over the fastest configs, on fabricated runs."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from autotune.config import Config
from autotune.parity import verdict as parity
from autotune.parity.check import ParityCheck
from autotune.parity.run import ParityRun
from autotune.parity.verdict import ParityRunFailed
from autotune.tuned.schema import validate_parity


def test_run_length_gives_a_large_batch_eight_steps() -> None:
    assert parity.run_length(128, 128) == (65536, 16384)
    assert parity.run_length(128, 8192) == (65536, 16384)
    assert parity.run_length(16, 4096) == (32768, 8192)


@pytest.mark.parametrize(
    ("candidate", "expected"),
    [
        (Config(batch_size=128, num_workers=4, pin_memory=True, prefetch_factor=2), "loader"),
        (Config(batch_size=128, placement="device"), "numerics"),
        (Config(batch_size=128, amp="bf16"), "numerics"),
        (Config(batch_size=1024), "batch_size"),
        (Config(batch_size=1024, amp="bf16", cuda_graph=True), "batch_size"),
    ],
)
def test_family_is_the_loosest_that_applies(candidate: Config, expected: str) -> None:
    assert parity.family(Config(batch_size=128), candidate) == expected


def test_deviation_is_measured_in_the_baseline_s_progress_or_what_it_has_left() -> None:
    assert parity.deviation(2.30, 2.26, 2.30) == pytest.approx(1.0)  # plateau: progress 0.04 is the unit
    assert parity.deviation(1.40, 0.01, 0.024) == pytest.approx(
        1.0
    )  # converged: 1% of 1.4, above the 0.01 left, is the unit
    assert parity.deviation(1.40, 0.70, 0.35) == pytest.approx(-0.5)  # learned more: progress 0.7 is the unit
    assert parity.deviation(1.40, 0.01, 0.0) == pytest.approx(-0.01 / 1.39)  # converged a little further: fine


def trace(
    losses: list[float], batch: int = 4, initial: float = 2.0, final: float | None = None, finite: bool = True
) -> ParityRun:
    ends = tuple(batch * (i + 1) for i in range(len(losses)))
    return ParityRun(batch, 0.1, initial, losses[-1] if final is None else final, ends, tuple(losses), finite, 0.5)


def test_compare_weights_steps_by_the_samples_they_overlap() -> None:
    base = trace([2.0, 1.8, 1.6, 1.4, 1.2, 1.0, 1.0, 1.0], batch=4)  # 32 samples; window = the last 8
    big = trace([2.0, 1.0], batch=16)
    assert base.window_loss(24, 32) == pytest.approx(1.0)
    assert big.window_loss(24, 32) == pytest.approx(1.0)
    verdict = parity.compare(base, big, "batch_size", 32, 8)
    assert verdict.passed and verdict.deviation == pytest.approx(0.0) and verdict.loss == pytest.approx(1.0)


def test_a_bucketed_run_is_judged_by_its_probe_alone_and_says_so() -> None:
    # text_transformer on an H200: the bucketed run's window read +11.1% over the baseline's, its probe +0.2%.
    # Batches of similar length weight the window's samples otherwise: the window is no like-for-like measure.
    base = trace([2.0, 1.5, 1.0, 1.0], final=1.0)
    bucketed = trace([2.0, 1.5, 1.11, 1.11], final=1.002)
    assert parity.window_comparable(Config(batch_size=4), Config(batch_size=4, num_workers=2))
    assert not parity.window_comparable(Config(batch_size=4), Config(batch_size=4, bucketing=True))
    windowed = parity.compare(base, bucketed, "numerics", 16, 4)
    probed = parity.compare(base, bucketed, "numerics", 16, 4, probe_only=True)
    assert not windowed.passed and windowed.deviation == pytest.approx(0.11)
    assert probed.passed and probed.deviation == windowed.deviation and probed.probe_deviation == pytest.approx(0.002)
    assert probed.summary().endswith("; judged by the probe alone: bucketing makes batches of similar length, whose "
                                     "losses weight the window's samples otherwise")
    worse = parity.compare(base, trace([2.0, 1.5, 1.0, 1.0], final=1.2), "numerics", 16, 4, probe_only=True)
    assert not worse.passed and worse.probe_deviation == pytest.approx(0.2)  # the probe still decides


def test_compare_rejects_non_finite_parameters_and_a_non_finite_baseline() -> None:
    base = trace([2.0, 1.5, 1.0, 1.0])
    assert (
        parity.compare(base, trace([2.0, 1.5, 1.0, 1.0], finite=False), "loader", 16, 4).reason
        == "its parameters became NaN or inf in its run"
    )
    inf = parity.compare(base, trace([2.0, math.inf, 1.0, 1.0]), "loader", 16, 4)
    assert inf.reason == "its loss became inf at step 2 (8 samples in)"
    with pytest.raises(parity.ParityError, match=r"^the baseline's loss became NaN at step 2: the workload's own "
                       r"settings diverge; fix the workload \(its learning rate, its data\)$"):
        parity.compare(trace([2.0, math.nan, 1.0, 1.0]), base, "loader", 16, 4)
    with pytest.raises(ValueError, match="both runs must reach 32 samples"):
        parity.compare(base, base, "loader", 32, 8)


# -- the gate the search uses --------------------------------------------------------------------


def fake_runs(
    losses: dict[int, float], fail: dict[int, str] | None = None
) -> tuple[Callable[..., ParityRun], list[Config]]:
    """A trace function whose final loss depends on the batch size; no training, every number chosen."""
    calls: list[Config] = []

    def run(config: Config, lr: float, samples: int) -> ParityRun:
        calls.append(config)
        if fail and config.batch_size in fail:
            raise ParityRunFailed(fail[config.batch_size])
        loss = losses[config.batch_size]
        return ParityRun(config.batch_size, lr, 2.0, loss, (samples,), (loss,), True, 0.25)

    return run, calls


def test_check_picks_the_fastest_that_pass_and_reuses_verdicts_of_equal_numerics() -> None:
    run, calls = fake_runs({16: 1.0, 64: 1.9, 32: 1.05, 8: 1.0})
    lines: list[str] = []
    fast_bad, same_numerics, same_batch, good, also_good = (
        Config(batch_size=64),
        Config(batch_size=64, num_workers=2, prefetch_factor=2),
        Config(batch_size=64, amp="bf16"),
        Config(batch_size=32),
        Config(batch_size=8),
    )
    ranked = [fast_bad, same_numerics, same_batch, good, also_good]
    gate = ParityCheck(Config(batch_size=16), lambda c: 0.1 * c.batch_size / 16, run, ranked, lines.append)
    assert (gate.samples, gate.window) == (8192, 2048)  # 512 baseline steps; 8 of the largest batch need less
    assert gate.select(ranked, want=2, max_runs=5) == [good, also_good]
    assert calls == [Config(batch_size=16), fast_bad, good, also_good]  # the baseline once; the twins not at all
    assert [gate.verdicts[c].passed for c in ranked] == [False, False, False, True, True]
    assert gate.verdicts[fast_bad].deviation == pytest.approx(0.9)  # (1.9 - 1.0) / progress 1.0
    assert gate.verdicts[good].lr == pytest.approx(0.2)
    assert lines[0].startswith("  parity REJECT  deviation +90.0%, probe +90.0% (tolerance ±25%, batch_size)")
    assert lines[1] == f"  parity REJECT  (same numerics as {fast_bad.describe()})  {same_numerics.describe()}"
    assert lines[2] == (
        f"  parity REJECT  (batch 64 at lr 0.4 is too far whatever the numerics: see {fast_bad.describe()})  "
        f"{same_batch.describe()}"
    )
    assert gate.summary().startswith("parity: 5 config(s) checked, 3 rejected; 3 run(s) and the baseline's took ")
    assert gate.select(ranked, want=3, max_runs=0) == [good, also_good]  # verdicts are kept: nothing runs again
    assert len(calls) == 4
    record = gate.record(good)
    assert record["checked"] and record["passed"] and record["configs_checked"] == 5 and record["configs_rejected"] == 3
    assert validate_parity("parity", record) == []


@pytest.mark.parametrize("knobs", [
    {},
    # mnist_cnn's on an H200: data on the device, cudnn.benchmark, a CUDA graph, none of which changes the math
    {"placement": "device", "cudnn_benchmark": True, "cuda_graph": True},
])
def test_a_batch_larger_than_one_too_far_at_every_rate_is_rejected_without_a_run(knobs: dict) -> None:
    """mnist_cnn on an H200: batches 2048, 4096 and 8192 took every run the check had, at three rates each."""
    run, calls = fake_runs({16: 1.0, 64: 1.9, 128: 1.0, 32: 1.05, 8: 1.0})  # 128 would pass, were it run
    too_far, larger, nearer, smaller = (Config(batch_size=b, **knobs) for b in (64, 128, 32, 8))
    ranked = [too_far, larger, nearer, smaller]
    lines: list[str] = []
    gate = ParityCheck(Config(batch_size=16), lambda c: 0.1 * c.batch_size / 16, run, ranked, lines.append)
    assert gate.select(ranked, want=2, max_runs=5) == [nearer, smaller]
    assert calls == [Config(batch_size=16), too_far, nearer, smaller]  # a smaller batch than the baseline's runs
    why = "batch 64 learned too little at every rate, and batch 128 is larger"
    assert lines[1] == f"  parity REJECT  ({why}: see {too_far.describe()})  {larger.describe()}"
    carried = gate.verdicts[larger]  # its own rate, and no run's numbers: batch 64's are not batch 128's
    assert (carried.passed, carried.lr, carried.reason, carried.deviation) == (False, 0.8, why, None)


@pytest.mark.parametrize(("too_far", "loss"), [
    (Config(batch_size=64, amp="fp16"), 1.9),  # rejected beside amp: fp16 may be what broke it
    (Config(batch_size=64), 0.1),  # rejected for learning far more than the baseline: fewer steps cannot explain it
])
def test_a_rejection_that_a_smaller_batch_alone_does_not_explain_says_nothing_of_a_larger_batch(
    too_far: Config, loss: float
) -> None:
    run, calls = fake_runs({16: 1.0, 64: loss, 128: 1.0})
    larger = Config(batch_size=128)
    gate = ParityCheck(Config(batch_size=16), lambda c: 0.1 * c.batch_size / 16, run, [too_far, larger],
                       lambda line: None)
    assert gate.select([too_far, larger], want=1, max_runs=5) == [larger]
    assert calls == [Config(batch_size=16), too_far, larger]


def test_check_runs_a_batch_size_again_when_its_rejection_was_narrow() -> None:
    run, calls = fake_runs({16: 1.0, 64: 1.28})  # deviation 0.28: beyond 0.25, but within what numerics may move
    configs = [Config(batch_size=64), Config(batch_size=64, amp="bf16")]
    gate = ParityCheck(Config(batch_size=16), lambda c: 0.4, run, configs, lambda line: None)
    assert gate.select(configs, want=1, max_runs=5) == []
    assert len(calls) == 3


def test_check_stops_after_max_runs_and_records_a_crashed_run() -> None:
    run, calls = fake_runs({16: 1.0, 32: 1.0}, fail={64: "oom"})
    configs = [Config(batch_size=64), Config(batch_size=32)]
    gate = ParityCheck(Config(batch_size=16), lambda c: 0.1, run, configs, lambda line: None)
    assert gate.select(configs, want=1, max_runs=1) == []
    assert gate.verdicts[Config(batch_size=64)].reason == "oom"
    assert len(calls) == 2  # the baseline and the one run allowed


def test_once_the_runs_are_spent_a_config_with_the_baseline_s_math_still_passes_without_one() -> None:
    # text_transformer on an H200: every larger batch rejected, the runs spent on them; the configs at the
    # workload's own batch size that differ in loader knobs alone come last in the ranking, and need no run.
    run, calls = fake_runs({16: 1.0, 64: 1.9, 128: 1.9})
    loader_only = Config(batch_size=16, num_workers=2, pin_memory=True)
    configs = [Config(batch_size=128), Config(batch_size=64), Config(batch_size=16, amp="bf16"), loader_only]
    gate = ParityCheck(Config(batch_size=16), lambda c: 0.1, run, configs, lambda line: None)
    assert gate.select(configs, want=2, max_runs=1) == [loader_only]
    assert len(calls) == 2  # the baseline and the one run allowed: batch 64 and bf16 were not run
    assert Config(batch_size=16, amp="bf16") not in gate.verdicts


def test_check_raises_when_the_baseline_cannot_run() -> None:
    run, _ = fake_runs({}, fail={16: "crashed: trial process killed by signal SIGKILL"})
    gate = ParityCheck(Config(batch_size=16), lambda c: 0.1, run, [Config(batch_size=32)], lambda line: None)
    with pytest.raises(parity.ParityError, match="the baseline's parity run failed: crashed: trial process killed"):
        gate.select([Config(batch_size=32)], want=1, max_runs=3)
