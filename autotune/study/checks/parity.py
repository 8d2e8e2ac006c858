"""The parity check as the search makes it: once per search, sized for the space's largest batch, held to its share.

``autotune.parity.check`` judges; this module wires it to the search: its training runs, image and gradient checks
run in the search's trial processes, its verdicts are kept in the study as they are reached
(``autotune.study.checks.kept_check``), and a baseline run a ``--gpus`` searcher made early is adopted
(``autotune.study.checks.baseline_run``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from autotune.config import Config
from autotune.parity import inputs as parity_inputs
from autotune.parity import numerics as parity_numerics
from autotune.parity.check import ParityCheck
from autotune.parity.inputs import InputsVerdict
from autotune.parity.numerics import NumericsVerdict
from autotune.parity.run import PROBE_SAMPLES, ParityRun
from autotune.parity.verdict import CHECK_SHARE, ParityError, ParityRunFailed, ParityRunOutOfTime, same_math_knobs
from autotune.procs.pool import TrialPool
from autotune.study.checks import baseline_run, kept_check
from autotune.study.clock.deadline import check_budget, spare_s
from autotune.study.context import Setup
from autotune.study.pools import SearchPools, Team
from autotune.study.ranking import baseline_rate, contenders

PARITY_EXTRA_RUNS = 6  # parity runs beyond one per finalist, for the rejected configs among the fastest
MIN_CHECK_RUN_S = 1.0  # a run given less than this by the check's share could only be stopped
CHECK_RUN_FACTOR = 3.0  # a run may take the search's spare time up to this many times the baseline's last run


@dataclasses.dataclass
class _InTrialProcesses:
    """The check's measurements, each made in the search's trial processes and held to the check's share."""

    setup: Setup
    pool: TrialPool
    check: ParityCheck | None = None  # set once made: its budget bounds the training runs

    @property
    def trial_limit(self) -> float:
        return baseline_run.PARITY_TIMEOUT_FACTOR * self.setup.options.trial_timeout_s

    def timeout(self) -> tuple[float, bool]:
        """What the next training run may take, and whether the check's share, not the trial's limit, set it.

        Every run is held to what is left of the share (never under MIN_CHECK_RUN_S), and of what the search can
        spare beyond it up to CHECK_RUN_FACTOR baseline runs, but the baseline's first: sized for a quarter of the
        share, a first run that the whole share cannot hold is on a host too busy for a check, and the spare time
        would go to it for nothing. The images
        and the gradients take a few batches: they keep the trial's limit, since one stopped would stand as a failure
        for every config it judges, and neither starts once the share is spent.
        """
        assert self.check is not None
        budget = self.check.budget
        left = budget.left_s(spare=self.check.base.run is not None)
        own = budget.left_s(spare=False)
        if left is not None and own is not None and budget.last_base_s > 0:
            # Spare time only up to a few baseline runs' worth: a far slower run is a slow loader's, and the spare time
            # is the trials' (docs/parity.md, "Within a time bound").
            left = min(left, max(own, CHECK_RUN_FACTOR * budget.last_base_s))
        if left is None or left >= self.trial_limit:
            return self.trial_limit, False
        return max(left, MIN_CHECK_RUN_S), True

    def run(self, config: Config, lr: float, samples: int) -> ParityRun:
        """One training run of `samples` samples from the baseline's weights and data order."""
        limit, by_share = self.timeout()
        assert self.check is not None
        size = self.check.probe_samples  # one probe for every run of the check, smaller than the default where its
        # runs are (a fake pool of a test takes the default's signature)
        extra = {} if size == PROBE_SAMPLES else {"probe_samples": size}
        outcome = self.pool.parity_run(config, lr, samples, self.setup.baseline.batch_size, limit, **extra)
        if outcome.state != "complete" or outcome.result is None:
            reason = outcome.reason or "no result"
            if by_share and reason.startswith("timeout"):
                assert self.check is not None
                raise ParityRunOutOfTime(f"{reason}, what was left of the check's share "
                                         f"({self.check.budget.budget_s:.0f} s, {CHECK_SHARE:.0%} of the search's "
                                         f"budget)")
            raise ParityRunFailed(reason)
        run = ParityRun.from_dict(outcome.result)
        if run.samples < samples and config != self.setup.baseline:
            # It stopped training in time to answer (autotune.procs.trial_process), short of the baseline's length:
            # judged by nothing, as a run stopped at its limit (the baseline's own short run sets every run's length).
            reason = f"timeout: it reached {run.samples:,} of its {samples:,} samples within {limit:.0f} s"
            if by_share:
                raise ParityRunOutOfTime(f"{reason}, what was left of the check's time")
            raise ParityRunFailed(reason)
        return run

    def inputs(self, config: Config) -> InputsVerdict:
        """The device path's images against the host pipeline's."""
        outcome = self.pool.inputs_check(config, self.trial_limit)
        if outcome.state != "complete" or outcome.result is None:
            return parity_inputs.failed(outcome.reason or "no result")
        return parity_inputs.judge(outcome.result)

    def numerics(self, config: Config) -> NumericsVerdict:
        """The config's gradients against the baseline's."""
        baseline = self.setup.baseline
        outcome = self.pool.numerics_check(baseline, config, self.setup.lr(baseline), self.trial_limit)
        if outcome.state != "complete" or outcome.result is None:
            return parity_numerics.failed(outcome.reason or "no result", parity_numerics.label(config))
        return parity_numerics.judge(outcome.result, parity_numerics.label(config))


