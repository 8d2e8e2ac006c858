"""When a search's clock says stop: no trial may start, or a trial running is given up.

A trial starts only while the time left covers the end of the search (the parity
check's runs, the finalists' first round); one that runs longer than the best
config's whole declared run is given up. Both are costed from measurements.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config import COMPILE_ALLOWANCE_S, Config
from autotune.parity.verdict import CHECK_SHARE, run_length
from autotune.study import standing
from autotune.study.clock import round_cost
from autotune.study.context import Setup
from autotune.study.ranking import baseline_rate, contenders, rate_leader, trial_run_s


def out_of_time(setup: Setup, check_spent_s: float = 0.0, gradients_s: float = 0.0, start_s: float = 0.0) -> bool:
    """No trial may start: the time left in the budget would not cover a trial and the end of the search.

    A trial is the median wall time of the complete trials, and the judging of its config by gradients should it be
    a contender of a new math family (`gradients_s`, the longest such judging so far: 22-29 s on ResNet-50). The end
    is the parity check's training runs, where a complete trial changed the batch size (the baseline's run at its
    trial's rate, each finalist's guessed at half that, never more than the check's own share of the budget, less
    what the check spent during the trials: `check_spent_s`), the start of the rounds' first process where no run
    of the check hides it (`start_s`, a trial process's start-up), and the finalists' first round with the baseline
    and the leader once more (``reserve_s``). The rest of the later rounds run on what is left
    (``autotune.study.rounds.measure_rounds``), and only complete trials cost a round: a failed or pruned trial's
    time is not what a round costs (docs/search.md#when-no-trial-may-start).
    """
    budget = setup.options.time_budget_s
    if budget is None:
        return False
    complete = setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    trial_s = _trial_s(complete)
    if trial_s is None:
        return setup.elapsed() >= budget
    end_s = _reserve_s(setup, complete, trial_s, check_spent_s, start_s)
    return setup.elapsed() + trial_s + gradients_s + end_s >= budget


def round_start_s(setup: Setup, startup_s: float, round_devices: Sequence[str]) -> float:
    """The process start the end of this search waits for before its first round: the longest start-up its trial
    pool's processes reported (`startup_s`). None under --gpus (`round_devices`), where the rounds' processes start
    beside the first trials (``autotune.study.pools``), nor for a searcher that writes no file: it runs no round."""
    return startup_s if setup.options.write_tuned_file and not round_devices else 0.0


# The most of a time budget one trial's measurement may take, its compile aside: a stream's trial reads on to its pass
# end where the rest of the pass fits in 40 s (autotune.trial.steady), which would leave a short budget no second
# trial (docs/search.md#measurements-under-the-clock).
TRIAL_SHARE = 0.25


def trial_limit_s(setup: Setup, config: Config) -> float | None:
    """Seconds a trial may measure `config` for by the budget: TRIAL_SHARE of it, and a compile's allowance
    (compiling is starting, not measuring; ``autotune.study.planning.compile_cost`` decides whether a compile can
    pay); None without a budget, where the trial's own limit holds."""
    budget = setup.options.time_budget_s
    return None if budget is None else TRIAL_SHARE * budget + COMPILE_ALLOWANCE_S[config.compile]


def round_limit_s(setup: Setup, config: Config, due: int) -> float | None:
    """Seconds a finalists' round may measure `config` for: the budget's time left, shared by the `due` measurements
    of the round still to come (this one's included), never under what measuring it again was costed at
    (``round_cost.measure_s``); None without a budget, where the trial's own limit holds.

    The first round measures the baseline and the leader whatever the clock says, and a stream's measurement reads
    on to its pass end where that fits in 40 s (``autotune.trial.steady``), which a round may do where its trial did
    not: a short search then ends past its budget (docs/search.md#measurements-under-the-clock).
    """
    budget = setup.options.time_budget_s
    if budget is None:
        return None
    complete = setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    own_s = round_cost.measure_s(setup, complete, config, default_s=0.0)
    return max(own_s, (budget - setup.elapsed()) / max(1, due), 0.0)


def check_budget(setup: Setup) -> float | None:
    """Seconds the parity check may take: CHECK_SHARE of the search's time budget (None: no budget, no bound)."""
    budget = setup.options.time_budget_s
    return None if budget is None else CHECK_SHARE * budget



def reserve_s(setup: Setup, check_spent_s: float = 0.0) -> float:
    """Seconds the end of the search needs (the parity check's runs, the finalists' rounds); 0 before a trial
    completed, when nothing costs them yet. See ``out_of_time``, which adds a judging by gradients and the rounds'
    process start: what a part or a compile may take is bounded by this, a little looser."""
    complete = setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    trial_s = _trial_s(complete)
    return 0.0 if trial_s is None else _reserve_s(setup, complete, trial_s, check_spent_s)


def trial_s(setup: Setup) -> float | None:
    """A trial's time so far: the median wall time of the complete trials' measurements; None before one completed."""
    return _trial_s(setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


def _trial_s(complete: list[FrozenTrial]) -> float | None:
    """A trial's time: the median wall time of the complete ones' measurements; None before one has completed."""
    measured = [t.user_attrs["duration_s"] for t in complete if "duration_s" in t.user_attrs]
    return statistics.median(measured) if measured else None


def spare_s(setup: Setup, check_left_s: float) -> float:
    """Seconds the parity check may take beyond what its share has left (`check_left_s`): what the budget holds past
    the final rounds' reserve, the trials' leftover time included; 0 without a budget (the share is no bound then).

    A check that cannot conclude in its share would leave the search's last seconds unused and the answer at the
    workload's own settings (docs/parity.md, "Within a time bound").
    """
    budget = setup.options.time_budget_s
    if budget is None:
        return 0.0
    complete = setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    trial_s = _trial_s(complete)
    rounds_s = 0.0 if trial_s is None else _rounds_s(setup, complete, trial_s)
    return max(0.0, budget - setup.elapsed() - rounds_s - check_left_s)


def _reserve_s(setup: Setup, complete: list[FrozenTrial], trial_s: float, check_spent_s: float,
               start_s: float = 0.0) -> float:
    # No more finalists than trials have completed besides the baseline's: costed at the full count, a heavy
    # model's first two trials would end its search early (docs/search.md#when-no-trial-may-start).
    finalists = _finalists(setup, complete)
    check_s = 0.0
    rate = baseline_rate(setup)
    # Training runs judge a new batch size only: a config at the baseline's batch that changes amp or compile is
    # judged by its gradients, in seconds (autotune.parity.numerics), and the rest keep the baseline's math; a run
    # reserved for nothing costs a heavy model a trial (docs/search.md#when-no-trial-may-start).
    new_batch = any(setup.config_of(t).batch_size != setup.baseline.batch_size
                    for t in complete if "config" in t.user_attrs)
    if setup.options.parity_check and rate and new_batch:
        samples, _ = run_length(setup.baseline.batch_size, max(setup.space.domains["batch_size"]), rate)
        check_s = min(samples / rate * (1 + 0.5 * finalists), check_budget(setup) or float("inf"))
        check_s = max(0.0, check_s - check_spent_s)  # what the check made during the trials is spent already
    return check_s + _rounds_s(setup, complete, trial_s) + _first_start_s(setup, complete, trial_s, start_s - check_s)


def _first_start_s(setup: Setup, complete: list[FrozenTrial], trial_s: float, unhidden_s: float) -> float:
    """What the rounds' first measurement, the baseline's in a process started as the trials end, costs beyond its
    round's reserve: the start-up no run of the check hides (`unhidden_s`), where the baseline's trial did not wait
    for one of its own. On an H100 the webdataset search's checks needed no run, and the baseline's round took 57 s
    where its trial's wall had been 41 s."""
    if unhidden_s <= 0.0:
        return 0.0
    baseline = setup.baseline
    first = round_cost.measure_s(setup, complete, baseline, trial_s) + unhidden_s
    return max(0.0, first - round_cost.config_s(setup, complete, baseline, trial_s))


def _finalists(setup: Setup, complete: list[FrozenTrial]) -> int:
    return min(setup.options.finalists, max(1, len(complete) - 1))


def _rounds_s(setup: Setup, complete: list[FrozenTrial], trial_s: float) -> float:
    """The final rounds' reserve: the first round, and the baseline and the leader once more."""
    finalists = _finalists(setup, complete)
    # A round measures each config as long as its own trial took, build included (autotune.study.clock.round_cost):
    # a compiled config's round costs far more than the median trial (docs/search.md#what-a-round-costs). The likely
    # finalists are the contenders so far, fastest first, and the rate leader; a slot no contender fills yet costs a
    # median trial. A contender the parity check rejected is never a finalist: reserved, its rounds took the time its
    # check could have spared (text_transformer at 110 s on an H100: batch 256 rejected, batch 64 rejected at its
    # first rate with the check's share spent, 33 s of the budget unused).
    rejected = standing.rejected_families(setup.study)
    standing_now = {setup.config_of(t) for t in standing.still_standing(complete, rejected) if "config" in t.user_attrs}
    found = {c: n for c, n in contenders(setup).items() if c in standing_now}
    likely = list(found)[:finalists]
    leader = rate_leader(setup, found)
    if leader is not None and leader not in likely:
        likely.append(leader)
    rounds_s = sum(round_cost.config_s(setup, complete, c, trial_s) for c in [setup.baseline, *likely])
    rounds_s += max(0, finalists - len(likely)) * trial_s
    # The stated speed-up's two sides, the baseline and the leader, are measured in a second round too, each at its
    # measurement's time in a process the rounds started already, a compile afresh included (``measure_s``): one
    # process a side is one draw of the host, and a winner resting on one round missed its hand-timed rate
    # (docs/search.md#the-finalists-rounds).
    again_s = 0.0
    if setup.options.rounds >= 2:
        stated = [setup.baseline, *likely[:1]]
        again_s = sum(round_cost.measure_s(setup, complete, c, trial_s) for c in stated) + (2 - len(stated)) * trial_s
    return min(setup.options.rounds, 1) * rounds_s + again_s


MIN_PART_S = 5.0  # a parts process's start and a few windows: shorter, a part could only time out
OUT_OF_TIME = "skipped, out of time"  # how the reason begins of a trial the search's clock ended before it ran


def part_timeout(setup: Setup, stage_left_s: float | None = None) -> tuple[float, bool]:
    """Seconds a part measurement may take, and whether the clock cut that short of the trial's own limit.

    The trial's limit (``--trial-timeout``), or less where the budget, less what the end of the search needs
    (``reserve_s``), ends first, or the stage that asks (`stage_left_s`: the plan's share of the budget, say) does;
    never under MIN_PART_S unless the trial's limit is: a part given the trial's whole limit late in a search runs
    it past its budget (docs/search.md#parts-under-the-clock).
    """
    limit = setup.options.trial_timeout_s
    left = [limit]
    if setup.options.time_budget_s is not None:
        left.append(setup.options.time_budget_s - setup.elapsed() - reserve_s(setup))
    if stage_left_s is not None:
        left.append(stage_left_s)
    timeout = min(limit, max(MIN_PART_S, min(left)))
    return timeout, timeout < limit


# A trial is given up once it has taken this many times the best declared run so far, plus this many seconds:
# however fast it would train after that, the best config finishes the whole run first. The margin keeps a
# trial on a busy host, or one in a process that has just started, from being stopped on what noise costs
# (docs/search.md#giving-up-a-trial).
GIVE_UP_FACTOR = 2.0
GIVE_UP_MARGIN_S = 30.0


def shortest_run(setup: Setup) -> tuple[FrozenTrial, float] | None:
    """The complete trial whose declared run is shortest, and that run's seconds; None before any completed."""
    complete = standing.standing_trials(setup.study)  # none the parity check rejected: it cannot be the answer
    if not complete:
        return None
    best = min(complete, key=lambda t: trial_run_s(setup, t))
    return best, trial_run_s(setup, best)


def give_up_after(setup: Setup, trial: optuna.Trial) -> tuple[float, str] | None:
    """(seconds after which measuring `trial` is pointless, why); None while no trial is complete, or the baseline.

    The window pruner judges a trial by its rate; one that is still starting (workers filling a large first batch,
    cuDNN's autotuning, a data set materialised slowly) sends no window to judge. Its elapsed time is judged here:
    a trial measures a part of the declared run, one-time costs included, so one that has taken longer than the
    best config's whole run cannot finish that run first.
    """
    if trial.user_attrs.get("role") == "baseline":  # every speed-up is stated against it
        return None
    shortest = shortest_run(setup)
    if shortest is None:
        return None
    best, run_s = shortest
    epochs = setup.workload.defaults["epochs"]
    why = f"the best so far (trial {best.number}) finishes the whole declared run ({epochs} epoch(s)) in {run_s:.1f} s"
    return GIVE_UP_FACTOR * run_s + GIVE_UP_MARGIN_S, why
