"""The parity check over a search's fastest configs: one baseline run, a verdict per config.

``ParityCheck.select`` walks the configs fastest first and returns the first
few that pass (``autotune.parity.verdict`` judges each). A config whose numerics
equal a checked one's reuses its verdict (loader knobs change speed, not
training), and a batch size rejected by a wide margin at a learning rate rules
out its slower variants at that rate unrun. A batch size that fails at its
rule's rate is tried at the gentler rates (sqrt, then none) before it is
rejected. A baseline that learns too little to judge by is run once more, longer;
if it still has, the check is inconclusive: configs with the baseline's math pass
unrun (a run's deviations would be noise), and no other may. A config that decodes
on the device passes only once the inputs check, made once per search, has shown
that its images match the host pipeline's (``autotune.parity.inputs``).

A config at the baseline's batch whose math differs from the baseline's only in
amp and compile (decode aside, judged by its images) is judged by its gradients
alone, with no training run, not even the baseline's: it passes once they are
shown to differ from fp32's by less than the batch's own noise, and is rejected
when they do not (``autotune.parity.numerics``). A training run of a heavy model
costs more than the check's whole share of the search (docs/parity.md, "amp and
compile"), and compile changes kernels and fusion, not the model, as amp changes
the rounding: both are judged by their gradients at the warmed-up weights against
the batch-to-batch noise. Without a numerics check they are judged by runs, as a
new batch size always is.
Every parity run is made by a caller-given function (in a search, in a trial process); the check
keeps what each cost and stops running once its budget is spent
(``autotune.parity.budget``). The verdicts it states without a run, and the
reasons a verdict gives, are in ``autotune.parity.reasons``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from autotune.config import Config, LrRule
from autotune.parity import summary as said
from autotune.parity.baseline import BaselineRun
from autotune.parity.budget import ParityBudget
from autotune.parity.inputs import DecodeInputs, InputsVerdict
from autotune.parity.numerics import AmpNumerics, NumericsVerdict
from autotune.parity.rates import RejectedBatches
from autotune.parity.reasons import (
    by_gradients,
    cannot_judge,
    explained,
    same_as_baseline,
    same_math_unjudged,
    too_low,
    with_checks,
    without_run,
)
from autotune.parity.run import ParityRun, probe_size
from autotune.parity.verdict import (
    CANDIDATE_STEPS,
    INITIAL_RTOL,
    MIN_BASELINE_STEPS,
    SAME_MATH_KNOBS,
    TOLERANCES,
    WINDOW_PARTS,
    ParityRunFailed,
    ParityRunOutOfTime,
    ParityVerdict,
    changes_math,
    clearly_too_far,
    compare,
    family,
    largest_batch,
    numerics,
    run_length,
    run_seconds,
    window_comparable,
)


class ParityCheck:
    """Checks configs in the order given against one baseline run, keeping every verdict.

    `make_run(config, lr, samples)` makes one parity run (in a trial process, in the
    search) and raises ParityRunFailed with the reason when it cannot. One run length
    serves every candidate, set by the largest batch among `candidates` (or
    `max_batch`), so the baseline trains once (twice when the first is inconclusive).

    `lr_of(config)` is the learning rate by the search's rule; with `lr_rule` and
    `lr_at(config, rule)`, a batch size that fails at it is tried at the gentler rules'.
    `budget_s` bounds the check's cost: its runs are sized to fit, and no run starts
    once it is spent.

    `check_numerics(config)`: a config's gradients against the baseline's; with it, a config that changes only amp
    and compile at the baseline's batch is judged by them, with no run. `check_inputs(config)`: the device decode
    path's images against the host pipeline's.
    """

    def __init__(
        self,
        baseline: Config,
        lr_of: Callable[[Config], float],
        make_run: Callable[[Config, float, int], ParityRun],
        candidates: Sequence[Config],
        echo: Callable[[str], None] = print,
        max_batch: int | None = None,
        baseline_rate: float | None = None,  # samples/s of the baseline's trial: bounds the runs' length
        budget_s: float | None = None,  # seconds the whole check may take; None: no bound but the runs' length
        lr_rule: LrRule | None = None,
        lr_at: Callable[[Config, str], float] | None = None,
        check_inputs: Callable[[Config], InputsVerdict] | None = None,
        check_numerics: Callable[[Config], NumericsVerdict] | None = None,
        same_math: tuple[str, ...] = SAME_MATH_KNOBS,  # the knobs that keep the baseline's math (a stream: fewer)
        spare_s: Callable[[], float] | None = None,  # seconds the search can give beyond `budget_s` now
    ) -> None:
        self.baseline, self.lr_of, self.make_run, self.echo = baseline, lr_of, make_run, echo
        self.same_math = same_math
        # Loader knobs that change the order here (a stream's worker count): a config differing in them needs a run.
        self.ordering = tuple(k for k in SAME_MATH_KNOBS if k not in same_math)
        self.inputs = DecodeInputs(baseline, check_inputs and (lambda c: self.budget.timed(lambda: check_inputs(c))),
                                   echo)
        self.amp = AmpNumerics(
            baseline, check_numerics and (lambda c: self.budget.timed_gradients(lambda: check_numerics(c))), echo,
            same_math)
        self.lr_rule, self.lr_at = lr_rule, lr_at
        # Every run's time, the baseline's included: the check's cost.
        self.budget = ParityBudget(budget_s, echo, spare_s)
        # `max_batch`: the largest batch any candidate may have, when the runs begin before all are known.
        largest = max_batch if max_batch is not None else max([c.batch_size for c in candidates], default=1)
        self.batch_limit, self.samples, self.window = sized(baseline, largest, budget_s, baseline_rate)
        self.rate = baseline_rate
        self.probe_samples = probe_size(self.samples)  # every run's probe: an extension keeps the first run's
        self.verdicts: dict[Config, ParityVerdict] = {}
        self.runs = 0  # candidates' runs; a config with the numerics (or hopeless batch) of a run reuses its verdict
        self.base = BaselineRun(lambda samples: make_run(baseline, lr_of(baseline), samples), self.budget, echo)
        self._by_numerics: dict[tuple[Any, ...], tuple[Config, ParityVerdict]] = {}
        self.rejected = RejectedBatches(baseline, lr_of, lr_rule, lr_at)
        # Called with the check once each verdict is reached: a search keeps its state (``autotune.parity.kept``).
        self.on_verdict: Callable[[ParityCheck], None] = lambda check: None

    @property
    def conclusive(self) -> bool | None:
        """None until the baseline has run; False (it learned too little, or its run failed or was stopped): only
        the same math may pass."""
        return self.base.conclusive

    def adopt_baseline(self, run: ParityRun, where: str) -> None:
        """Use a baseline run made elsewhere (`where` says by whom), of this check's length, instead of making one."""
        self.base.adopt(self.baseline, run, where, self.samples)

    def select(self, ranked: Sequence[Config], want: int, max_runs: int) -> list[Config]:
        """The first `want` configs of `ranked` that pass, running at most `max_runs` more candidates."""
        passed: list[Config] = []
        limit = self.runs + max_runs
        for config in ranked:
            if len(passed) == want:
                break
            key = self.key(config)
            if config in self.verdicts:
                verdict = self.verdicts[config]
            elif key == self.key(self.baseline):
                verdict = self._same_as_baseline(config)
                self.echo(f"  parity {verdict.summary()}  {config.describe()}")
            elif key in self._by_numerics:
                twin, verdict = self._by_numerics[key]
                self.echo(f"  parity {verdict.word:<6}  (same numerics as {twin.describe()})  {config.describe()}")
            elif (hopeless := self.rejected.hopeless(config)) is not None:
                twin, verdict, why = hopeless
                self.echo(f"  parity {verdict.word:<6}  ({why}: see {twin.describe()})  {config.describe()}")
            elif self.amp.judges(config):
                # amp and compile at the baseline's batch: judged by their gradients with no training run, so
                # `max_runs` (which counts training runs) does not bound them. The check takes a few batches in a
                # trial process and is timed by the budget; one starts while any of the budget is left, not only
                # while a whole run's cost is (as `spent` asks of a run): on a heavy model a run costs the whole
                # share, and the fastest config (compiled bf16) would again go unjudged. One already made serves
                # every config with its numerics for free.
                if self.budget.exhausted() and not self._measured(config):
                    continue
                verdict = self._by_gradients(config)
                self._by_numerics[key] = (config, verdict)
            elif config.batch_size > self.batch_limit:
                verdict = self._unrun(config)
                self.echo(f"  parity {verdict.summary()}  {config.describe()}")
            elif self.runs >= limit or self.budget.spent(self.runs) or self.budget.exhausted():
                if changes_math(self.baseline, config, self.same_math):
                    continue  # no run left for this one; a later config whose math is the baseline's needs none
                # The baseline's arithmetic: passed on it, as against a baseline that learned too little.
                verdict = same_math_unjudged(self.baseline, config, self.lr_of(config), self.samples, self.window,
                                             "no run of it fit in the check's time")
                self.echo(f"  parity {verdict.summary()}  {config.describe()}")
            else:
                verdict = self._judge(config)
                self._by_numerics[key] = (config, verdict)
            self.verdicts[config] = verdict
            self.on_verdict(self)
            if verdict.passed:
                passed.append(config)
        return passed

    def key(self, config: Config) -> tuple[Any, ...]:
        """What makes `config` train otherwise than another: its numerics, and its order where a loader knob sets it;
        configs of one key share a verdict."""
        return numerics(config, self.ordering)

    def _unrun(self, config: Config) -> ParityVerdict:
        """`config`, whose batch is too large for a run to fit the check's share, unjudged: it cannot pass."""
        why = unrun_why(config, self.rate, self.samples, self.base.stopped_short, self.budget.budget_s)
        changed = changes_math(self.baseline, config, self.same_math)
        return cannot_judge(self.baseline, config, changed, self.lr_of(config), self.lr_of(self.baseline),
                            self.samples, self.window, why)

    def why_hopeless(self, config: Config) -> str | None:
        """Why `config` cannot pass without a run: its batch, or a smaller one, rejected at every rate, or too large
        for a run to fit the check's share (measuring it would spend a trial on a config that cannot win)."""
        if config.batch_size > self.batch_limit and changes_math(self.baseline, config, self.same_math):
            return self._unrun(config).reason
        found = self.rejected.hopeless(config)
        return None if found is None else found[2]

    def _measured(self, config: Config) -> bool:
        """Whether the checks that judge `config` without a run were made already (they cost nothing more)."""
        inputs_made = config.decode == self.baseline.decode or self.inputs.verdict is not None
        return inputs_made and self.amp.measured(config)

    def _by_gradients(self, config: Config) -> ParityVerdict:
        """`config`, which changes only amp and compile at the baseline's batch, judged by its gradients (and, when
        it decodes on the device, first by its images), with no training run."""
        inputs = self.inputs.of(config)  # decode = gpu: its images must match the host pipeline's, or nothing does
        numerics = self.amp.of(config) if inputs is None or inputs.passed else None
        verdict = by_gradients(self.baseline, config, inputs, numerics, self.lr_of(config), self.lr_of(self.baseline),
                               self.samples, self.window)
        self.echo(f"  parity {verdict.summary()}  {config.describe()}")
        return verdict

    def _judge(self, config: Config) -> ParityVerdict:
        """Run `config` at its rule's rate, then at the gentler ones while a batch size fails and a rate may help."""
        self._ensure_baseline()
        assert self.conclusive is not None
        if config.batch_size > self.batch_limit:  # the baseline's run stopped in time short of its shortest run
            unrun = self._unrun(config)
            self.echo(f"  parity {unrun.summary()}  {config.describe()}")
            return unrun
        inputs = self.inputs.of(config)  # decode = gpu: its images must match the host pipeline's, or nothing does
        if not self.conclusive or (inputs is not None and not inputs.passed):
            unjudged = None if self.conclusive else self._inconclusive_reason()
            verdict = without_run(self.baseline, config, inputs, self.lr_of(config), self.lr_of(self.baseline),
                                  self.samples, self.window, unjudged, self.same_math)
            self.echo(f"  parity {verdict.summary()}  {config.describe()}")
            return verdict
        failed: list[tuple[str | None, ParityVerdict]] = []
        verdict: ParityVerdict | None = None
        rates, bolder = self.rejected.ladder(config)
        for rule, lr in [*rates, *bolder]:
            if (rule, lr) in bolder and not too_low(failed):
                break  # a rate too high, not too low, failed it: a bolder one cannot help
            if (config.batch_size, lr) in self.rejected.by_rate:
                failed.append((rule, self.rejected.by_rate[(config.batch_size, lr)][1]))
                continue
            # The check's time may stop a ladder, its cap on runs may not: the cap bounds how many configs are
            # judged (``select``), and a batch size cut short of a gentler rate by it would stand rejected "at every
            # rate" with that rate never run (on one H100, text_transformer's batch 128 was rejected at its sqrt and
            # unscaled rates and never run at the linear one, at which it had passed in the search before).
            if verdict is not None and self.budget.spent(self.runs):
                break
            self.runs += 1
            verdict, may_help = self._check(config, lr)
            unjudged = None if self.conclusive else self._inconclusive_reason()  # what a pass of it must state
            verdict = explained(verdict, rule, self.lr_rule, failed, unjudged)
            self.echo(f"  parity {verdict.summary()}  [{verdict.run_s:.1f} s]  {config.describe()}")
            if clearly_too_far(verdict):
                self.rejected.by_rate[(config.batch_size, lr)] = (config, verdict)
            if verdict.passed or not may_help or verdict.family != "batch_size":
                break
            failed.append((rule, verdict))
        if verdict is None:  # every rate it would be tried at failed for another config of its batch size
            return with_checks(failed[-1][1], inputs)
        if not verdict.conclusive and failed:  # the share stopped a gentler rate's run: the rejection before it stands
            return with_checks(failed[-1][1], inputs)
        return with_checks(verdict, inputs)

    def _check(self, config: Config, lr: float) -> tuple[ParityVerdict, bool]:
        """One candidate run, judged; and whether another learning rate may change the verdict (the run completed
        from the baseline's start: a crash or another start is not the rate's doing)."""
        base = self.base.run
        assert base is not None
        name = family(self.baseline, config)
        try:
            run = self.budget.timed(lambda: self.make_run(config, lr, self.samples))
        except ParityRunFailed as exc:
            # A run the check's share stopped judged nothing: unjudged (inconclusive), not rejected by its numbers.
            judged = not isinstance(exc, ParityRunOutOfTime)
            verdict = ParityVerdict(
                False, name, TOLERANCES[name], self.samples, self.window, lr, base.lr, reason=str(exc),
                conclusive=judged,
            )
            return verdict, False
        may_help = math.isclose(run.initial_loss, base.initial_loss, rel_tol=INITIAL_RTOL)
        probe_only = not window_comparable(self.baseline, config)
        return compare(base, run, name, self.samples, self.window, probe_only), may_help

    def _ensure_baseline(self) -> None:
        """The baseline's run made and judged (``BaselineRun.ensure``); an extended one sets every run's length."""
        samples = self.base.ensure(self.samples, self.window)
        if samples != self.samples:
            self.samples, self.window = samples, samples // WINDOW_PARTS
            # A baseline run that stopped in time short of its length: a batch whose shortest run is longer is unrun.
            self.batch_limit = min(self.batch_limit, max(self.baseline.batch_size, samples // CANDIDATE_STEPS))

    def why_inconclusive(self) -> str:
        """Why the check is inconclusive, in a few words: the baseline learned too little, or its run was stopped."""
        return self.base.why_inconclusive()

    def _inconclusive_reason(self) -> str:
        return self.base.reason(self.samples, self.window)

    def _same_as_baseline(self, config: Config) -> ParityVerdict:
        return same_as_baseline(self.baseline, config, self.lr_of(config), self.samples, self.window, self.conclusive)

    def summary(self) -> str:
        """The check's cost and what it compared, in one line."""
        return said.of(self.verdicts.values(), self.runs, self.base, self.budget, self.baseline,
                       self.lr_of(self.baseline), self.samples, self.window)

    def record(self, config: Config) -> dict[str, Any]:
        """What the tuned file keeps: `config`'s verdict and what the whole check cost (``summary.record``). The
        baseline itself has a record too: an inconclusive check is worth stating whatever wins."""
        # A config with the baseline's numerics had no run: its verdict, made now, states what the check found since.
        same = self.key(config) == self.key(self.baseline)
        verdict = self._same_as_baseline(config) if same else self.verdicts[config]
        return said.record(verdict, self.verdicts.values(), self.budget)


def sized(baseline: Config, largest: int, budget_s: float | None,
          baseline_rate: float | None) -> tuple[float, int, int]:
    """The largest batch a run of the check judges, and every run's samples and window.

    A batch whose shortest run outlasts the check's share is not run at all (``ParityCheck._unrun``): sized for it,
    every run, the baseline's first, would be. One whose 8 steps are no longer than the baseline's own shortest run
    is judged: that run is made anyway (docs/parity.md, "Within a time bound").
    """
    run_s = run_seconds(budget_s)
    limit = math.inf if budget_s is None or baseline_rate is None else max(
        largest_batch(baseline.batch_size, baseline_rate, run_s),
        MIN_BASELINE_STEPS * baseline.batch_size // CANDIDATE_STEPS)
    samples, window = run_length(baseline.batch_size, int(min(largest, limit)), baseline_rate, run_s)
    return limit, samples, window


def unrun_why(config: Config, rate: float | None, samples: int, stopped_short: bool, budget_s: float | None) -> str:
    """Why `config`'s shortest run is not made: longer than a baseline run that stopped in time, or than the share."""
    shortest = CANDIDATE_STEPS * config.batch_size
    took = f", {shortest / rate:.1f} s at the baseline's {rate:,.0f} samples/s" if rate else ""
    if stopped_short and shortest > samples:
        return (f"its shortest run ({CANDIDATE_STEPS} steps: {shortest:,} samples) is longer than the baseline's, "
                f"which stopped in time at {samples:,}")
    return (f"its shortest run ({CANDIDATE_STEPS} steps: {shortest:,} samples{took}) does not fit the check's "
            f"share of the time budget ({budget_s or 0:.0f} s)")
