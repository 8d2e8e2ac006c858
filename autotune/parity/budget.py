"""What a parity check's runs cost, against the time it may take.

Every parity run of a check goes through ``ParityBudget.timed``, the baseline's
included (and one adopted from elsewhere adds its own time), and so does every
check that needs no training run (the inputs check, the gradients), so
``seconds`` is the check's whole cost. A candidate's run is expected to take as
long as the latest baseline run: none starts once the budget cannot pay for
that, and an inconclusive baseline is run once longer only if the budget pays
for it and a candidate's run after it; a check that needs no run starts while
any of the budget is left (``exhausted``). The budget is the check's share of
the search's, and what the search can spare beyond it when the check asks (the
trials' leftover time): a check that cannot conclude in its share concludes in
time the search would otherwise leave unused (docs/parity.md, "Within a time
bound"). ``ParityCheck`` (``autotune.parity.check``) decides what to run; this
only keeps the time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from autotune.parity.run import ParityRun
from autotune.parity.verdict import CHECK_SHARE, EXTEND_FACTOR

MIN_EXTENSION = 1.25  # an extension shorter than this many times the run is not worth a run: the check stays as is

T = TypeVar("T")


class ParityBudget:
    """The time a parity check's runs took, the baseline's apart, and whether `budget_s` pays for one more.

    `budget_s` None: no bound but the runs' length. `spare_s()`: seconds the search can give the check beyond
    `budget_s` now (what its budget holds past the final rounds' reserve, the trials' leftover time included);
    None: nothing beyond it.
    """

    def __init__(self, budget_s: float | None, echo: Callable[[str], None] = print,
                 spare_s: Callable[[], float] | None = None) -> None:
        self.budget_s, self.echo, self.spare_s = budget_s, echo, spare_s
        self.seconds = 0.0  # wall time of every parity run, the baseline's included: the check's cost
        self.baseline_seconds = 0.0
        self.last_base_s = 0.0  # the latest baseline run's time: what a candidate's run is expected to take
        self.carried_s = 0.0  # of `seconds`, what an earlier run of the same search spent (a check taken up)
        self.gradients_s = 0.0  # the longest judgement by gradients: what judging the next contender so may cost
        self._told_spent = False

    def timed(self, run: Callable[[], T]) -> T:
        """`run()` (a parity run, or the inputs check), its time added to the check's cost, returned or raised."""
        start = time.perf_counter()
        try:
            return run()
        finally:
            self.seconds += time.perf_counter() - start

    def timed_gradients(self, run: Callable[[], T]) -> T:
        """`timed`, for a config's gradients against the baseline's; the longest such is kept (``gradients_s``)."""
        before = self.seconds
        try:
            return self.timed(run)
        finally:
            self.gradients_s = max(self.gradients_s, self.seconds - before)

    def timed_baseline(self, run: Callable[[], ParityRun]) -> ParityRun:
        """`timed`, its time the baseline's (a run that failed or was stopped cost it too), and, when it returns a
        run, what a candidate's run is expected to take."""
        before = self.seconds
        try:
            made = self.timed(run)
        finally:
            self.baseline_seconds += self.seconds - before
        self.last_base_s = self.seconds - before
        return made

    def adopt_baseline(self, seconds: float) -> None:
        """A baseline run made elsewhere, that took `seconds`: the check's cost, wherever it was paid."""
        self.baseline_seconds = self.last_base_s = seconds
        self.seconds += seconds

    def total_s(self) -> float | None:
        """What the check may take in all now: its share, and what the search can spare beyond it; None: no bound."""
        if self.budget_s is None:
            return None
        return self.budget_s + (max(0.0, self.spare_s()) if self.spare_s is not None else 0.0)

    def left_s(self, spare: bool = True) -> float | None:
        """Seconds of the budget not yet spent (never below 0), what the search can spare included unless `spare` is
        False; None: no bound."""
        total = self.total_s() if spare else self.budget_s
        return None if total is None else max(0.0, total - self.seconds)

    def spent(self, runs: int) -> bool:
        """The budget cannot pay for one more run (expected to take as long as the baseline's); says so once.

        `runs`: the candidates' runs so far; before the first, the budget is never spent.
        """
        total = self.total_s()
        if total is None or runs == 0 or self.seconds + self.last_base_s <= total:
            return False
        self._tell_spent(total)
        return True

    def exhausted(self) -> bool:
        """Nothing of the budget is left, not even for a check that needs no training run (a config's gradients, a
        few batches in a trial process); says so once."""
        total = self.total_s()
        if total is None or self.seconds < total:
            return False
        self._tell_spent(total)
        return True

    def _tell_spent(self, total_s: float) -> None:
        if not self._told_spent:
            self._told_spent = True
            assert self.budget_s is not None
            more = total_s - self.budget_s
            beyond = f" and {more:.0f} s the search could spare" if more >= 0.5 else ""
            self.echo(
                f"parity: the check's time is spent ({self.seconds:.1f} s of its {total_s:.0f} s, "
                f"{CHECK_SHARE:.0%} of the search's budget{beyond}); of the configs not yet checked, only those "
                f"that keep the baseline's math can be finalists"
            )

    def extension(self, samples: int) -> int | None:
        """The samples of the one longer run an inconclusive check may make instead of `samples`: EXTEND_FACTOR
        times, or what the budget pays for while leaving as much for a candidate's run; None when that is not worth
        a run."""
        factor = float(EXTEND_FACTOR)
        total = self.total_s()
        if total is not None and self.last_base_s > 0:
            factor = min(factor, (total - self.seconds) / (2 * self.last_base_s))
        if factor < MIN_EXTENSION:
            self.echo(
                f"parity: the check's budget ({total:.0f} s, {self.seconds:.1f} s spent) leaves no time to "
                f"run the baseline longer"
            )
            return None
        return int(samples * factor)
