"""A config the parity check rejected holds no best: patience, the pruner and the search's lines weigh every other
config against the best that can still be the answer."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

from autotune.config import Config
from autotune.parity.check import ParityCheck
from autotune.parity.run import ParityRun
from autotune.study import standing
from autotune.study.checks.families import FamilyGate, math_family
from autotune.study.clock.patience import PATIENCE, why_stop
from autotune.study.space.pruner import ClearlyWorsePruner

DIST = {"x": FloatDistribution(0, 1)}
# text_transformer's default search on one H100: the baseline, batch 256 in bf16 (rejected by the parity check at
# every learning rate), batch 128 in bf16 (passed), then configs no faster.
BASELINE = Config(batch_size=32)
REJECTED = Config(batch_size=256, num_workers=8, amp="bf16", bucketing=True, pad_multiple=64)
PASSED = dataclasses.replace(REJECTED, batch_size=128)


def _trial(number: int, config: Config, value: float | None, state: TrialState = TrialState.COMPLETE,
           windows: tuple[float, ...] = (), **attrs: object) -> FrozenTrial:
    made = create_trial(state=state, value=value, params={"x": 0.5}, distributions=DIST,
                        intermediate_values=dict(enumerate(windows)),
                        user_attrs={"config": config.as_dict(), **attrs})
    made.number = number
    return made


def _search_so_far() -> list[FrozenTrial]:
    slower = dataclasses.replace(PASSED, batch_size=32)
    return ([_trial(0, BASELINE, 6_531.0, role="baseline"), _trial(1, REJECTED, 31_199.0), _trial(2, PASSED, 21_636.0)]
            + [_trial(3 + i, slower, 6_125.0) for i in range(PATIENCE - 1)])


def test_patience_counts_from_the_best_config_that_can_still_win() -> None:
    trials = _search_so_far()
    family = [dict(math_family(REJECTED))]
    # Counted against the rejected 31,199/s, the search would end here with most of its budget unused.
    assert why_stop(trials, planned=True) == (
        f"search: no trial of the last {PATIENCE} found a config more than 2% faster than trial 1's 31,199/s; the "
        f"trials end here")
    assert why_stop(trials, planned=True, rejected=family) is None  # batch 128 has been the best for 11 trials only
    trials.append(_trial(len(trials), BASELINE, 6_400.0))
    assert why_stop(trials, planned=True, rejected=family) == (
        f"search: no trial of the last {PATIENCE} found a config more than 2% faster than trial 2's 21,636/s; the "
        f"trials end here")


def test_the_study_keeps_each_rejected_family_once_and_its_best_leaves_them_out() -> None:
    study = optuna.create_study(direction="maximize")
    for t in _search_so_far()[:3]:
        study.add_trial(t)
    assert standing.best_rate(study) == 31_199.0
    standing.record(study, math_family(REJECTED))
    standing.record(study, math_family(REJECTED))
    assert standing.rejected_families(study) == [dict(math_family(REJECTED))]
    assert standing.best_rate(study) == 21_636.0
    # The same knobs but another amp is another family: not judged yet, so it may still win.
    other = dataclasses.replace(REJECTED, amp="off").as_dict()
    assert not standing.in_rejected(other, standing.rejected_families(study))


def test_the_pruner_weighs_a_trial_against_the_best_that_can_still_win() -> None:
    study = optuna.create_study(direction="maximize")
    for t in _search_so_far()[:3]:
        study.add_trial(t)
    running = _trial(9, dataclasses.replace(PASSED, batch_size=64), None, TrialState.RUNNING,
                     windows=(12_000.0, 12_500.0))
    pruner = ClearlyWorsePruner()
    assert pruner.prune(study, running)  # under half of the rejected 31,199/s
    standing.record(study, math_family(REJECTED))
    assert not pruner.prune(study, running)  # over half of batch 128's 21,636/s


def _gate_after(rejected: Config, base: Config) -> tuple[FamilyGate, SimpleNamespace]:
    """A family gate whose check rejected `rejected` (it trains far from `base`), in a study of its own."""

    def make_run(config: Config, lr: float, samples: int) -> ParityRun:
        loss = 1.6 if config == rejected else 1.0
        return ParityRun(config.batch_size, lr, 2.0, loss, (samples,), (loss,), True, 0.0)

    check = ParityCheck(base, lambda c: 0.05, make_run, [rejected], lambda line: None)
    assert check.select([rejected], want=1, max_runs=1) == [] and check.verdicts[rejected].word == "REJECT"
    study = optuna.create_study(direction="maximize")
    setup = SimpleNamespace(baseline=base, study=study, storage=study._storage, study_name=study.study_name)
    gate = FamilyGate()
    gate.check = check
    gate._rejected(setup, rejected, queue=False)
    return gate, setup


def test_a_rejected_config_with_the_baseline_s_math_rules_out_no_family() -> None:
    # The data set on the device keeps the baseline's math, but its run is a run of its own: rejected, it says
    # nothing of the baseline's other loader variants, and the baseline's trials stay the best that can win.
    base = Config(batch_size=16)
    gate, setup = _gate_after(Config(batch_size=16, placement="device"), base)
    assert gate.rejected == {} and standing.rejected_families(setup.study) == []
    assert gate.why_skip(setup, Config(batch_size=16, num_workers=2)) is None
    # A new batch size rejected so is a family ruled out, as before.
    gate, setup = _gate_after(Config(batch_size=64), base)
    assert standing.rejected_families(setup.study) == [dict(math_family(Config(batch_size=64)))]
    standing.clear(setup.study)
    assert standing.rejected_families(setup.study) == []


def test_a_new_run_without_the_earlier_check_forgets_the_families_that_check_rejected() -> None:
    study = optuna.create_study(direction="maximize")
    standing.record(study, math_family(REJECTED))

    def run_start(writer: bool) -> list[dict[str, object]]:
        options = SimpleNamespace(write_tuned_file=writer, parity_check=True)
        setup = SimpleNamespace(options=options, study=study, storage=study._storage, study_name=study.study_name)
        FamilyGate().take_up(setup, pool=None)
        return standing.rejected_families(study)

    # A --gpus searcher that does not write the file leaves the study's list to the writer.
    assert run_start(writer=False) == [dict(math_family(REJECTED))]
    # No check kept in the study (it was dropped with the tuned file, or its key changed): judged afresh.
    assert run_start(writer=True) == []
