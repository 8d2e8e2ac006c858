"""A search ends its trials once so many in a row found nothing faster, after its plan."""

from __future__ import annotations

from optuna.distributions import FloatDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

from autotune.study.clock.patience import IMPROVEMENT, PATIENCE, stale, why_stop


def trial(number: int, value: float | None, state: TrialState = TrialState.COMPLETE, **attrs: object) -> FrozenTrial:
    made = create_trial(state=state, value=value, params={"x": 0.0}, distributions={"x": FloatDistribution(0, 1)},
                        user_attrs=dict(attrs))
    made.number = number
    return made


def test_the_run_of_trials_without_a_faster_config_is_counted_to_the_latest() -> None:
    # mnist_cnn on an H200: the baseline, the winner (trial 1), then repeats, skips, a failure and slower configs.
    trials = [trial(0, 15_827.0, role="baseline"), trial(1, 1_379_295.0), trial(2, 1_360_755.0),
              trial(3, 1_379_295.0, duplicate_of=1), trial(4, None, TrialState.PRUNED),
              trial(5, None, TrialState.FAIL), trial(6, 1_379_295.0 * (1 + IMPROVEMENT))]
    since, best = stale(trials)
    assert (since, best.number if best else None) == (5, 1)  # 2% better is not better: noise
    trials.append(trial(7, 1_500_000.0))
    assert stale(trials)[0] == 0
    # The plan's records of configs valued and not measured are no trials taken.
    trials += [trial(8 + i, None, TrialState.PRUNED, role="valued") for i in range(PATIENCE)]
    assert stale(trials)[0] == 0


def test_the_trials_end_after_patience_trials_only_once_the_plan_was_made() -> None:
    trials = [trial(0, 1_000.0), trial(1, 2_000.0)] + [trial(2 + i, 1_500.0) for i in range(PATIENCE)]
    assert why_stop(trials[:-1], planned=True) is None
    assert why_stop(trials, planned=True) == (
        f"search: no trial of the last {PATIENCE} found a config more than 2% faster than trial 1's 2,000/s; the "
        f"trials end here")
    assert why_stop(trials, planned=False) is None  # a search asked for few trials runs them all
