"""A config the parity check rejected holds no best: patience, the pruner and the search's lines weigh every other
config against the best that can still be the answer."""

from __future__ import annotations

import dataclasses

import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

from autotune.config import Config
from autotune.study import standing
from autotune.study.checks.families import math_family
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
