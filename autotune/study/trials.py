"""A search's second step: take the study's tickets one by one and measure each config in a trial process.

The loop follows ``optuna/study/_optimize.py``: ``run_trials`` -> ``_optimize``
-> ``_run_trial``, small functions with the state in the study. Each trial's
config is suggested by the space, measured by a trial pool, and told to the
study with its result or its failure reason. Every searcher's failures teach every
searcher: a knob value that fails every time it is tried is not tried again
(``autotune.study.failed.hopeless``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from collections.abc import Callable

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config import COMPILE_ALLOWANCE_S, Config
from autotune.procs import lifecycle
from autotune.procs.pool import TrialPool
from autotune.procs.trial_process import GAVE_UP, Outcome
from autotune.study.checks.families import SKIPPED, FamilyGate
from autotune.study.clock import patience
from autotune.study.clock.deadline import OUT_OF_TIME, give_up_after, out_of_time
from autotune.study.context import SearchError, Setup
from autotune.study.failed import seed_retry
from autotune.study.failed.hopeless import Finished, Hopeless, blocks, hopeless_values
from autotune.study.planning import balance, compile_cost, plan, skip
from autotune.study.planning.compile_cost import CANNOT_PAY
from autotune.study.planning.predict import PREDICTED, LoaderModel
from autotune.study.planning.valuation import VALUATION_ATTRIBUTE, VALUED, Valuation
from autotune.study.pools import SOLO, Team
from autotune.study.shared import sharing, tickets
from autotune.text import elapsed, rate

KEPT_RESULT = (
    "samples_per_s",
    "steady_samples_per_s",
    "spread",
    "step_s",
    "epoch_s",
    "epoch_overhead_s",
    "setup_s",
    "materialize_s",
    "capture_s",
    "compile_s",
    "gpu_util",
    "peak_memory_bytes",
    "backlog_steps",
    "whole_epochs",
    "reliable",
    "tokens_per_sample",
    "padding",
    "uncredited_share",
    "main_cpu_ms",
    "workers_cpu_ms",
    "time_limited",
)


@dataclasses.dataclass
class Learned:
    """The knob values found hopeless so far in this process, and the sampler to narrow when one is."""

    hopeless: list[Hopeless] = dataclasses.field(default_factory=list)
    sampler: optuna.samplers.BaseSampler | None = None  # the study's own, before any value was fixed
    loader: LoaderModel | None = None  # each streaming config's loader ceiling (autotune.study.planning.predict)
    families: FamilyGate = dataclasses.field(default_factory=FamilyGate)  # parity verdicts so far, by math family
    valuation: Valuation = dataclasses.field(default_factory=Valuation)  # the loop valued from its parts
    stopped: str | None = None  # why the trials ended early (autotune.study.clock.patience, or the budget), once said
    budget_ended: bool = False  # the time budget, not the tickets or patience, ended them


def loader_model(setup: Setup) -> LoaderModel:
    """The loader ceilings of this search: the data set's measured cost per sample, over the cores it may use."""
    ratio = getattr(setup.study.pruner, "ratio", 0.5)  # what the pruner calls clearly worse, skipped alike
    return LoaderModel(setup.facts.load_cpu_s, setup.machine.cpu_share, ratio)


def run_trials(setup: Setup, pool: TrialPool, learned: Learned | None = None, team: Team = SOLO) -> Learned:
    """Take tickets until none is left or the time budget is spent; returns what was learned on the way.

    `team`: under --gpus, the writer's, so the parity verdicts made during the trials adopt the baseline's run a
    searcher makes for them.
    """
    learned = learned or Learned(sampler=setup.study.sampler, families=FamilyGate(team))
    if learned.loader is None:
        learned.loader = loader_model(setup)
    learned.families.take_up(setup, pool)  # a rerun's first trial is skipped as the stopped run would have
    while not out_of_time(setup, learned.families.spent_s()):
        check_baseline(setup)
        learn_failures(setup, learned)
        seed_retry.queue_retries(setup.study, setup.storage, learned.hopeless, setup.baseline)
        if learned.valuation is not None and setup.options.write_tuned_file and baseline_done(setup):
            plan.make(setup, pool, learned.valuation)  # once: the grid valued, its fastest queued next
        stop = patience.why_stop(setup.study.get_trials(deepcopy=False), plan.PLAN_ATTRIBUTE in setup.study.user_attrs)
        if stop is not None:
            if learned.stopped is None:  # said once: the wait for other searchers' trials asks again
                setup.echo(stop)
            learned.stopped = stop
            break
        ticket = tickets.take(setup.study, setup.storage, setup.options.trials,
                              adjust=lambda params: seed_retry.without(params, learned.hopeless, setup.baseline))
        if ticket is None:
            break
        _run_trial(setup, ticket, pool, learned.hopeless, learned.loader, learned.families, learned.valuation)
        learned.families.judge(setup, pool)  # a new contender's family is judged now, while it can steer the search
    else:
        # The loop's condition ended it: the clock, with tickets left. A later call (the writer's, waiting for another
        # searcher's last trial) after every ticket was taken is not; a config the plan valued is no ticket taken.
        left = taken(setup) < tickets.target(setup.study, setup.options.trials)
        if learned.stopped is None and left:
            learned.stopped, learned.budget_ended = budget_ended(setup), True
            setup.echo(learned.stopped)
    check_baseline(setup)
    return learned


