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
costs more than the check's whole share of the search (ResNet-50 on an H200: the
baseline's run alone took 82 s, and the fastest config, compiled bf16, was never
judged), and compile changes kernels and fusion, not the model, as amp changes
the rounding: both are judged by their gradients at the warmed-up weights against
the batch-to-batch noise. Without a numerics check they are judged by runs, as a
new batch size always is.
Every parity run is made by a caller-given function (in a search, in a trial process); the check
keeps what each cost and stops running once its budget is spent
(``autotune.parity.budget``). The verdicts it states without a run, and the
reasons a verdict gives, are in ``autotune.parity.reasons``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from autotune.config import Config, LrRule
from autotune.parity.budget import ParityBudget
from autotune.parity.inputs import DecodeInputs, InputsVerdict
from autotune.parity.numerics import AmpNumerics, NumericsVerdict
from autotune.parity.reasons import (
    by_gradients,
    explained,
    inconclusive_reason,
    same_as_baseline,
    same_math_unjudged,
    too_low,
    with_checks,
    without_run,
)
from autotune.parity.run import ParityRun
from autotune.parity.verdict import (
    INITIAL_RTOL,
    MIN_PROGRESS,
    TOLERANCES,
    WINDOW_PARTS,
    ParityError,
    ParityRunFailed,
    ParityVerdict,
    changes_math,
    clearly_too_far,
    compare,
    conclusive,
    family,
    numerics,
    progress,
    run_length,
    run_seconds,
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
    ) -> None:
        self.baseline, self.lr_of, self.make_run, self.echo = baseline, lr_of, make_run, echo
        self.inputs = DecodeInputs(baseline, check_inputs and (lambda c: self.budget.timed(lambda: check_inputs(c))),
                                   echo)
        self.amp = AmpNumerics(baseline, check_numerics and (lambda c: self.budget.timed(lambda: check_numerics(c))),
                               echo)
        self.lr_rule, self.lr_at = lr_rule, lr_at
        self.budget = ParityBudget(budget_s, echo)  # every run's time, the baseline's included: the check's cost
        # `max_batch`: the largest batch any candidate may have, when the runs begin before all are known.
        largest = max_batch if max_batch is not None else max([c.batch_size for c in candidates], default=1)
        self.samples, self.window = run_length(baseline.batch_size, largest, baseline_rate, run_seconds(budget_s))
        self.verdicts: dict[Config, ParityVerdict] = {}
        self.runs = 0  # candidates' runs; a config with the numerics (or hopeless batch) of a run reuses its verdict
        self.conclusive: bool | None = None  # None until the baseline has run; False (it learned too little, or
        # its run failed): only the same math may pass
        self.extended = False
        self._base: ParityRun | None = None
        self._base_from = ""  # where an adopted baseline run was made, for the summary
        self._base_needed = False  # a config needed the baseline's run (one judged by gradients alone needs none)
        self._base_failed = False  # the baseline's last run failed (self.conclusive is False for that alone)
        self._by_numerics: dict[tuple[Any, ...], tuple[Config, ParityVerdict]] = {}
        # (batch size, learning rate) pairs rejected by a margin: every config with that batch at that rate fails too.
        self._batch_rejected: dict[tuple[int, float], tuple[Config, ParityVerdict]] = {}
        # Called with the check once each verdict is reached: a search keeps its state (``autotune.parity.kept``).
        self.on_verdict: Callable[[ParityCheck], None] = lambda check: None

    def adopt_baseline(self, run: ParityRun, where: str) -> None:
        """Use a baseline run made elsewhere (`where` says by whom), of this gate's length, instead of making one."""
        # A run trains whole batches until it has seen `samples`: it ends within one batch past them.
        if (
            run.batch_size != self.baseline.batch_size
            or not self.samples <= run.samples < self.samples + run.batch_size
        ):
            raise ValueError(
                f"an adopted baseline run must train the baseline's batch {self.baseline.batch_size} for "
                f"{self.samples:,} samples, but got batch {run.batch_size} and {run.samples:,} samples."
            )
        self._base, self._base_from = run, where
        self.budget.adopt_baseline(run.seconds)

    def select(self, ranked: Sequence[Config], want: int, max_runs: int) -> list[Config]:
        """The first `want` configs of `ranked` that pass, running at most `max_runs` more candidates."""
        passed: list[Config] = []
        limit = self.runs + max_runs
        for config in ranked:
            if len(passed) == want:
                break
            key = numerics(config)
            if config in self.verdicts:
                verdict = self.verdicts[config]
            elif key == numerics(self.baseline):
                verdict = self._same_as_baseline(config)
                self.echo(f"  parity {verdict.summary()}  {config.describe()}")
            elif key in self._by_numerics:
                twin, verdict = self._by_numerics[key]
                self.echo(f"  parity {verdict.word:<6}  (same numerics as {twin.describe()})  {config.describe()}")
            elif (hopeless := self._hopeless(config)) is not None:
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
            elif self.runs >= limit or self.budget.spent(self.runs):
                if changes_math(self.baseline, config):
                    continue  # no run left for this one; a later config whose math is the baseline's needs none
                # The baseline's arithmetic: passed on it, as against a baseline that learned too little.
                verdict = same_math_unjudged(self.baseline, config, self.lr_of(config), self.samples, self.window,
                                             "no run of it fit in the check's time")
                self.echo(f"  parity {verdict.summary()}  {config.describe()}")
            else:
                verdict = self._judge(config, limit)
                self._by_numerics[key] = (config, verdict)
            self.verdicts[config] = verdict
            self.on_verdict(self)
            if verdict.passed:
                passed.append(config)
        return passed

    def why_hopeless(self, config: Config) -> str | None:
        """Why `config` would be rejected without a run (its batch, or a smaller one, rejected at every rate)."""
        found = self._hopeless(config)
        return None if found is None else found[2]

    def _ladder(self, config: Config) -> tuple[Rates, Rates]:
        """The rates to try `config` at (its rule's, then each gentler one's) and, for a new batch size, the bolder
        ones, nearest first (each capped rate once)."""
        return ladder(config, self.lr_of(config), self.lr_rule, self.lr_at, self.baseline.batch_size)

    def _hopeless(self, config: Config) -> tuple[Config, ParityVerdict, str] | None:
        """A config whose batch was rejected by a margin at every rate it would be tried at, or one larger than a
        batch that learned too little at every rate (``larger_than_rejected``); the verdict it takes, and why."""
        found = rejected_at_every_rate(self._batch_rejected, config.batch_size, *self._ladder(config))
        if found is not None:
            twin, verdict = found[-1]
            return twin, verdict, f"batch {config.batch_size} at lr {verdict.lr:g} is too far whatever the numerics"
        return larger_than_rejected(self._batch_rejected, self.baseline, config, self._ladder, self.lr_of(config))

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

    def _judge(self, config: Config, limit: int) -> ParityVerdict:
        """Run `config` at its rule's rate, then at the gentler ones while a batch size fails and a rate may help."""
        self._ensure_baseline()
        assert self._base is not None and self.conclusive is not None
        inputs = self.inputs.of(config)  # decode = gpu: its images must match the host pipeline's, or nothing does
        if not self.conclusive or (inputs is not None and not inputs.passed):
            unjudged = None if self.conclusive else self._inconclusive_reason()
            verdict = without_run(self.baseline, config, inputs, self.lr_of(config), self.lr_of(self.baseline),
                                  self.samples, self.window, unjudged)
            self.echo(f"  parity {verdict.summary()}  {config.describe()}")
            return verdict
        failed: list[tuple[str | None, ParityVerdict]] = []
        verdict: ParityVerdict | None = None
        rates, bolder = self._ladder(config)
        for rule, lr in [*rates, *bolder]:
            if (rule, lr) in bolder and not too_low(failed):
                break  # a rate too high, not too low, failed it: a bolder one cannot help
            if (config.batch_size, lr) in self._batch_rejected:
                failed.append((rule, self._batch_rejected[(config.batch_size, lr)][1]))
                continue
            if verdict is not None and (self.runs >= limit or self.budget.spent(self.runs)):
                break
            self.runs += 1
            verdict, may_help = self._check(config, lr)
            unjudged = None if self.conclusive else self._inconclusive_reason()  # what a pass of it must state
            verdict = explained(verdict, rule, self.lr_rule, failed, unjudged)
            self.echo(f"  parity {verdict.summary()}  [{verdict.run_s:.1f} s]  {config.describe()}")
            if clearly_too_far(verdict):
                self._batch_rejected[(config.batch_size, lr)] = (config, verdict)
            if verdict.passed or not may_help or verdict.family != "batch_size":
                break
            failed.append((rule, verdict))
        if verdict is None:  # every rate it would be tried at failed for another config of its batch size
            return with_checks(failed[-1][1], inputs)
        return with_checks(verdict, inputs)

    def _check(self, config: Config, lr: float) -> tuple[ParityVerdict, bool]:
        """One candidate run, judged; and whether another learning rate may change the verdict (the run completed
        from the baseline's start: a crash or another start is not the rate's doing)."""
        assert self._base is not None
        name = family(self.baseline, config)
        try:
            run = self.budget.timed(lambda: self.make_run(config, lr, self.samples))
        except ParityRunFailed as exc:
            verdict = ParityVerdict(
                False, name, TOLERANCES[name], self.samples, self.window, lr, self._base.lr, reason=str(exc)
            )
            return verdict, False
        may_help = math.isclose(run.initial_loss, self._base.initial_loss, rel_tol=INITIAL_RTOL)
        return compare(self._base, run, name, self.samples, self.window), may_help

    def _ensure_baseline(self) -> None:
        """Make the baseline's run if none was adopted, and judge whether it learned enough; extend it once if not."""
        self._base_needed = True
        if self._base is None:
            self._base = self._baseline_run()
            if self._base_failed:  # an earlier try failed and made the check inconclusive; this one ran: judge it
                self.conclusive, self._base_failed = None, False
        if self.conclusive is not None:
            return
        self.conclusive = conclusive(self._base, self.samples, self.window)
        if self.conclusive:
            return
        learned = progress(self._base, self.samples, self.window)
        longer = self.budget.extension(self.samples)
        if longer is not None:
            self.echo(
                f"parity: the baseline learned {learned:.1%} of its initial loss {self._base.initial_loss:.4g} in "
                f"{self.samples:,} samples, under the {MIN_PROGRESS:.1%} a verdict needs; running it again for "
                f"{longer:,}"
            )
            self.samples, self.window, self.extended = longer, longer // WINDOW_PARTS, True
            self._base = self._baseline_run()
            self.conclusive = conclusive(self._base, self.samples, self.window)
            learned = progress(self._base, self.samples, self.window)
        if self.conclusive:
            self.echo(f"parity: the baseline learned {learned:.1%} of its initial loss in {self.samples:,} samples")
            return
        self.echo(
            f"parity: inconclusive: {self._inconclusive_reason()}. Only configs that leave the math unchanged "
            f"(loader knobs, placement, cudnn_benchmark, channels_last, cuda_graph; decode once its images are shown "
            f"to match; amp once its gradients are shown within the batch's own noise) may win"
        )

    def _baseline_run(self) -> ParityRun:
        try:
            lr = self.lr_of(self.baseline)
            return self.budget.timed_baseline(lambda: self.make_run(self.baseline, lr, self.samples))
        except ParityRunFailed as exc:
            self.conclusive = False  # with no baseline run, no training run can be judged: only the same math may pass
            self._base_failed = True
            raise ParityError(f"the baseline's parity run failed: {exc}") from exc

    def _inconclusive_reason(self) -> str:
        assert self._base is not None
        return inconclusive_reason(self._base, self.samples, self.window, self.extended)

    def _same_as_baseline(self, config: Config) -> ParityVerdict:
        return same_as_baseline(self.baseline, config, self.lr_of(config), self.samples, self.window, self.conclusive)

    def summary(self) -> str:
        """The check's cost and what it compared, in one line."""
        rejected = sum(not v.passed for v in self.verdicts.values())
        unjudged = sum(not v.passed and not v.conclusive for v in self.verdicts.values())
        of = f" ({unjudged} of them inconclusive)" if unjudged else ""
        where = f", {self._base_from}" if self._base_from else ""
        where += ", then once longer" if self.extended else ""
        budget = self.budget
        bound = f" of its {budget.budget_s:.0f} s" if budget.budget_s is not None else ""
        if self._base is None and not self._base_needed:
            return (
                f"parity: {len(self.verdicts)} config(s) checked, {rejected} rejected{of}; no training run was made, "
                f"not even the baseline's: the checks that need none (gradients, images) took "
                f"{budget.seconds:.1f} s{bound}"
            )
        return (
            f"parity: {len(self.verdicts)} config(s) checked, {rejected} rejected{of}; {self.runs} run(s) and the "
            f"baseline's took {budget.seconds:.1f} s{bound} (baseline {budget.baseline_seconds:.1f} s{where}); each "
            f"compared with the baseline ({self.baseline.describe()}, lr {self.lr_of(self.baseline):g}) over "
            f"{self.samples:,} samples: the training loss over the last {self.window:,} and the probe set's after them"
        )

    def record(self, config: Config) -> dict[str, Any]:
        """What the tuned file keeps: the winner's numbers and what the whole check cost.

        The baseline itself has a record too: an inconclusive check is worth stating whatever wins.
        """
        # A config with the baseline's numerics had no run: its verdict, made now, states what the check found since.
        same = numerics(config) == numerics(self.baseline)
        verdict = self._same_as_baseline(config) if same else self.verdicts[config]
        record = {
            "checked": True,
            **verdict.as_record(),
            "configs_checked": len(self.verdicts),
            "configs_rejected": sum(not v.passed for v in self.verdicts.values()),
            "check_s": round(self.budget.seconds, 1),
        }
        if self.budget.budget_s is not None:
            record["check_budget_s"] = round(self.budget.budget_s, 1)
        return record


