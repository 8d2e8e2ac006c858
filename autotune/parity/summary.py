"""What a parity check says of itself once it is done: one line for the search's output, a record for the file.

Functions of what the check holds (``autotune.parity.check`` passes its verdicts, baseline run and budget), so
this module needs nothing of the check itself.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from autotune.config import Config
from autotune.parity.baseline import BaselineRun
from autotune.parity.budget import ParityBudget
from autotune.parity.verdict import ParityVerdict


def of(
    verdicts: Collection[ParityVerdict],
    runs: int,
    base: BaselineRun,
    budget: ParityBudget,
    baseline: Config,
    baseline_lr: float,
    samples: int,
    window: int,
) -> str:
    """The check's cost and what it compared, in one line: over its `verdicts`, its candidates' `runs` and the
    `base` run of `baseline` (at `baseline_lr`), each run `samples` long, the loss compared over its last `window`."""
    rejected = sum(not v.passed for v in verdicts)
    unjudged = sum(not v.passed and not v.conclusive for v in verdicts)
    unjudged_said = f" ({unjudged} of them inconclusive)" if unjudged else ""
    where = f", {base.where}" if base.where else ""
    where += ", then once longer" if base.extended else ""
    bound = f" of its {budget.budget_s:.0f} s" if budget.budget_s is not None else ""
    if base.run is None and not base.needed:
        return (
            f"parity: {len(verdicts)} config(s) checked, {rejected} rejected{unjudged_said}; no training run "
            f"was made, not even the baseline's: the checks that need none (gradients, images) took "
            f"{budget.seconds:.1f} s{bound}"
        )
    return (
        f"parity: {len(verdicts)} config(s) checked, {rejected} rejected{unjudged_said}; {runs} run(s) and "
        f"the baseline's took {budget.seconds:.1f} s{bound} (baseline {budget.baseline_seconds:.1f} s{where}); each "
        f"compared with the baseline ({baseline.describe()}, lr {baseline_lr:g}) over "
        f"{samples:,} samples: the training loss over the last {window:,} and the probe set's after them"
    )


def record(verdict: ParityVerdict, verdicts: Collection[ParityVerdict], budget: ParityBudget) -> dict[str, Any]:
    """What the tuned file keeps of a config: its `verdict`, and what the whole check (its `verdicts`, the time of
    its `budget`) cost."""
    kept = {
        "checked": True,
        **verdict.as_record(),
        "configs_checked": len(verdicts),
        "configs_rejected": sum(not v.passed for v in verdicts),
        "check_s": round(budget.seconds, 1),
    }
    if budget.budget_s is not None:
        kept["check_budget_s"] = round(budget.budget_s, 1)
    return kept