def taken(setup: Setup) -> int:
    """The trials taken so far, by any searcher, running or finished: what ``--trials`` counts."""
    return len(tickets.started(setup.study.get_trials(deepcopy=False)))


def budget_ended(setup: Setup) -> str:
    """What the clock did to the trials: how many ran before the end's reserve (the check, the rounds) was due."""
    return (f"trials: the time budget ({setup.options.time_budget_s:.0f} s) ended them after {taken(setup)} trial(s), "
            f"{setup.elapsed():.0f} s in; the rest of it is the parity check's and the final rounds'")


def baseline_done(setup: Setup) -> bool:
    """The baseline's trial is complete: the plan's parts then have a rate to be compared with."""
    return any(t.user_attrs.get("role") == "baseline"
               for t in setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


def wait_for_other_workers(setup: Setup, pool: TrialPool, learned: Learned, while_waiting: Callable[[], None]) -> None:
    """Wait until no trial runs anywhere, taking tickets that appear late (a dead searcher's, queued again).

    `while_waiting` runs once, when this searcher first finds itself waiting: time it would spend idle.
    """
    told = False
    while True:
        run_trials(setup, pool, learned)
        sharing.fail_stale(setup.study)
        others = sharing.running(setup.study)
        if not others:
            return
        if not told:
            who = sorted({str(t.user_attrs.get("searcher", "?")) for t in others})
            setup.echo(f"waiting for {len(others)} trial(s) still running on other searchers ({', '.join(who)})")
            told = True
            while_waiting()
            continue
        time.sleep(0.25)


def _run_trial(
    setup: Setup, ticket: sharing.Ticket, pool: TrialPool, hopeless: list[Hopeless], loader: LoaderModel | None = None,
    families: FamilyGate | None = None,
    valuation: Valuation | None = None,
) -> None:
    """Measure the config a ticket holds (or the sampler fills in) and tell the study how it went."""
    study, storage, trial = setup.study, setup.storage, ticket.trial
    interval, _ = sharing.heartbeat_settings()
    with sharing.Heartbeat(lambda: storage.record_heartbeat(ticket.trial_id), interval):
        try:
            # Stays the reason if this searcher dies mid-trial; the heartbeat then fails it.
            trial.set_user_attr(
                "reason",
                f"{sharing.INTERRUPTED}: its searcher {sharing.owner()} stopped during the trial; "
                f"the config was queued again",
            )
            trial.set_user_attr("searcher", sharing.owner())
            config = setup.space.suggest(trial)
            lr = setup.lr(config)
            trial.set_user_attr("config", config.as_dict())
            trial.set_user_attr("lr", lr)
            same = earlier_trial_of(setup, trial.number, config)
            blocked = blocks(config.as_dict(), hopeless)
            if same is not None:  # the sampler proposed a config already measured: reuse its outcome
                outcome = _outcome_of(same)
                trial.set_user_attr("duplicate_of", same.number)
                if "predicted_samples_per_s" in same.user_attrs:  # a config valued before it was measured
                    trial.set_user_attr("predicted_samples_per_s", same.user_attrs["predicted_samples_per_s"])
            elif blocked is not None:  # known not to work: record it, spend no time on it
                outcome = Outcome("failed", reason=f"skipped: {blocked.short()}")
            elif trial.user_attrs.get("role") != "baseline" and families is not None and (
                    rejected := families.why_skip(setup, config)) is not None:  # its family cannot win: not run
                outcome = Outcome("pruned", reason=rejected)
                if trial.user_attrs.get("role") == "seed":
                    families.queue_same_math(setup, config)  # the guess's other knobs, measured next
            elif trial.user_attrs.get("role") != "baseline" and (
                    why := compile_cost.why_skip(setup, config, valuation)) is not None:  # its compile alone loses
                outcome = Outcome("pruned", reason=why)
            elif (why := skip.predicted(setup, trial, config, loader)) is not None:  # cannot win: not run
                outcome = Outcome("pruned", reason=why)
            elif valuation is not None and balance.SOLVED not in trial.user_attrs and (
                    spared := skip.valued(setup, trial, config, lr, pool, valuation)):
                outcome = spared  # its predicted rate is clearly worse, or its step alone ran out of memory: not run
            else:

                def on_window(i: int, samples_per_s: float) -> bool:
                    trial.report(samples_per_s, i)
                    return trial.should_prune()

                began = time.monotonic()
                give_up = give_up_after(setup, trial)
                # A step still compiling sends no window: it is given up only past the compile's allowance too.
                give_up_s = give_up[0] + COMPILE_ALLOWANCE_S[config.compile] if give_up else None
                outcome = pool.run(config, lr, setup.windows, on_window, give_up_s=give_up_s)
                if give_up and outcome.state == "pruned" and (outcome.reason or "").startswith(GAVE_UP):
                    outcome = dataclasses.replace(outcome, reason=f"{outcome.reason}: {give_up[1]}")
                # Wall time, as a finalist's round pays it: the build, warm-up and backlog, the windows and the
                # teardown, and a new process's start where the trial needed one (every round does). The
                # measurement alone made an H200 search's end 2 minutes late.
                trial.set_user_attr("duration_s", round(time.monotonic() - began, 2))
        except KeyboardInterrupt:
            with lifecycle.signals_ignored():  # a second Ctrl-C must not cut the hand-back short
                pool.kill()
                sharing.requeue(
                    study,
                    storage,
                    trial,
                    f"{sharing.INTERRUPTED}: the search was stopped (SIGINT, SIGTERM "
                    f"or SIGHUP); the config was queued again",
                )
            raise
        except Exception as exc:
            with contextlib.suppress(Exception):
                trial.set_user_attr("reason", f"error in the search process: {type(exc).__name__}: {exc}")
                study.tell(trial, state=TrialState.FAIL)
            raise
    if outcome.result:
        trial.set_user_attr("result", {k: outcome.result.get(k) for k in KEPT_RESULT})
    trial.set_user_attr("reason", outcome.reason)  # None: nothing went wrong
    _progress(setup, trial.number, config, outcome, same, trial.user_attrs.get("predicted_samples_per_s"))
    if outcome.state == "complete" and loader is not None and same is None:
        assert outcome.result is not None
        wrong = loader.check(config, float(outcome.result["samples_per_s"]))
        if wrong:
            setup.echo(wrong)
    if outcome.state == "complete":
        assert outcome.result is not None
        if valuation is not None and same is None:
            error = valuation.learn(config, float(outcome.result["samples_per_s"]))
            if error is not None:
                trial.set_user_attr("prediction_error", round(error, 4))
            study.set_user_attr(VALUATION_ATTRIBUTE, valuation.record())
            said = balance.queue_next(setup, config, float(outcome.result["samples_per_s"]), valuation)
            if said is not None:  # a hybrid measured: the share its host and card balance at, queued next
                setup.echo(said)
        study.tell(trial, float(outcome.result["samples_per_s"]))
    else:
        study.tell(trial, state=TrialState.PRUNED if outcome.state == "pruned" else TrialState.FAIL)


def earlier_trial_of(setup: Setup, number: int, config: Config) -> FrozenTrial | None:
    """An earlier trial of the same config: its outcome stands for this one, so no config is measured twice.

    One still running (on another searcher) is waited for; if its searcher dies, this one measures. A config the
    plan only valued is no such trial: it was never run, and its prediction is judged again now, by what the
    search has learned since (``autotune.study.planning.skip.valued``). Reused, it kept such configs from ever running
    while the prediction was still untrusted (a CPU search, 88% median error: 3 configs measured of 25).
    """
    target = setup.space.normalise(config)
    interval, grace = sharing.heartbeat_settings()
    deadline = time.monotonic() + setup.options.trial_timeout_s + 2 * grace
    while True:
        same = [
            t
            for t in sharing.counted(setup.study.get_trials(deepcopy=False))
            if t.number < number and "config" in t.user_attrs and t.user_attrs.get("role") != tickets.VALUED_ROLE
            and setup.config_of(t) == target
        ]
        done = [t for t in same if t.state.is_finished()]
        if done:
            return done[0]
        if not any(t.state == TrialState.RUNNING for t in same) or time.monotonic() > deadline:
            return None
        time.sleep(min(1.0, interval))
        sharing.fail_stale(setup.study)


def _outcome_of(trial: FrozenTrial) -> Outcome:
    """A finished trial's outcome, as if measured now."""
    state = {TrialState.COMPLETE: "complete", TrialState.PRUNED: "pruned"}.get(trial.state, "failed")
    return Outcome(
        state,
        result=trial.user_attrs.get("result"),
        reason=trial.user_attrs.get("reason"),
        windows=tuple(trial.intermediate_values.values()),
    )


SAID_AS_THEY_ARE = (PREDICTED, GAVE_UP, SKIPPED, VALUED, OUT_OF_TIME, CANNOT_PAY)  # pruned: what was done, then why


def _progress(setup: Setup, number: int, config: Config, outcome: Outcome, same: FrozenTrial | None,
              predicted: float | None = None) -> None:
    trials = setup.study.get_trials(deepcopy=False)
    done = len([t for t in tickets.started(trials) if t.state.is_finished()]) + 1
    total = max(done, tickets.target(setup.study, setup.options.trials))
    head = f"[{done:>3}/{total}] {elapsed(setup.elapsed())}"
    if outcome.state == "complete":
        assert outcome.result is not None
        value = outcome.result["samples_per_s"]
        best = max([value] + [t.value for t in trials if t.state == TrialState.COMPLETE and t.value])
        if same is not None:
            what = f"{rate(value):>12}/s = trial {same.number}"
        else:
            flag = ("" if outcome.result.get("reliable", True) else " unreliable") + (
                " time-limited" if outcome.result.get("time_limited") else "")
            what = f"{rate(value):>12}/s ±{outcome.result['spread']:.1%}{flag}"
        tail = f"best {rate(best)}/s"
        if predicted and same is None:
            tail += f"; predicted {rate(predicted)}/s"
    elif outcome.state == "pruned" and (outcome.reason or "").startswith(SAID_AS_THEY_ARE):
        what, _, tail = (outcome.reason or "").partition(": ")  # what was done, then why it cannot win
    elif outcome.state == "pruned":
        windows = outcome.windows
        what = f"pruned at window {len(windows)}: {rate(statistics.median(windows)) + '/s' if windows else '-'}"
        tail = "clearly worse than the best"
    else:
        reason = outcome.reason or "unknown"
        what, tail = f"failed: {reason if len(reason) <= 110 else reason[:107] + '...'}", ""
    if same is not None and outcome.state != "complete":
        tail = f"(as trial {same.number}, the same config; not measured again)"
    setup.echo(f"{head}  trial {number:<3} {what:<28} {config.describe():<58} {tail}".rstrip())


def trained(trial: FrozenTrial) -> bool:
    """The trial built its config and trained: complete, or pruned while it ran. One skipped by prediction never
    built its config, so it shows nothing of its values."""
    reason = str(trial.user_attrs.get("reason") or "")
    return trial.state == TrialState.COMPLETE or (
        trial.state == TrialState.PRUNED and not reason.startswith((PREDICTED, SKIPPED, VALUED, CANNOT_PAY)))


def learn_failures(setup: Setup, learned: Learned) -> None:
    """Before each trial: find values that cannot work, say so once, and stop sampling them."""
    finished = [
        Finished(
            t.number,
            t.user_attrs.get("config", {}),
            trained(t),
            t.user_attrs.get("reason"),
        )
        # Not a trial queued again (its searcher died, or the workload changed since): its retry stands for it.
        for t in sharing.counted(setup.study.get_trials(deepcopy=False))
        if t.state.is_finished() and "duplicate_of" not in t.user_attrs  # a duplicate's failure is its original's
    ]
    found = hopeless_values(finished)
    known = {repr(h.values) for h in learned.hopeless}
    for h in found:
        if repr(h.values) not in known:
            setup.echo(f"  not trying again: {h.describe()}")
    learned.hopeless = found
    fixed = {}
    for knob in {h.values[0][0] for h in found if len(h.values) == 1}:  # values blamed together stay sampled
        domain = setup.space.domains[knob]
        left = [v for v in domain if blocks({knob: v}, found) is None]
        if len(domain) > 1 and len(left) == 1:
            fixed[knob] = left[0]  # the sampler stops proposing the value at all
    if fixed and learned.sampler is not None:
        setup.study.sampler = optuna.samplers.PartialFixedSampler(fixed, learned.sampler)


def check_baseline(setup: Setup) -> None:
    """Stop every searcher once the baseline failed: nothing can be compared against a loop that does not run."""
    for t in sharing.counted(setup.study.get_trials(deepcopy=False)):  # an interrupted baseline's retry stands for it
        if t.state == TrialState.FAIL and t.user_attrs.get("role") == "baseline":
            config = Config.from_dict(t.user_attrs["config"]) if "config" in t.user_attrs else setup.baseline
            raise SearchError(
                f"the workload's own settings ({config.describe()}) fail: "
                f"{str(t.user_attrs.get('reason')).rstrip('.')}. "
                f"Fix the workload first; trial process logs are in {setup.options.state_dir / 'logs'}."
            )