Rates = list[tuple[str | None, float]]


def ladder(
    config: Config, first: float, lr_rule: LrRule | None, lr_at: Callable[[Config, str], float] | None, base_batch: int
) -> tuple[Rates, Rates]:
    """The rates to try `config` at: its rule's (`first`) and each gentler one's; then the bolder ones, nearest
    first. A new batch size only; a capped rate that equals another rule's is tried once."""
    rates: Rates = [(lr_rule.name if lr_rule else None, first)]
    if lr_rule is None or lr_at is None or config.batch_size == base_batch:
        return rates, []
    bolder: Rates = []
    for rules, into in ((lr_rule.gentler(), rates), (lr_rule.bolder(), bolder)):
        for rule in rules:
            lr = lr_at(config, rule)
            if all(not math.isclose(lr, seen) for _, seen in [*rates, *bolder]):
                into.append((rule, lr))
    return rates, bolder


def rejected_at_every_rate(
    rejected: Mapping[tuple[int, float], tuple[Config, ParityVerdict]], batch: int, rates: Rates, bolder: Rates
) -> list[tuple[Config, ParityVerdict]] | None:
    """The runs that rejected `batch` by a margin at each of `rates` (and at each `bolder` one, when the gentler ones
    showed the rate too low), in that order; None when a rate is left that no run has ruled out."""
    def runs(tried: Rates) -> list[tuple[Config, ParityVerdict]] | None:
        found = [rejected.get((batch, lr)) for _, lr in tried]
        return None if any(f is None for f in found) else [f for f in found if f is not None]

    found = runs(rates)
    if not found:
        return None
    if too_low([(rule, verdict) for (rule, _), (_, verdict) in zip(rates, found)]):
        more = runs(bolder)
        return None if more is None else found + more
    return found


