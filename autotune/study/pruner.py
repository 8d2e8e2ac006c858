"""Stop a trial early once its windows show it is clearly worse than the best so far."""

from __future__ import annotations

import statistics

import optuna


class ClearlyWorsePruner(optuna.pruners.BasePruner):
    """Stop a trial whose windows so far run below `ratio` of the best complete trial."""

    def __init__(self, ratio: float = 0.5, warmup_windows: int = 2) -> None:
        self.ratio, self.warmup_windows = ratio, warmup_windows

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        if trial.user_attrs.get("role") == "baseline":
            return False  # every speed-up is stated against it, however slow it is
        values = list(trial.intermediate_values.values())
        if len(values) < self.warmup_windows:
            return False
        try:
            best = study.best_value
        except ValueError:  # no complete trial yet
            return False
        return statistics.median(values) < self.ratio * best
