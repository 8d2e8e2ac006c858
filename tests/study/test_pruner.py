"""Which trials the pruner stops: clearly worse than the best they compete with."""

from __future__ import annotations

import dataclasses

import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from autotune.config import Config
from autotune.study.space.pruner import ClearlyWorsePruner

DIST = {"x": FloatDistribution(0, 1)}


def _trial(batch: int, state: TrialState, value: float | None = None, windows: tuple[float, ...] = (),
           role: str = "search") -> optuna.trial.FrozenTrial:
    return create_trial(state=state, value=value, params={"x": 0.5}, distributions=DIST,
                        intermediate_values=dict(enumerate(windows)),
                        user_attrs={"config": dataclasses.asdict(Config(batch)), "role": role})


def _study() -> optuna.Study:
    # text_transformer on an H200: the baseline (batch 32) ran 350 samples/s, a batch-2048 trial 26,014.
    study = optuna.create_study(direction="maximize")
    study.add_trial(_trial(32, TrialState.COMPLETE, 350.0, role="baseline"))
    study.add_trial(_trial(2048, TrialState.COMPLETE, 26_014.0))
    return study


def test_a_trial_at_the_baseline_s_batch_competes_only_with_that_batch() -> None:
    study = _study()
    pruner = ClearlyWorsePruner()
    assert not pruner.prune(study, _trial(32, TrialState.RUNNING, windows=(340.0, 345.0)))
    assert pruner.prune(study, _trial(32, TrialState.RUNNING, windows=(160.0, 170.0)))  # under half of 350


def test_a_trial_at_another_batch_competes_with_the_best_of_all() -> None:
    study = _study()
    pruner = ClearlyWorsePruner()
    assert pruner.prune(study, _trial(64, TrialState.RUNNING, windows=(700.0, 720.0)))
    assert not pruner.prune(study, _trial(64, TrialState.RUNNING, windows=(700.0,)))  # one window is no evidence