def larger_than_rejected(
    rejected: Mapping[tuple[int, float], tuple[Config, ParityVerdict]],
    baseline: Config,
    config: Config,
    ladder_of: Callable[[Config], tuple[Rates, Rates]],
    lr: float,
) -> tuple[Config, ParityVerdict, str] | None:
    """`config`'s rejection without a run, when its batch is larger than one above the baseline's that learned too
    little at every rate it was tried at, with nothing but its batch changed from the baseline's math: on as many
    samples, a larger batch takes fewer steps, each further from the baseline's. Seen on an H200: mnist_cnn's
    batches 2048, 4096 and 8192 took all 9 of the check's runs, three rates each, and batch 1024 in fp32 (1.45M
    samples/s) was never checked. A batch rejected beside amp, or for learning more than the baseline, says
    nothing of a larger one."""
    def batch_alone(twin: Config, verdict: ParityVerdict) -> bool:
        # The baseline's math (autotune.parity.verdict.SAME_MATH_KNOBS): mnist_cnn's rejected batches were
        # device-resident in a CUDA graph, which an equality of every knob but the loader's never let through.
        same_math = changes_math(baseline, twin) == ["batch_size"]
        return same_math and (verdict.deviation or 0.0) > 0 and (verdict.probe_deviation or 0.0) >= 0

    for batch in sorted({b for b, _ in rejected if baseline.batch_size < b < config.batch_size}):
        found = rejected_at_every_rate(rejected, batch, *ladder_of(dataclasses.replace(config, batch_size=batch)))
        if found is None or not all(batch_alone(*f) for f in found):
            continue
        twin, verdict = found[-1]
        why = f"batch {batch} learned too little at every rate, and batch {config.batch_size} is larger"
        carried = ParityVerdict(False, verdict.family, verdict.tolerance, verdict.samples, verdict.window, lr,
                                verdict.baseline_lr, initial_loss=verdict.initial_loss,
                                baseline_loss=verdict.baseline_loss, baseline_probe_loss=verdict.baseline_probe_loss,
                                reason=why, conclusive=verdict.conclusive)
        return twin, carried, why
    return None
