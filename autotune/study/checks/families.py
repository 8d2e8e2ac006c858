"""Parity inside the search: a math family is judged as soon as one of its configs is a contender.

A math family is what a config trains with apart from the knobs that keep the
baseline's arithmetic (``autotune.parity.verdict.SAME_MATH_KNOBS``): its batch size
with its learning rate, amp, decode, bucketing, padding, and any later knob that
changes the arithmetic (compile). Checked only after the trials, the verdicts come
too late to steer anything: the check's share can go to one rejected family while
faster ones wait (docs/search.md#the-parity-check-inside-the-search). Here:

- after each trial, every new contender's family is judged (its twins reuse the
  verdict without a run);
- a rejected family is not measured again: its configs are skipped at no cost, and
  so is every other batch size while the check is inconclusive (no run can judge
  one), which leaves the rest of the search to configs with the baseline's math;
- a batch size rejected at every learning rate sends the search to the batch sizes
  between it and the baseline's, nearest the baseline first, with the rejected
  config's other knobs;
- a seed skipped so is measured with the baseline's math instead, its other knobs
  kept (the loader's, placement, channels_last, the graph).

The check made here is the one the finalists use (``autotune.study.finalists.choose``).
"""

from __future__ import annotations

from typing import Any

from autotune.config import Config
from autotune.parity.check import ParityCheck
from autotune.parity.verdict import SAME_MATH_KNOBS, ParityError, same_math_knobs
from autotune.procs.pool import TrialPool
from autotune.study import standing
from autotune.study.checks import kept_check
from autotune.study.checks.parity import PARITY_EXTRA_RUNS, new_parity_check
from autotune.study.context import Setup
from autotune.study.pools import SOLO, Team
from autotune.study.ranking import contenders
from autotune.study.shared import sharing, tickets

SKIPPED = "skipped by parity"  # how a trial's reason begins when its family can no longer win


def math_family(config: Config, same: tuple[str, ...] = SAME_MATH_KNOBS) -> tuple[tuple[str, Any], ...]:
    """The knobs in which a config may train otherwise than another: every knob outside `same` (a stream's worker
    count is one of them: ``autotune.parity.verdict.same_math_knobs``)."""
    return tuple((k, v) for k, v in config.as_dict().items() if k not in same)


def between(baseline: int, rejected: int, domain: list[int]) -> list[int]:
    """The batch sizes of `domain` strictly between the baseline's and a rejected one, nearest the baseline first.

    >>> between(16, 256, [4, 8, 16, 32, 64, 128, 256, 512])
    [32, 64, 128]
    >>> between(64, 8, [4, 8, 16, 32, 64])
    [32, 16]
    """
    inside = [b for b in domain if min(baseline, rejected) < b < max(baseline, rejected)]
    return sorted(inside, key=lambda b: abs(b - baseline))


