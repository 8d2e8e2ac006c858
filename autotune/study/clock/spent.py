"""How a search spent its time budget: setup, the plan, the trials, the parity check, the final rounds, and what was
left unused.

A short search's answer depends on where its minutes went: a plan that took its whole share, a check that could not
conclude, rounds cut short. One line at the end says it, and the profile keeps it (``budget``;
docs/tuned-file.md, docs/search.md#how-the-budget-was-spent).

    spent = Spent(budget_s=90.0, setup_s=5.0, plan_s=14.0, trials_s=36.0, parity_s=12.0, rounds_s=19.0, total_s=86.0)
    spent.line()   # 'budget: 90 s: setup 5 s, plan 14 s, trials 36 s, parity 12 s, final rounds 19 s, unused 4 s'
"""

from __future__ import annotations

import dataclasses
from typing import Any

# The parts of a search, in the order it spends them, and how the line names each.
PARTS = (("setup_s", "setup"), ("plan_s", "plan"), ("trials_s", "trials"), ("parity_s", "parity"),
         ("rounds_s", "final rounds"), ("other_s", "other"))
SAID_FROM_S = 0.5  # a part that took less than this is left out of the line (it would read "0 s")


@dataclasses.dataclass(frozen=True)
class Spent:
    """Seconds of one search by part; `total_s` is the whole search's wall time, `budget_s` its --time-budget."""

    budget_s: float | None
    total_s: float
    setup_s: float = 0.0  # the workload, the machine, the space, the study: before the first trial
    plan_s: float = 0.0  # the plan's part measurements
    trials_s: float = 0.0  # end-to-end trials, the plan and the check made during them aside
    parity_s: float = 0.0  # the parity check's runs and checks, during the trials and after
    rounds_s: float = 0.0  # the finalists' rounds

    @property
    def other_s(self) -> float:
        """What no part accounts for: choosing the finalists, writing the file, the processes' ends."""
        named = self.setup_s + self.plan_s + self.trials_s + self.parity_s + self.rounds_s
        return max(0.0, self.total_s - named)

    def line(self) -> str:
        """One line: the budget, each part that took time, and what was left (or how far past it the search ran)."""
        parts = [f"{name} {getattr(self, key):.0f} s" for key, name in PARTS if getattr(self, key) >= SAID_FROM_S]
        parts = parts or [f"spent {self.total_s:.0f} s"]  # every part under a second (a resumed search's end, say)
        if self.budget_s is None:
            return f"time: {self.total_s:.0f} s (no --time-budget): {', '.join(parts)}"
        left = self.budget_s - self.total_s
        parts.append(f"unused {left:.0f} s" if left >= 0 else f"{-left:.0f} s past it")
        return f"budget: {self.budget_s:.0f} s: {', '.join(parts)}"

    def record(self) -> dict[str, Any]:
        """The profile's `budget` table (``autotune.tuned.schema``): each part's seconds, rounded."""
        made: dict[str, Any] = {key: round(getattr(self, key), 1) for key, _ in PARTS}
        made["total_s"] = round(self.total_s, 1)
        if self.budget_s is not None:
            made["budget_s"] = round(self.budget_s, 1)
            made["unused_s"] = round(max(0.0, self.budget_s - self.total_s), 1)
        return made


def of(budget_s: float | None, total_s: float, marks: dict[str, float]) -> Spent:
    """The parts from `marks`: the elapsed seconds at which the trials began and ended and the rounds began and
    ended (``trials_from``, ``trials_to``, ``rounds_from``, ``rounds_to``), and the seconds the plan's parts took
    (``plan``), the parity check's during the trials (``parity_in_trials``) and in all (``parity``)."""
    trials_from = marks.get("trials_from", 0.0)
    in_trials = marks.get("trials_to", trials_from) - trials_from
    trials = max(0.0, in_trials - marks.get("plan", 0.0) - marks.get("parity_in_trials", 0.0))
    return Spent(budget_s=budget_s, total_s=total_s, setup_s=trials_from, plan_s=marks.get("plan", 0.0),
                 trials_s=trials, parity_s=marks.get("parity", 0.0),
                 rounds_s=marks.get("rounds_to", 0.0) - marks.get("rounds_from", 0.0))