def new_parity_check(
    setup: Setup, pool: TrialPool, candidates: list[Config], team: Team, max_batch: int | None = None
) -> ParityCheck:
    """The check, made once per search; it goes on from the one an earlier run of this search kept in the study
    (``autotune.study.checks.kept_check``), or adopts the baseline run a `--gpus` searcher made, if there is one.

    `max_batch`: size the runs for it; by default the space's largest batch, whichever step makes the check and
    whatever the contenders so far: a check made afresh after a stop, sized for the contenders left, would train
    shorter runs than the first run's check and judge otherwise.
    """
    max_batch = max_batch or max(setup.space.domains["batch_size"])
    measures = _InTrialProcesses(setup, pool)
    stored = baseline_run.wait_for(setup, team.baseline_run_pending)
    # A baseline run made during the trials was sized for the space's largest batch; the check keeps that length.
    check = ParityCheck(
        setup.baseline,
        setup.lr,
        measures.run,
        candidates,
        setup.echo,
        max_batch=stored.get("max_batch") if stored is not None else max_batch,
        baseline_rate=baseline_rate(setup),
        budget_s=check_budget(setup),
        lr_rule=setup.lr_rule,
        lr_at=setup.lr,
        check_inputs=measures.inputs,
        check_numerics=measures.numerics,
        same_math=same_math_knobs(setup.facts.workers_set_order),
        # What the search can spare beyond the share: the check concludes in time it would leave unused.
        spare_s=lambda: spare_s(setup, max(0.0, (check.budget.budget_s or 0.0) - check.budget.seconds)),
    )
    measures.check = check
    if not kept_check.take_up(setup, check):
        _announce(setup, check, stored)
    kept_check.keep_as_it_goes(setup, check)
    return check


def _announce(setup: Setup, check: ParityCheck, stored: dict[str, Any] | None) -> None:
    """Say what the check compares, and adopt the baseline run a `--gpus` searcher made for it, if it is as long."""
    setup.echo(
        f"parity: checking the fastest against the baseline ({setup.baseline.describe()}, lr "
        f"{setup.lr(setup.baseline):g}, fp32, eager) from the same weights and data order, {check.samples:,} samples "
        f"each"
    )
    if stored is not None and stored.get("samples") == check.samples:
        check.adopt_baseline(
            ParityRun.from_dict(stored["parity_run"]), f"run by searcher {stored['searcher']} before its trials"
        )


def check_early(setup: Setup, pools: SearchPools, team: Team) -> ParityCheck | None:
    """Check the contenders so far while another searcher's last trial runs: time this searcher would spend idle.

    The check after the trials reuses each verdict and runs only what the last trials
    add; a failure here is said by that check, with its reason.
    """
    found = contenders(setup)
    if not found:
        return None
    want = setup.options.finalists
    check = new_parity_check(setup, pools.trials, list(found), team)
    with contextlib.suppress(ParityError):
        check.select(list(found), want=want, max_runs=want + PARITY_EXTRA_RUNS)
    return check