class FamilyGate:
    """The parity verdicts the search has so far, by math family; what they rule out, and what they send it to."""

    def __init__(self, team: Team = SOLO) -> None:
        self.team = team  # under --gpus: a searcher may be making the baseline's parity run for this check
        self.check: ParityCheck | None = None
        self.rejected: dict[tuple[tuple[str, Any], ...], Config] = {}  # family -> the config its verdict was made on
        self.bisected: set[int] = set()  # rejected batch sizes whose in-between batch sizes were queued
        self.failed: str | None = None  # the check could not run (its baseline run failed): nothing is ruled out
        self._took_up = False  # whether a kept check was looked for (``take_up``)

    def judge(self, setup: Setup, pool: TrialPool) -> None:
        """Judge the family of every contender not judged yet; queue the batch sizes a rejection sends the search to."""
        if not setup.options.parity_check or self.failed is not None:
            return
        found = contenders(setup)
        new = [c for c in found if self.check is None or c not in self.check.verdicts]
        if not new:
            return
        if self.check is None:
            if self.team.baseline_run_pending():
                # A --gpus searcher is making the baseline's run for this very check: judge once it is stored and
                # adopted, not with a second baseline run of our own (minutes on a heavy model).
                return
            check = self._make(setup, pool, found)
            new = [c for c in new if c not in check.verdicts]
        cap = setup.options.finalists + PARITY_EXTRA_RUNS  # candidate runs in all, as the check after the trials
        try:
            self.check.select(new, want=len(new), max_runs=max(0, cap - self.check.runs))
        except ParityError as exc:
            self.failed = str(exc)  # the check after the trials says it, and keeps the baseline
            return
        for config in new:
            self._rejected(setup, config, queue=True)

    def take_up(self, setup: Setup, pool: TrialPool) -> None:
        """Before a rerun's first trial, go on from the check an earlier run of this search kept, if it still stands
        (``autotune.study.checks.kept_check``): a family it rejected is skipped from the first trial on, as it was."""
        if self._took_up:
            return
        self._took_up = True
        if setup.options.write_tuned_file and not kept_check.stands(setup):
            # The families an earlier run's check rejected stand only with that check (its key changed, or it was
            # dropped when the tuned file was written): from here they are judged afresh.
            with sharing.study_lock(setup.storage, setup.study_name):
                standing.clear(setup.study)
        if self.check is None and setup.options.parity_check and kept_check.stands(setup):
            self._make(setup, pool, [])

    def _make(self, setup: Setup, pool: TrialPool, found: list[Config]) -> ParityCheck:
        self.check = check = new_parity_check(setup, pool, found, self.team)
        # A check an earlier run of this search kept: what its verdicts ruled out stands, and the batch sizes they
        # sent that run to were queued by it.
        for config in check.verdicts:
            self._rejected(setup, config, queue=False)
        return check

    def _rejected(self, setup: Setup, config: Config, queue: bool) -> None:
        """Rule out `config`'s family if its verdict rejected it by a comparison, in this gate and in the study (its
        trials then stand for no best: ``standing``); for a batch size, queue the batch sizes between it and the
        baseline's where `queue` (False: they were queued already)."""
        assert self.check is not None
        verdict = self.check.verdicts.get(config)
        # A verdict made by a comparison (of runs or of gradients), not by a crash, which says nothing of it.
        judged = verdict is not None and (verdict.deviation is not None or verdict.numerics_passed is False)
        if verdict is None or verdict.passed or not verdict.conclusive or not judged:
            return
        family = math_family(config, self.check.same_math)
        if family == math_family(setup.baseline, self.check.same_math):
            # The baseline's own math with a knob that keeps it but changes the kernels (channels_last, a graph)
            # and trained otherwise: that config's numerics are rejected (its verdict, and its twins' by numerics,
            # keep it from winning), not the baseline's math, whose loader variants are most of a search.
            return
        self.rejected.setdefault(family, config)
        with sharing.study_lock(setup.storage, setup.study_name):
            standing.record(setup.study, family)
        if verdict.family == "batch_size" and config.batch_size not in self.bisected:
            self.bisected.add(config.batch_size)
            if queue:
                self._queue_between(setup, config)

    def spent_s(self) -> float:
        """Seconds the check has taken so far, its baseline run included: the trials' reserve for it is that less."""
        return self.check.budget.seconds if self.check is not None else 0.0

    def gradients_s(self) -> float:
        """The longest a contender's judging by its gradients took so far (0 before one was): the next trial may be a
        contender of a new family, judged before the next trial starts, and on ResNet-50 that takes 20-30 s. 0 once the
        check has no time left: it starts no judging then."""
        if self.check is None or self.check.budget.left_s() == 0.0:
            return 0.0
        return self.check.budget.gradients_s

    def summary(self) -> str:
        """How many math families the search judged, and how many it ruled out."""
        check = self.check
        judged = {math_family(c, check.same_math) for c in check.verdicts} if check is not None else set()
        return f"parity: {len(judged)} math family(ies) judged during the trials, {len(self.rejected)} rejected"

    def why_skip(self, setup: Setup, config: Config) -> str | None:
        """Why `config` cannot win on the verdicts so far; None to measure it."""
        if self.check is None or self.failed is not None or config == setup.baseline:
            return None
        twin = self.rejected.get(math_family(config, self.check.same_math))
        if twin is not None:
            return f"{SKIPPED}: its math family was rejected: see {twin.describe()}"
        if self.check.conclusive is False and config.batch_size != setup.baseline.batch_size:
            return (f"{SKIPPED}: the check is inconclusive, so no run can judge batch {config.batch_size} against the "
                    f"baseline's {setup.baseline.batch_size}")
        hopeless = self.check.why_hopeless(config)
        return None if hopeless is None else f"{SKIPPED}: {hopeless}"

    def queue_same_math(self, setup: Setup, config: Config) -> Config | None:
        """Queue, next, a skipped seed's twin with the baseline's math and the seed's other knobs; the twin queued, or
        None where it is the baseline, outside the space, or a config the study holds already.

        A seed is an informed guess at the loop's knobs, and most of its speed is in them
        (docs/search.md#the-parity-check-inside-the-search).
        """
        same = same_math_knobs(setup.facts.workers_set_order)
        math = {k: getattr(setup.baseline, k) for k, _ in math_family(config, same)}
        twin = setup.space.normalise(setup.space.clip(Config(**{**config.as_dict(), **math})))
        params = setup.space.params(twin)
        seen = {setup.config_of(t) for t in setup.study.get_trials(deepcopy=False) if "config" in t.user_attrs}
        if params is None or twin == setup.baseline or twin in seen:
            return None
        with sharing.study_lock(setup.storage, setup.study_name):
            tickets.insert_next(setup.study, [{"params": params,
                                               "user_attrs": {"role": "seed", "same_math_of": config.describe()}}])
        return twin

    def _queue_between(self, setup: Setup, rejected: Config) -> None:
        """Queue, next, the rejected config at each batch size between the baseline's and its own."""
        seeds = []
        for batch in between(setup.baseline.batch_size, rejected.batch_size, setup.space.domains["batch_size"]):
            config = setup.space.clip(Config(**{**rejected.as_dict(), "batch_size": batch}))
            params = setup.space.params(config)
            same = same_math_knobs(setup.facts.workers_set_order)
            if params is not None and math_family(config, same) not in self.rejected:
                seeds.append({"params": params, "user_attrs": {"role": "seed", "between_of": rejected.describe()}})
        if not seeds:
            return
        with sharing.study_lock(setup.storage, setup.study_name):
            tickets.insert_next(setup.study, seeds)
        setup.echo(f"  parity: batch {rejected.batch_size} fails at every rate; trying batch "
                   f"{', '.join(str(s['params']['batch_size']) for s in seeds)} next")
