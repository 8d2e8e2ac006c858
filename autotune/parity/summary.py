"""What a parity check says of itself once it is done: one line for the search's output, a record for the file."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune.parity.verdict import ParityVerdict

if TYPE_CHECKING:
    from autotune.parity.check import ParityCheck


def of(check: ParityCheck) -> str:
    """The check's cost and what it compared, in one line."""
    rejected = sum(not v.passed for v in check.verdicts.values())
    unjudged = sum(not v.passed and not v.conclusive for v in check.verdicts.values())
    unjudged_said = f" ({unjudged} of them inconclusive)" if unjudged else ""
    base, budget = check.base, check.budget
    where = f", {base.where}" if base.where else ""
    where += ", then once longer" if base.extended else ""
    bound = f" of its {budget.budget_s:.0f} s" if budget.budget_s is not None else ""
    if base.run is None and not base.needed:
        return (
            f"parity: {len(check.verdicts)} config(s) checked, {rejected} rejected{unjudged_said}; no training run "
            f"was made, not even the baseline's: the checks that need none (gradients, images) took "
            f"{budget.seconds:.1f} s{bound}"
        )
    return (
        f"parity: {len(check.verdicts)} config(s) checked, {rejected} rejected{unjudged_said}; {check.runs} run(s) and "
        f"the baseline's took {budget.seconds:.1f} s{bound} (baseline {budget.baseline_seconds:.1f} s{where}); each "
        f"compared with the baseline ({check.baseline.describe()}, lr {check.lr_of(check.baseline):g}) over "
        f"{check.samples:,} samples: the training loss over the last {check.window:,} and the probe set's after them"
    )


def record(check: ParityCheck, verdict: ParityVerdict) -> dict[str, Any]:
    """What the tuned file keeps of a config: its `verdict`, and what the whole check cost."""
    kept = {
        "checked": True,
        **verdict.as_record(),
        "configs_checked": len(check.verdicts),
        "configs_rejected": sum(not v.passed for v in check.verdicts.values()),
        "check_s": round(check.budget.seconds, 1),
    }
    if check.budget.budget_s is not None:
        kept["check_budget_s"] = round(check.budget.budget_s, 1)
    return kept
