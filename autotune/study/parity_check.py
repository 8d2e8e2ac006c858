"""The parity check over a search's fastest configs: one baseline run, a verdict per config.

``ParityCheck.select`` walks the configs fastest first and returns the first
few that pass (``autotune.study.parity`` judges each). A config whose numerics
equal a checked one's reuses its verdict (loader knobs change speed, not
training), and a batch size rejected by a wide margin at a learning rate rules
out its slower variants at that rate unrun. A batch size that fails at its
rule's rate is tried at the gentler rates (sqrt, then none) before it is
rejected. A baseline that learns too little to judge by is run once more, longer;
if it still has, the check is inconclusive and only configs with the baseline's
math may pass. Every parity run is made by a caller-given function (in a search,
in a trial process); the check keeps what each cost and stops running once its
budget is spent.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from autotune.config import Config, LrRule
from autotune.study.parity import (
    CHECK_SHARE,
    EXTEND_FACTOR,
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
from autotune.trial.parity_run import ParityRun

MIN_EXTENSION = 1.25  # an extension shorter than this many times the run is not worth a run: the check stays as is


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
    ) -> None:
        self.baseline, self.lr_of, self.make_run, self.echo = baseline, lr_of, make_run, echo
        self.lr_rule, self.lr_at, self.budget_s = lr_rule, lr_at, budget_s
        # `max_batch`: the largest batch any candidate may have, when the runs begin before all are known.
        largest = max_batch if max_batch is not None else max([c.batch_size for c in candidates], default=1)
        self.samples, self.window = run_length(baseline.batch_size, largest, baseline_rate, run_seconds(budget_s))
        self.verdicts: dict[Config, ParityVerdict] = {}
        self.runs = 0  # candidates' runs; a config with the numerics (or hopeless batch) of a run reuses its verdict
        self.seconds = 0.0  # wall time of every parity run, the baseline's included: the check's cost
        self.baseline_seconds = 0.0
        self.conclusive: bool | None = None  # None until the baseline has run; False: only the same math may pass
        self.extended = False
        self._base: ParityRun | None = None
        self._base_from = ""  # where an adopted baseline run was made, for the summary
        self._last_base_s = 0.0  # the latest baseline run's time: what a candidate's run is expected to take
        self._by_numerics: dict[tuple[Any, ...], tuple[Config, ParityVerdict]] = {}
        # (batch size, learning rate) pairs rejected by a margin: every config with that batch at that rate fails too.
        self._batch_rejected: dict[tuple[int, float], tuple[Config, ParityVerdict]] = {}
        self._told_spent = False

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
        self.baseline_seconds = self._last_base_s = run.seconds
        self.seconds += run.seconds  # the check's cost, wherever it was paid

    def _timed(self, config: Config, lr: float) -> ParityRun:
        start = time.perf_counter()
        try:
            return self.make_run(config, lr, self.samples)
        finally:
            self.seconds += time.perf_counter() - start

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
                twin, verdict = hopeless
                self.echo(
                    f"  parity {verdict.word:<6}  (batch {config.batch_size} at lr {verdict.lr:g} is too far "
                    f"whatever the numerics: see {twin.describe()})  {config.describe()}"
                )
            elif self.runs >= limit or self._spent():
                break
            else:
                verdict = self._judge(config, limit)
                self._by_numerics[key] = (config, verdict)
            self.verdicts[config] = verdict
            if verdict.passed:
                passed.append(config)
        return passed

    def _rates(self, config: Config) -> list[tuple[str | None, float]]:
        """The rates to try `config` at, in order: its rule's, then (a new batch size only) each gentler one's."""
        first = self.lr_of(config)
        rates: list[tuple[str | None, float]] = [(self.lr_rule.name if self.lr_rule else None, first)]
        if self.lr_rule is None or self.lr_at is None or config.batch_size == self.baseline.batch_size:
            return rates
        for rule in self.lr_rule.gentler():
            lr = self.lr_at(config, rule)
            if all(not math.isclose(lr, seen) for _, seen in rates):  # a capped rate can equal a bolder rule's
                rates.append((rule, lr))
        return rates

    def _hopeless(self, config: Config) -> tuple[Config, ParityVerdict] | None:
        """A config rejected by a margin at the same batch size, at every rate this config would be tried at."""
        found = [self._batch_rejected.get((config.batch_size, lr)) for _, lr in self._rates(config)]
        return found[-1] if found and all(f is not None for f in found) else None  # type: ignore[return-value]

    def _spent(self) -> bool:
        """The check's budget cannot pay for one more run (expected to take as long as the baseline's)."""
        if self.budget_s is None or self.runs == 0 or self.seconds + self._last_base_s <= self.budget_s:
            return False
        if not self._told_spent:
            self._told_spent = True
            self.echo(
                f"parity: the check's time is spent ({self.seconds:.1f} s of its {self.budget_s:.0f} s, "
                f"{CHECK_SHARE:.0%} of the search's budget); the configs not yet checked cannot be finalists"
            )
        return True

    def _judge(self, config: Config, limit: int) -> ParityVerdict:
        """Run `config` at its rule's rate, then at the gentler ones while a batch size fails and a rate may help."""
        self._ensure_baseline()
        assert self._base is not None and self.conclusive is not None
        changed = changes_math(self.baseline, config)
        if not self.conclusive and changed:
            verdict = self._inconclusive(config, changed)
            self.echo(f"  parity {verdict.summary()}  {config.describe()}")
            return verdict
        failed: list[tuple[str | None, ParityVerdict]] = []
        verdict: ParityVerdict | None = None
        for rule, lr in self._rates(config):
            if (config.batch_size, lr) in self._batch_rejected:
                failed.append((rule, self._batch_rejected[(config.batch_size, lr)][1]))
                continue
            if verdict is not None and (self.runs >= limit or self._spent()):
                break
            self.runs += 1
            verdict, may_help = self._check(config, lr)
            verdict = self._explained(verdict, rule, failed)
            self.echo(f"  parity {verdict.summary()}  [{verdict.run_s:.1f} s]  {config.describe()}")
            if clearly_too_far(verdict):
                self._batch_rejected[(config.batch_size, lr)] = (config, verdict)
            if verdict.passed or not may_help or verdict.family != "batch_size":
                break
            failed.append((rule, verdict))
        assert verdict is not None  # _hopeless() ruled out a config with no rate left to try
        return verdict

    def _explained(
        self, verdict: ParityVerdict, rule: str | None, failed: list[tuple[str | None, ParityVerdict]]
    ) -> ParityVerdict:
        """The verdict with the rule its rate came from and why that rate (the search's rule, or the bolder ones
        failed); a pass of an inconclusive check says so."""
        changes: dict[str, Any] = {}
        if rule is not None and self.lr_rule is not None:
            bolder = "; ".join(f"the {r} rate (lr {v.lr:g}) failed: {_short(v)}" for r, v in failed)
            why = f"{bolder}; {rule} is the next gentler rate" if failed else self.lr_rule.why
            changes.update(lr_rule=rule, lr_reason=why)
        if verdict.passed and not self.conclusive:
            # It passes on its math alone: the same arithmetic as a baseline whose learning is too small to measure.
            changes.update(
                conclusive=False, reason=f"it keeps the baseline's math, and {self._inconclusive_reason()}"
            )
        return dataclasses.replace(verdict, **changes)

    def _ensure_baseline(self) -> None:
        """Make the baseline's run if none was adopted, and judge whether it learned enough; extend it once if not."""
        if self._base is None:
            self._base = self._baseline_run()
        if self.conclusive is not None:
            return
        self.conclusive = conclusive(self._base, self.samples, self.window)
        if self.conclusive:
            return
        learned = progress(self._base, self.samples, self.window)
        longer = self._extension()
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
            f"(loader knobs, placement, cudnn_benchmark) may win"
        )

    def _extension(self) -> int | None:
        """The samples of the one longer run an inconclusive check may make: EXTEND_FACTOR times, or what the
        budget pays for while leaving as much for a candidate's run; None when that is not worth a run."""
        factor = float(EXTEND_FACTOR)
        if self.budget_s is not None and self._last_base_s > 0:
            factor = min(factor, (self.budget_s - self.seconds) / (2 * self._last_base_s))
        if factor < MIN_EXTENSION:
            self.echo(
                f"parity: the check's budget ({self.budget_s:.0f} s, {self.seconds:.1f} s spent) leaves no time to "
                f"run the baseline longer"
            )
            return None
        return int(self.samples * factor)

    def _baseline_run(self) -> ParityRun:
        before = self.seconds
        try:
            run = self._timed(self.baseline, self.lr_of(self.baseline))
        except ParityRunFailed as exc:
            raise ParityError(f"the baseline's parity run failed: {exc}") from exc
        self._last_base_s = self.seconds - before
        self.baseline_seconds += self._last_base_s
        return run

    def _inconclusive_reason(self) -> str:
        """What the baseline learned, against what a verdict needs: the reason every inconclusive verdict gives."""
        assert self._base is not None
        learned = progress(self._base, self.samples, self.window)
        longer = ", run once longer" if self.extended else ""
        return (
            f"the baseline learned {learned:.1%} of its initial loss {self._base.initial_loss:.4g} in "
            f"{self.samples:,} samples{longer}; a verdict needs {MIN_PROGRESS:.1%}"
        )

    def _inconclusive(self, config: Config, changed: list[str]) -> ParityVerdict:
        """No run: against a baseline that learned nothing measurable, a config with other math cannot be judged."""
        name = family(self.baseline, config)
        return ParityVerdict(
            False,
            name,
            TOLERANCES[name],
            self.samples,
            self.window,
            self.lr_of(config),
            self.lr_of(self.baseline),
            reason=f"it changes {', '.join(changed)}, and {self._inconclusive_reason()}: cannot be judged",
            conclusive=False,
        )

    def _same_as_baseline(self, config: Config) -> ParityVerdict:
        """Loader knobs alone (workers, pinning, prefetch, persistence) change speed, not what is trained:
        the same samples in the same order through the same math. No run can tell them apart."""
        lr = self.lr_of(config)
        reason = "the baseline's own numerics: only loader knobs differ, which change speed, not what is trained"
        if config == self.baseline:
            reason = "the workload's own settings: the baseline itself"
        return ParityVerdict(
            True,
            "loader",
            TOLERANCES["loader"],
            self.samples,
            self.window,
            lr,
            lr,
            reason=reason,
            conclusive=self.conclusive is not False,
        )

    def summary(self) -> str:
        """The check's cost and what it compared, in one line."""
        rejected = sum(not v.passed for v in self.verdicts.values())
        unjudged = sum(not v.passed and not v.conclusive for v in self.verdicts.values())
        of = f" ({unjudged} of them inconclusive)" if unjudged else ""
        where = f", {self._base_from}" if self._base_from else ""
        where += ", then once longer" if self.extended else ""
        bound = f" of its {self.budget_s:.0f} s" if self.budget_s is not None else ""
        return (
            f"parity: {len(self.verdicts)} config(s) checked, {rejected} rejected{of}; {self.runs} run(s) and the "
            f"baseline's took {self.seconds:.1f} s{bound} (baseline {self.baseline_seconds:.1f} s{where}); each "
            f"compared with the baseline ({self.baseline.describe()}, lr {self.lr_of(self.baseline):g}) over "
            f"{self.samples:,} samples: the training loss over the last {self.window:,} and the probe set's after them"
        )

    def _check(self, config: Config, lr: float) -> tuple[ParityVerdict, bool]:
        """One candidate run, judged; and whether another learning rate may change the verdict (the run completed
        from the baseline's start: a crash or another start is not the rate's doing)."""
        assert self._base is not None
        name = family(self.baseline, config)
        try:
            run = self._timed(config, lr)
        except ParityRunFailed as exc:
            verdict = ParityVerdict(
                False, name, TOLERANCES[name], self.samples, self.window, lr, self._base.lr, reason=str(exc)
            )
            return verdict, False
        may_help = math.isclose(run.initial_loss, self._base.initial_loss, rel_tol=INITIAL_RTOL)
        return compare(self._base, run, name, self.samples, self.window), may_help

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
            "check_s": round(self.seconds, 1),
        }
        if self.budget_s is not None:
            record["check_budget_s"] = round(self.budget_s, 1)
        return record


def _short(verdict: ParityVerdict) -> str:
    if verdict.deviation is None or verdict.probe_deviation is None:
        return str(verdict.reason)
    return f"deviation {verdict.deviation:+.1%}, probe {verdict.probe_deviation:+.1%}"
