"""The study's trials, read for the report's tables: the fastest configs, the failures by cause, the importances.

Each trial carries its full config, learning rate, role and failure reason as
user attributes (``autotune search`` sets them); the parity verdicts are kept on
the study itself. Nothing here states a speed-up: each trial is one measurement
(``autotune.reporting.rounds`` holds the winner's numbers).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config import Config
from autotune.study.space.pruner import ClearlyWorsePruner

MIN_IMPORTANCE_TRIALS = 5  # fewer complete trials than this say nothing about importances
EXAMPLES = 3  # configs quoted per failure group


@dataclasses.dataclass(frozen=True)
class Row:
    """One complete trial in the best-configs table."""

    trial: int
    role: str  # "baseline", "seed" (queued first by the search), or "" (sampled)
    samples_per_s: float  # one measurement: the trial's own; a speed-up is stated from the rounds only
    spread: float | None
    config: dict[str, Any]
    lr: float | None
    parity: str | None = None  # "pass" or "REJECT" from the search's parity check; None: not checked
    rank: int = 0  # among the study's distinct configs by samples/s, the baseline left out; 0 for the baseline

    @property
    def describe(self) -> str:
        return Config.from_dict(self.config).describe()


@dataclasses.dataclass(frozen=True)
class FailureGroup:
    state: str  # "failed" or "pruned"
    reason: str  # what the group shares
    example: str  # one full recorded reason
    trials: tuple[int, ...]
    configs: tuple[str, ...]  # up to EXAMPLES of their configs, described


def row_of(t: FrozenTrial, verdicts: dict[str, dict[str, Any]] | None = None) -> Row:
    """A complete trial as a table row, marked with its config's parity verdict when `verdicts` has one.

    A verdict's learning rate is the row's: the check may have judged a new batch size at several rates (the
    trial's own first), and the one it passed at, or rejected last, is what the verdict says.
    """
    result = t.user_attrs.get("result") or {}
    config = t.user_attrs["config"]
    verdict = (verdicts or {}).get(Config.from_dict(config).describe())
    lr = verdict.get("lr", t.user_attrs.get("lr")) if verdict is not None else t.user_attrs.get("lr")
    return Row(
        t.number,
        t.user_attrs.get("role", ""),
        float(t.value or 0.0),
        result.get("spread"),
        config,
        lr,
        None if verdict is None else "pass" if verdict["passed"] else "REJECT",
    )


def parity_verdicts(study: optuna.Study) -> dict[str, dict[str, Any]]:
    """The parity check's verdicts (passed, lr), by config: the search keeps them on the study (finished trials
    are read-only)."""
    return {
        v["config"]: {"passed": bool(v["passed"]), **({"lr": float(v["lr"])} if "lr" in v else {})}
        for k, v in study.user_attrs.items()
        if k.startswith("parity:trial-") and isinstance(v, dict) and "config" in v and "passed" in v
    }


def fastest(complete: list[FrozenTrial], base_trial: FrozenTrial | None, verdicts: dict[str, dict[str, Any]],
            top: int) -> tuple[list[Row], list[str]]:
    """The `top` fastest distinct configs beside the baseline, and the notes they call for."""
    ranked: list[Row] = []
    for t in complete:
        row = row_of(t, verdicts)
        if t is not base_trial and row.describe not in {r.describe for r in ranked}:
            ranked.append(dataclasses.replace(row, rank=len(ranked) + 1))
    best = ranked[:top]
    if any(r.parity == "REJECT" for r in best) and not any(r.parity == "pass" for r in best):
        # The fastest were rejected: show the fastest that may win too, at its own rank.
        best += [r for r in ranked[top:] if r.parity == "pass"][:1]
    notes: list[str] = []
    if any(r.parity == "REJECT" for r in best):
        notes.append("parity REJECT: the search's parity check found the config trains differently from the "
                     "baseline; it cannot win.")
    if base_trial is None:
        notes.append("the baseline (the workload's own settings) has no complete trial in this study.")
    return best, notes


def _group_key(reason: str) -> str:
    """Failures that share a cause share a key: the kind, and for an exception its type."""
    head, _, rest = reason.partition(": ")
    if head == "error":
        return f"error: {rest.partition(':')[0]}"
    if head in ("timeout", "crashed", "worker died", "cuda error"):
        return head
    return reason


def failure_groups(trials: list[FrozenTrial]) -> tuple[FailureGroup, ...]:
    """The failed and pruned trials grouped by cause, the largest group first."""
    pruner = ClearlyWorsePruner()
    groups: dict[tuple[str, str], list[FrozenTrial]] = {}
    for t in trials:
        if t.state == TrialState.FAIL:
            reason = t.user_attrs.get("reason", "no reason recorded (its search process stopped while it ran)")
            groups.setdefault(("failed", _group_key(reason)), []).append(t)
        elif t.state == TrialState.PRUNED and str(t.user_attrs.get("reason") or "").startswith("skipped"):
            # Not run at all: ruled out by its parity family or its predicted rate, before any window
            groups.setdefault(("pruned", str(t.user_attrs["reason"]).partition(": ")[0]), []).append(t)
        elif t.state == TrialState.PRUNED:
            groups.setdefault(
                ("pruned", f"windows ran below {pruner.ratio:.0%} of the best trial's samples/s"), []
            ).append(t)
    out = []
    for (state, key), members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        example = members[0].user_attrs.get("reason", key)
        configs = tuple(Config.from_dict(t.user_attrs["config"]).describe() for t in members[:EXAMPLES])
        out.append(FailureGroup(state, key, example, tuple(t.number for t in members), configs))
    return tuple(out)


def param_importances(study: optuna.Study, complete: int) -> tuple[dict[str, float] | None, str | None]:
    """PED-ANOVA importances, largest first, or None and the note that says why there are none."""
    if complete < MIN_IMPORTANCE_TRIALS:
        return (
            None,
            f"parameter importances need at least {MIN_IMPORTANCE_TRIALS} complete trials; the study has {complete}.",
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PED-ANOVA warns about thin regimes; the note below says it plainly
            values = optuna.importance.get_param_importances(
                study, evaluator=optuna.importance.PedAnovaImportanceEvaluator()
            )
    except (ValueError, RuntimeError) as exc:
        return None, f"parameter importances could not be computed: {exc}"
    if not values:
        return None, "parameter importances: no knob took more than one value in the complete trials."
    return dict(sorted(values.items(), key=lambda kv: -kv[1])), None
