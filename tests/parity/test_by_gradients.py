"""amp and compile at the baseline's batch are judged by their gradients alone: no training run, not the baseline's.

Seen on an H200: ResNet-50's baseline parity run alone took 82 s, more than the check's whole share of the search,
so the fastest config (compiled bf16) was never judged. A new batch size is still judged by training runs, and so is
amp where the search gives no numerics check.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from autotune.config import Config
from autotune.parity.check import ParityCheck
from autotune.parity.inputs import judge as judge_inputs
from autotune.parity.numerics import LIMIT, NumericsVerdict, failed, judge, label
from autotune.parity.run import ParityRun
from autotune.parity.verdict import ParityError, ParityRunFailed
from autotune.study import answer
from autotune.tuned.schema import validate_parity

BASE = Config(batch_size=16)


def recording_run() -> tuple[Callable[[Config, float, int], ParityRun], list[Config]]:
    """Runs that learn half their initial loss (a conclusive baseline), every candidate as the baseline does."""
    calls: list[Config] = []

    def make_run(config: Config, lr: float, samples: int) -> ParityRun:
        calls.append(config)
        return ParityRun(config.batch_size, lr, 2.0, 1.0, (samples,), (1.0,), True, 0.0)

    return make_run, calls


def numerics_check(ratio: float) -> tuple[Callable[[Config], NumericsVerdict], list[Config]]:
    """A check whose gradients' error is `ratio` times the batch's noise, for every config it is given."""
    checked: list[Config] = []

    def check(config: Config) -> NumericsVerdict:
        checked.append(config)
        return judge({"error": ratio, "noise": 1.0, "signal": 0.5, "finite": True, "batches": 8, "batch_size": 16,
                      "seconds": 2.0}, label(config))

    return check, checked


def test_bf16_at_the_baseline_s_batch_passes_by_its_gradients_with_no_run_at_all() -> None:
    make_run, calls = recording_run()
    check, checked = numerics_check(0.12)
    bf16 = Config(batch_size=16, amp="bf16", channels_last=True)
    lines: list[str] = []
    gate = ParityCheck(BASE, lambda c: 0.05, make_run, [bf16], lines.append, check_numerics=check)
    assert gate.select([bf16], want=1, max_runs=1) == [bf16]
    assert calls == [], "no training run: not the candidate's, not the baseline's"
    assert checked == [bf16] and gate.runs == 0 and gate.conclusive is None
    verdict = gate.verdicts[bf16]
    assert (verdict.passed, verdict.conclusive, verdict.family) == (True, True, "numerics")
    assert (verdict.numerics_passed, verdict.numerics_ratio) == (True, 0.12)
    assert (verdict.samples, verdict.window, verdict.lr, verdict.deviation) == (gate.samples, gate.window, 0.05, None)
    numbers = ("bf16's gradients are within the batch's own noise: their error is 0.12x the variance of fp32's "
               "gradient from batch to batch (limit 0.25x), 8 batches of 16")
    assert lines[-1] == f"  parity pass    judged by its gradients, with no training run: {numbers}  {bf16.describe()}"
    assert gate.summary().startswith(
        "parity: 1 config(s) checked, 0 rejected; no training run was made, not even the baseline's: the checks that "
        "need none (gradients, images) took ")
    record = gate.record(bf16)
    assert (record["passed"], record["conclusive"], record["numerics_passed"], record["numerics_ratio"]) == (
        True, True, True, 0.12)
    assert validate_parity("parity", record) == []


def test_compile_with_bf16_whose_gradients_are_beyond_the_noise_is_rejected_conclusively_with_no_run() -> None:
    make_run, calls = recording_run()
    check, checked = numerics_check(2 * LIMIT)
    both = Config(batch_size=16, amp="bf16", compile="default")
    twin = Config(batch_size=16, amp="bf16", compile="default", cuda_graph=True, num_workers=2)
    lines: list[str] = []
    gate = ParityCheck(BASE, lambda c: 0.05, make_run, [both, twin], lines.append, check_numerics=check)
    assert gate.select([both, twin], want=1, max_runs=2) == []
    assert calls == [] and checked == [both], "one check serves the config with the same numerics but a graph"
    verdict = gate.verdicts[both]
    assert (verdict.passed, verdict.conclusive, verdict.word) == (False, True, "REJECT")
    assert (verdict.numerics_passed, verdict.numerics_ratio) == (False, 2 * LIMIT)
    assert verdict.reason == (
        "judged by its gradients, with no training run: bf16 with compile=default's gradients are beyond the batch's "
        "own noise: their error is 0.5x the variance of fp32's gradient from batch to batch (limit 0.25x), 8 batches "
        "of 16")
    assert gate.verdicts[twin].word == "REJECT" and gate.runs == 0
    assert f"  parity REJECT  {verdict.reason}  {both.describe()}" in lines
    # The workload's own settings are then the answer, and their record says the check judged: it needed no run.
    kept = answer.parity_record(gate.record(BASE), "every faster config was rejected", gate.conclusive)
    assert (kept["passed"], kept["conclusive"], kept["family"]) == (True, True, "loader")
    assert kept["reason"] == "kept the workload's own settings: every faster config was rejected"


def test_a_failed_baseline_run_makes_the_check_inconclusive_and_the_kept_record_says_so() -> None:
    def make_run(config: Config, lr: float, samples: int) -> ParityRun:
        raise ParityRunFailed("timeout: no step in 90 s")

    larger = Config(batch_size=64)
    gate = ParityCheck(BASE, lambda c: 0.05 * c.batch_size / 16, make_run, [larger], lambda line: None)
    with pytest.raises(ParityError, match="^the baseline's parity run failed: timeout: no step in 90 s$"):
        gate.select([larger], want=1, max_runs=1)
    assert gate.conclusive is False
    kept = answer.parity_record(gate.record(BASE), "the check could not judge", gate.conclusive)
    assert (kept["passed"], kept["conclusive"]) == (True, False)


def test_a_baseline_run_that_fails_once_and_then_runs_is_judged_by_that_run() -> None:
    """The search's check is asked again after a failure (the trials' check, then the end's): a second baseline run
    that learns is conclusive, and a larger batch that trains alike passes."""
    tries: list[Config] = []

    def make_run(config: Config, lr: float, samples: int) -> ParityRun:
        tries.append(config)
        if len(tries) == 1:
            raise ParityRunFailed("timeout: no step in 90 s")
        return ParityRun(config.batch_size, lr, 2.0, 1.0, (samples,), (1.0,), True, 0.0)

    larger = Config(batch_size=64)
    gate = ParityCheck(BASE, lambda c: 0.05 * c.batch_size / 16, make_run, [larger], lambda line: None)
    with pytest.raises(ParityError):
        gate.select([larger], want=1, max_runs=1)
    assert gate.conclusive is False
    assert gate.select([larger], want=1, max_runs=1) == [larger]
    assert gate.conclusive is True and gate.verdicts[larger].passed and tries == [BASE, BASE, larger]


def test_a_numerics_check_that_failed_to_run_leaves_the_config_unjudged_with_no_run() -> None:
    make_run, calls = recording_run()
    bf16 = Config(batch_size=16, amp="bf16")
    gate = ParityCheck(BASE, lambda c: 0.05, make_run, [bf16], lambda line: None,
                       check_numerics=lambda c: failed("out of memory", label(c)))
    assert gate.select([bf16], want=1, max_runs=1) == []
    assert calls == [] and gate.runs == 0
    verdict = gate.verdicts[bf16]
    assert (verdict.passed, verdict.conclusive, verdict.word) == (False, False, "inconclusive")
    assert (verdict.numerics_passed, verdict.numerics_ratio) == (False, None)
    assert verdict.reason == ("numerics check of bf16: failed to run: out of memory; only its gradients judge a change "
                              "of amp or compile, with no training run")


def test_a_new_batch_size_with_bf16_is_still_judged_by_training_runs() -> None:
    make_run, calls = recording_run()
    check, checked = numerics_check(0.12)
    larger = Config(batch_size=64, amp="bf16")
    gate = ParityCheck(BASE, lambda c: 0.05, make_run, [larger], lambda line: None, check_numerics=check)
    assert gate.select([larger], want=1, max_runs=1) == [larger]
    assert calls == [BASE, larger] and checked == [] and gate.runs == 1
    verdict = gate.verdicts[larger]
    assert (verdict.family, verdict.deviation, verdict.numerics_passed) == ("batch_size", 0.0, None)


def test_without_a_numerics_check_bf16_at_the_baseline_s_batch_is_judged_by_runs_as_before() -> None:
    make_run, calls = recording_run()
    bf16 = Config(batch_size=16, amp="bf16", compile="default")
    gate = ParityCheck(BASE, lambda c: 0.05, make_run, [bf16], lambda line: None)
    assert gate.select([bf16], want=1, max_runs=1) == [bf16]
    assert calls == [BASE, bf16] and gate.runs == 1
    verdict = gate.verdicts[bf16]
    assert (verdict.family, verdict.deviation, verdict.numerics_passed) == ("numerics", 0.0, None)


def test_decode_alone_keeps_the_run_and_decode_with_amp_needs_none() -> None:
    make_run, calls = recording_run()
    check, checked = numerics_check(0.12)
    decode = Config(batch_size=16, decode="gpu")
    with_amp = Config(batch_size=16, decode="gpu", amp="bf16")
    gate = ParityCheck(BASE, lambda c: 0.05, make_run, [decode, with_amp], lambda line: None,
                       check_inputs=lambda c: judge_inputs({"host_to_host": 1.0, "host_to_device": 0.9, "images": 64,
                                                            "draws": 32, "seconds": 3.0}),
                       check_numerics=check)
    assert gate.select([with_amp], want=1, max_runs=1) == [with_amp]
    assert calls == [] and checked == [with_amp]
    assert (gate.verdicts[with_amp].inputs_passed, gate.verdicts[with_amp].numerics_passed) == (True, True)
    assert gate.select([decode], want=1, max_runs=1) == [decode]
    assert calls == [BASE, decode] and checked == [with_amp], "decode alone: its images, then a run, as before"


def test_a_gradient_judged_config_is_judged_when_no_run_is_left() -> None:
    make_run, calls = recording_run()
    check, checked = numerics_check(0.12)
    bf16 = Config(batch_size=16, amp="bf16")
    larger = Config(batch_size=64)
    gate = ParityCheck(BASE, lambda c: 0.05, make_run, [bf16, larger], lambda line: None, check_numerics=check)
    assert gate.select([larger, bf16], want=2, max_runs=0) == [bf16]
    assert calls == [] and checked == [bf16]
    assert larger not in gate.verdicts, "a new batch size needs a run, and none is left"


def test_once_nothing_of_the_budget_is_left_no_new_numerics_check_starts() -> None:
    make_run, calls = recording_run()
    check, checked = numerics_check(0.12)
    bf16, fp16 = Config(batch_size=16, amp="bf16"), Config(batch_size=16, amp="fp16")
    bf16_graph = Config(batch_size=16, amp="bf16", cuda_graph=True)
    lines: list[str] = []
    gate = ParityCheck(BASE, lambda c: 0.05, make_run, [bf16, fp16], lines.append, budget_s=15.0,
                       check_numerics=check)
    assert gate.select([bf16], want=1, max_runs=1) == [bf16]
    gate.adopt_baseline(ParityRun(16, 0.05, 2.0, 1.0, (gate.samples,), (1.0,), True, 20.0), "made elsewhere")
    # The check's 15 s are spent: fp16 would need a check of its own; bf16 in a graph reuses bf16's.
    assert gate.select([fp16, bf16_graph], want=2, max_runs=1) == [bf16_graph]
    assert calls == [] and checked == [bf16] and fp16 not in gate.verdicts
    assert lines[-2].startswith("parity: the check's time is spent (20.0 s of its 15 s")


def test_the_check_keeps_the_longest_judging_by_gradients_which_the_trials_reserve_for_the_next(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # On an H100 the webdataset search judged two contenders by their gradients during its trials, 29 s and 22 s,
    # and its trials' end reserved nothing for the second: the search's end then had no time for a second round.
    import autotune.parity.budget as budget

    clock = [0.0]
    monkeypatch.setattr(budget.time, "perf_counter", lambda: clock[0])
    make_run, calls = recording_run()
    took = {"bf16": 29.0, "fp16": 22.0}

    def check(config: Config) -> NumericsVerdict:
        clock[0] += took[config.amp]
        return numerics_check(0.1)[0](config)

    bf16, fp16 = Config(batch_size=16, amp="bf16"), Config(batch_size=16, amp="fp16")
    gate = ParityCheck(BASE, lambda c: 0.05, make_run, [bf16, fp16], lambda line: None, check_numerics=check)
    assert gate.budget.gradients_s == 0.0
    gate.select([bf16], want=1, max_runs=1)
    gate.select([fp16], want=1, max_runs=1)
    assert calls == [] and (gate.budget.gradients_s, gate.budget.seconds) == (29.0, 51.0)
    # The search reserves it beside its next trial while the check has time to start one; none once it has not.
    from autotune.study.checks.families import FamilyGate

    families = FamilyGate()
    families.check = gate
    assert families.gradients_s() == 29.0, "no bound on the check: a judging may start"
    gate.budget.budget_s = 60.0
    assert families.gradients_s() == 29.0, "9 s left: a judging may start"
    gate.budget.budget_s = 51.0
    assert families.gradients_s() == 0.0, "its time is spent: it starts no judging"
