"""A parity check's baseline run: made once (again, longer, when it learned too little) or adopted, and judged.

Every candidate's run is compared with it, so whether it learned enough to judge
by decides what may pass: a baseline that learned too little, whose run failed,
or whose run the check's share of the budget stopped makes the check
inconclusive, and then only configs with the baseline's math pass
(``autotune.parity.check``). One whose loss became NaN or inf ends the check: the
workload's own settings diverge, and the search keeps them, saying so.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from autotune.config import Config
from autotune.parity import signal
from autotune.parity.budget import ParityBudget
from autotune.parity.reasons import inconclusive_reason
from autotune.parity.run import ParityRun
from autotune.parity.verdict import (
    MIN_PROGRESS,
    WINDOW_PARTS,
    ParityError,
    ParityRunFailed,
    ParityRunOutOfTime,
    baseline_diverged,
    conclusive,
    progress,
)


class BaselineRun:
    """The baseline's run for one check, and whether it is conclusive; `make_run(samples)` makes one."""

    def __init__(self, make_run: Callable[[int], ParityRun], budget: ParityBudget,
                 echo: Callable[[str], None]) -> None:
        self.make_run, self.budget, self.echo = make_run, budget, echo
        self.run: ParityRun | None = None
        self.conclusive: bool | None = None  # None until it has run; False (it learned too little, or its run failed
        # or was stopped): only the same math may pass
        self.extended = False  # run once more, longer
        self.where = ""  # where an adopted run was made, for the summary
        self.needed = False  # a config needed it (one judged by gradients alone needs none)
        self.failed = False  # its last run failed (self.conclusive is False for that alone)
        self.out_of_time: str | None = None  # why its run was stopped at the check's share
        self.diverged: str | None = None  # why its training diverged, which ends the check (``_refuse_diverged``)
        self.stopped_short = False  # its run stopped in time short of the length asked: every run is as long

    def adopt(self, baseline: Config, run: ParityRun, where: str, samples: int) -> None:
        """Use a run made elsewhere (`where` says by whom), of `samples`, instead of making one."""
        # A run trains whole batches until it has seen `samples`: it ends within one batch past them.
        if run.batch_size != baseline.batch_size or not samples <= run.samples < samples + run.batch_size:
            raise ValueError(
                f"an adopted baseline run must train the baseline's batch {baseline.batch_size} for "
                f"{samples:,} samples, but got batch {run.batch_size} and {run.samples:,} samples."
            )
        self.run, self.where = run, where
        self.budget.adopt_baseline(run.seconds)

    def ensure(self, samples: int, window: int) -> int:
        """Make the run if none was adopted, and judge whether it learned enough; extend it once if not. Returns the
        samples every run now trains: `samples`, or the extension's."""
        self.needed = True
        if self.out_of_time is not None:  # the share is spent: a second try would be stopped as the first
            return samples
        if self.diverged is not None:
            raise ParityError(self.diverged)
        if self.run is None:
            self.run = self._make(samples)
            if self.run is None:  # stopped at the check's share: nothing that changes the math can be judged
                return samples
            if self.failed:  # an earlier try failed and made the check inconclusive; this one ran: judge it
                self.conclusive, self.failed = None, False
            samples, window = self._reached(samples, window)
        self._refuse_diverged(self.run)
        if self.conclusive is not None:
            return samples
        self.conclusive = conclusive(self.run, samples, window)
        learned = progress(self.run, samples, window)
        if self.conclusive:
            self._say_clearly(learned, samples, window)
            return samples
        longer = self.budget.extension(samples)
        if longer is not None:
            self.echo(
                f"parity: the baseline learned {learned:.1%} of its initial loss {self.run.initial_loss:.4g} in "
                f"{samples:,} samples, under the {MIN_PROGRESS:.1%} a verdict needs; running it again for "
                f"{longer:,}"
            )
            made = self._make(longer)  # failed or stopped: the short run stands, at its own length
            if made is None or made.samples <= samples:  # stopped in time short of the first: that one stands
                return samples
            self._refuse_diverged(made)
            self.run, self.extended = made, True
            samples, window = self._reached(longer, longer // WINDOW_PARTS)
            self.conclusive = conclusive(self.run, samples, window)
            learned = progress(self.run, samples, window)
        if self.conclusive:
            self.echo(f"parity: the baseline learned {learned:.1%} of its initial loss in {samples:,} samples"
                      + self._clearly(learned, samples, window))
            return samples
        self.echo(
            f"parity: inconclusive: {self.reason(samples, window)}. Only configs that leave the math unchanged "
            f"(loader knobs, placement, cudnn_benchmark, channels_last, cuda_graph; decode once its images are shown "
            f"to match; amp once its gradients are shown within the batch's own noise) may win"
        )
        return samples

    def _refuse_diverged(self, run: ParityRun) -> None:
        """End the check where the baseline's own training diverged: a loss or a weight that became NaN or inf is the
        workload's fault, not any config's, and nothing can be judged against it (not even learned too little, which
        a longer run would only repeat)."""
        if run.diverged() is None and math.isfinite(run.initial_loss):
            return
        self.conclusive, self.failed = False, True
        self.diverged = baseline_diverged(run)
        raise ParityError(self.diverged)

    def _reached(self, samples: int, window: int) -> tuple[int, int]:
        """The length every run trains: `samples`, or fewer where the run stopped in time short of them (its trial
        process stops training to answer within its limit, ``autotune.parity.run.train``): judged over what it
        reached, a run on a busy host still concludes where its share would have stopped it with nothing."""
        assert self.run is not None
        if self.run.samples >= samples:
            return samples, window
        self.stopped_short = True
        self.echo(f"parity: the baseline's run stopped in time at {self.run.samples:,} of its {samples:,} samples; "
                  f"every run is compared over those")
        return self.run.samples, self.run.samples // WINDOW_PARTS

    def _clearly(self, learned: float, samples: int, window: int) -> str:
        """What made a run that learned under MIN_PROGRESS conclusive: how far above its noise it stood."""
        z = signal.clear(self.run, samples, window) if self.run is not None and learned < MIN_PROGRESS else None
        return "" if z is None else f", {z:.1f} times its noise: enough to judge by"

    def _say_clearly(self, learned: float, samples: int, window: int) -> None:
        """Say so where a slow learner's first run is conclusive by its noise (docs/parity.md, "A slow learner")."""
        said = self._clearly(learned, samples, window)
        if said:
            self.echo(f"parity: the baseline learned {learned:.1%} of its initial loss in {samples:,} samples{said}")

    def _make(self, samples: int) -> ParityRun | None:
        """A run of `samples`; None when the check's share ran out before it ended (the check is then inconclusive)."""
        try:
            return self.budget.timed_baseline(lambda: self.make_run(samples))
        except ParityRunOutOfTime as exc:
            self.conclusive, self.out_of_time = False, f"the baseline's run was stopped: {exc}"
            self.echo(f"parity: inconclusive: {self.out_of_time}. Only configs that leave the math unchanged may win")
            return None
        except ParityRunFailed as exc:
            self.conclusive = False  # with no baseline run, no training run can be judged: only the same math may pass
            self.failed = True
            raise ParityError(f"the baseline's parity run failed: {exc}") from exc

    def why_inconclusive(self) -> str:
        """Why the check is inconclusive, in a few words: the baseline learned too little, or its run was stopped."""
        return self.out_of_time or "the baseline learned too little in it to judge by"

    def reason(self, samples: int, window: int) -> str:
        """What every inconclusive verdict states: what the baseline learned against what a verdict needs, or why
        it has no run."""
        if self.run is None:
            assert self.out_of_time is not None
            return self.out_of_time
        return inconclusive_reason(self.run, samples, window, self.extended)
