"""Stop a trial early once its windows show it is clearly worse than the best so far."""

from __future__ import annotations

import statistics

import optuna
from optuna.trial import FrozenTrial

from autotune.study import standing


class ClearlyWorsePruner(optuna.pruners.BasePruner):
    """Stop a trial whose windows so far run below `ratio` of the best complete trial it competes with.

    A trial at the baseline's batch size competes only with the complete trials at that batch size. A larger
    batch may be fastest and still fail the parity check; the winner is then among the configs at the
    workload's own batch size, which the parity check passes without a run when only loader knobs differ.
    Pruned against a large batch's rate they would all be gone by then, and the search would end with nothing
    to offer (docs/search.md#pruning).
    """

    def __init__(self, ratio: float = 0.5, warmup_windows: int = 2) -> None:
        self.ratio, self.warmup_windows = ratio, warmup_windows

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        if trial.user_attrs.get("role") == "baseline":
            return False  # every speed-up is stated against it, however slow it is
        values = list(trial.intermediate_values.values())
        if len(values) < self.warmup_windows:
            return False
        best = best_rival(study, trial)
        return best is not None and statistics.median(values) < self.ratio * best


def best_rival(study: optuna.Study, trial: FrozenTrial) -> float | None:
    """The best complete value `trial` competes with (None: none yet)."""
    complete = standing.standing_trials(study)  # none the parity check rejected: it cannot be the answer
    own = _batch(trial)
    if own is not None and own == baseline_batch(study):
        complete = [t for t in complete if _batch(t) == own]
    values = [t.value for t in complete if t.value is not None]
    return max(values) if values else None


def baseline_batch(study: optuna.Study) -> int | None:
    """The batch size of the study's baseline trial, whatever its state (None: it has not started)."""
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get("role") == "baseline" and _batch(t) is not None:
            return _batch(t)
    return None


def _batch(trial: FrozenTrial) -> int | None:
    config = trial.user_attrs.get("config")
    return int(config["batch_size"]) if isinstance(config, dict) and "batch_size" in config else None
