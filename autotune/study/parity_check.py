"""The parity check over a search's fastest configs: one baseline run, a verdict per config.

``ParityCheck.select`` walks the configs fastest first and returns the first
few that pass (``autotune.study.parity`` judges each). A config whose numerics
equal a checked one's reuses its verdict (loader knobs change speed, not
training), and a batch size rejected by a wide margin rules out its slower
variants unrun. Every parity run is made by a caller-given function (in a
search, in a trial process); the check keeps what each cost.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from autotune.config import Config
from autotune.study.parity import (
    TOLERANCES,
    ParityError,
    ParityRunFailed,
    ParityVerdict,
    clearly_too_far,
    compare,
    family,
    numerics,
    run_length,
)
from autotune.trial.parity_run import ParityRun


class ParityCheck:
    """Checks configs in the order given against one baseline run, keeping every verdict.

    `make_run(config, lr, samples)` makes one parity run (in a trial process, in the
    search) and raises ParityRunFailed with the reason when it cannot. One run length
    serves every candidate, set by the largest batch among `candidates` (or
    `max_batch`), so the baseline trains once.
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
    ) -> None:
        self.baseline, self.lr_of, self.make_run, self.echo = baseline, lr_of, make_run, echo
        # `max_batch`: the largest batch any candidate may have, when the runs begin before all are known.
        largest = max_batch if max_batch is not None else max([c.batch_size for c in candidates], default=1)
        self.samples, self.window = run_length(baseline.batch_size, largest, baseline_rate)
        self.verdicts: dict[Config, ParityVerdict] = {}
        self.runs = (
            0  # candidates run; a config with the numerics (or the hopeless batch) of one run reuses its verdict
        )
        self.seconds = 0.0  # wall time of every parity run, the baseline's included: the check's cost
        self.baseline_seconds = 0.0
        self._base: ParityRun | None = None
        self._base_from = ""  # where an adopted baseline run was made, for the summary
        self._by_numerics: dict[tuple[Any, ...], tuple[Config, ParityVerdict]] = {}
        # Batch sizes (at their learning rate) rejected by a margin: every config with that batch fails too.
        self._batch_rejected: dict[int, tuple[Config, ParityVerdict]] = {}

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
        self.baseline_seconds = run.seconds
        self.seconds += run.seconds  # the check's cost, wherever it was paid

    def _timed(self, config: Config) -> ParityRun:
        start = time.perf_counter()
        try:
            return self.make_run(config, self.lr_of(config), self.samples)
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
            elif config.batch_size in self._batch_rejected:
                twin, verdict = self._batch_rejected[config.batch_size]
                self.echo(
                    f"  parity {verdict.word:<6}  (batch {config.batch_size} at lr {verdict.lr:g} is too far "
                    f"whatever the "
                    f"numerics: see {twin.describe()})  {config.describe()}"
                )
            elif self.runs == limit:
                break
            else:
                verdict = self._check(config)
                self._by_numerics[key] = (config, verdict)
                if clearly_too_far(verdict):
                    self._batch_rejected[config.batch_size] = (config, verdict)
                self.echo(f"  parity {verdict.summary()}  [{verdict.run_s:.1f} s]  {config.describe()}")
            self.verdicts[config] = verdict
            if verdict.passed:
                passed.append(config)
        return passed

    def _same_as_baseline(self, config: Config) -> ParityVerdict:
        """Loader knobs alone (workers, pinning, prefetch, persistence) change speed, not what is trained:
        the same samples in the same order through the same math. No run can tell them apart."""
        lr = self.lr_of(config)
        reason = "the baseline's own numerics: only loader knobs differ, which change speed, not what is trained"
        return ParityVerdict(True, "loader", TOLERANCES["loader"], self.samples, self.window, lr, lr, reason=reason)

    def summary(self) -> str:
        """The check's cost, in one line."""
        rejected = sum(not v.passed for v in self.verdicts.values())
        where = f", {self._base_from}" if self._base_from else ""
        return (
            f"parity: {len(self.verdicts)} config(s) checked, {rejected} rejected; {self.runs} run(s) and the "
            f"baseline's took {self.seconds:.1f} s (baseline {self.baseline_seconds:.1f} s{where})"
        )

    def _check(self, config: Config) -> ParityVerdict:
        if self._base is None:
            before = self.seconds
            try:
                self._base = self._timed(self.baseline)
            except ParityRunFailed as exc:
                raise ParityError(f"the baseline's parity run failed: {exc}") from exc
            self.baseline_seconds = self.seconds - before
        self.runs += 1
        name = family(self.baseline, config)
        try:
            run = self._timed(config)
        except ParityRunFailed as exc:
            return ParityVerdict(
                False,
                name,
                TOLERANCES[name],
                self.samples,
                self.window,
                self.lr_of(config),
                self._base.lr,
                reason=str(exc),
            )
        return compare(self._base, run, name, self.samples, self.window)

    def record(self, config: Config) -> dict[str, Any]:
        """What the tuned file keeps: the winner's numbers and what the whole check cost."""
        return {
            "checked": True,
            **self.verdicts[config].as_record(),
            "configs_checked": len(self.verdicts),
            "configs_rejected": sum(not v.passed for v in self.verdicts.values()),
            "check_s": round(self.seconds, 1),
        }
