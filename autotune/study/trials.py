"""A search's second step: take the study's tickets one by one and measure each config in a trial process.

The loop follows ``optuna/study/_optimize.py``: ``run_trials`` takes a ticket,
``_run_trial`` runs it (``_take``, then ``why_not_run`` or ``_measure``, then
``_tell``), small functions with the state in the study. Each trial's config is
suggested by the space, measured by a trial pool, and told to the study with its
result or its failure reason. Every searcher's failures teach every
searcher: a knob value that fails every time it is tried is not tried again
(``autotune.study.failed.hopeless``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config import COMPILE_ALLOWANCE_S, Config
from autotune.procs import lifecycle
from autotune.procs.pool import TrialPool
from autotune.procs.trial_process import GAVE_UP, Outcome
from autotune.streams.shares import shards_per_rank
from autotune.study import progress, standing
from autotune.study.checks.families import SKIPPED, FamilyGate
from autotune.study.clock import patience
from autotune.study.clock.deadline import give_up_after, out_of_time, round_start_s, trial_limit_s
from autotune.study.clock.round_cost import FRESH_COMPILE
from autotune.study.context import SearchError, Setup
from autotune.study.failed import seed_retry
from autotune.study.failed.hopeless import Finished, Hopeless, blocks, hopeless_values
from autotune.study.planning import balance, compile_cost, plan, remembered, skip
from autotune.study.planning.compile_cost import CANNOT_PAY
from autotune.study.planning.predict import PREDICTED, LoaderModel
from autotune.study.planning.valuation import VALUATION_ATTRIBUTE, VALUED, Valuation
from autotune.study.pools import SOLO, Team
from autotune.study.ranking import RULED_OUT, counted_once, stream_refusal
from autotune.study.shared import sharing, tickets

KEPT_RESULT = (
    "samples_per_s", "steady_samples_per_s", "spread", "step_s", "epoch_s", "epoch_overhead_s", "setup_s",
    "materialize_s", "capture_s", "compile_s", "gpu_util", "peak_memory_bytes", "backlog_steps", "whole_epochs",
    "reliable", "tokens_per_sample", "padding", "uncredited_share", "main_cpu_ms", "workers_cpu_ms", "time_limited",
    "first_batch_s", "repeated", "short_batches_once_s",
)


@dataclasses.dataclass
class Learned:
    """What this process's trials have taught so far: the hopeless knob values (and the sampler to narrow when one
    is found), the loader's ceilings, the parity verdicts by family, the valuation, and why the trials ended."""

    hopeless: list[Hopeless] = dataclasses.field(default_factory=list)
    sampler: optuna.samplers.BaseSampler | None = None  # the study's own, before any value was fixed
    loader: LoaderModel | None = None  # each streaming config's loader ceiling (autotune.study.planning.predict)
    families: FamilyGate = dataclasses.field(default_factory=FamilyGate)  # parity verdicts so far, by math family
    valuation: Valuation = dataclasses.field(default_factory=Valuation)  # the loop valued from its parts
    stopped: str | None = None  # why the trials ended early (autotune.study.clock.patience, or the budget), once said
    budget_ended: bool = False  # the time budget, not the tickets or patience, ended them
    plan_s: float = 0.0  # seconds this process's plan spent on its parts (the search's budget line)
    kept: tuple[int, int, int] | None = None  # what of the valuation the state folder holds (planning.remembered)


def loader_model(setup: Setup) -> LoaderModel:
    """The loader ceilings of this search: the data set's measured cost per sample, over the cores it may use."""
    ratio = getattr(setup.study.pruner, "ratio", 0.5)  # what the pruner calls clearly worse, skipped alike
    return LoaderModel(setup.facts.load_cpu_s, setup.machine.cpu_share, ratio)


def run_trials(setup: Setup, pool: TrialPool, learned: Learned | None = None, team: Team = SOLO) -> Learned:
    """Take tickets until none is left or the time budget is spent; returns what was learned on the way.

    `team`: under --gpus, the writer's, so the parity verdicts made during the trials adopt the baseline's run a
    searcher makes for them.
    """
    learned = learned or Learned(sampler=setup.study.sampler, families=FamilyGate(team),
                                 valuation=Valuation(shards=shards_per_rank(setup.facts)))
    if learned.loader is None:
        learned.loader = loader_model(setup)
    learned.families.take_up(setup, pool)  # a rerun's first trial is skipped as the stopped run would have
    learned.kept = remembered.sync(setup, learned.valuation, learned.kept)
    start_s = round_start_s(setup, pool.startup_s, team.round_devices)
    while not out_of_time(setup, learned.families.spent_s(), learned.families.gradients_s(), start_s):
        check_baseline(setup)
        learn_failures(setup, learned)
        seed_retry.queue_retries(setup.study, setup.storage, learned.hopeless, setup.baseline)
        if learned.valuation is not None and setup.options.write_tuned_file and baseline_done(setup):
            made = plan.make(setup, pool, learned.valuation)  # once: the grid valued, its fastest queued next
            learned.plan_s += made.parts_s if made is not None else 0.0
            learned.kept = remembered.sync(setup, learned.valuation, learned.kept)
        stop = patience.why_stop(setup.study.get_trials(deepcopy=False), plan.PLAN_ATTRIBUTE in setup.study.user_attrs,
                                 standing.rejected_families(setup.study))
        if stop is not None and plan.measure_predicted_faster(setup):
            stop = None  # the plan's guess faster than the best is measured first
        if stop is not None:
            if learned.stopped is None:  # said once: the wait for other searchers' trials asks again
                setup.echo(stop)
            learned.stopped = stop
            break
        ticket = tickets.take(setup.study, setup.storage, setup.options.trials,
                              adjust=lambda params: seed_retry.without(params, learned.hopeless, setup.baseline))
        if ticket is None:
            break
        _run_trial(setup, ticket, pool, learned)
        learned.kept = remembered.sync(setup, learned.valuation, learned.kept)
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


def _run_trial(setup: Setup, ticket: sharing.Ticket, pool: TrialPool, learned: Learned) -> None:
    """Measure the config a ticket holds (or the sampler fills in) and tell the study how it went."""
    study, storage, trial = setup.study, setup.storage, ticket.trial
    interval, _ = sharing.heartbeat_settings()
    with sharing.Heartbeat(lambda: storage.record_heartbeat(ticket.trial_id), interval):
        try:
            config, lr = _take(setup, trial)
            same = earlier_trial_of(setup, trial.number, config)
            if same is not None:  # the sampler proposed a config already measured: reuse its outcome
                outcome = _reused(trial, same)
            else:
                outcome = why_not_run(setup, trial, config, lr, pool, learned) or _measure(setup, trial, config, lr,
                                                                                           pool)
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
    _tell(setup, trial, config, outcome, same, learned)


def _take(setup: Setup, trial: optuna.Trial) -> tuple[Config, float]:
    """The trial's config and learning rate, recorded on it with the reason it stands for until it ends."""
    # Stays the reason if this searcher dies mid-trial; the heartbeat then fails it.
    trial.set_user_attr(
        "reason",
        f"{sharing.INTERRUPTED}: its searcher {sharing.owner()} stopped during the trial; the config was queued again",
    )
    trial.set_user_attr("searcher", sharing.owner())
    config = setup.space.suggest(trial)
    lr = setup.lr(config)
    trial.set_user_attr("config", config.as_dict())
    trial.set_user_attr("lr", lr)
    return config, lr


def _reused(trial: optuna.Trial, same: FrozenTrial) -> Outcome:
    """An earlier trial's outcome, standing for this one's."""
    trial.set_user_attr("duplicate_of", same.number)
    if "predicted_samples_per_s" in same.user_attrs:  # a config valued before it was measured
        trial.set_user_attr("predicted_samples_per_s", same.user_attrs["predicted_samples_per_s"])
    if FRESH_COMPILE in same.user_attrs:  # its result's compile was a second one: the whole goes with it
        trial.set_user_attr(FRESH_COMPILE, same.user_attrs[FRESH_COMPILE])
    return _outcome_of(same)


def why_not_run(setup: Setup, trial: optuna.Trial, config: Config, lr: float, pool: TrialPool,
                learned: Learned) -> Outcome | None:
    """The outcome of a config that need not run end to end, with its reason; None when it must be measured.

    In order of cost: a value known not to work, a math family the parity check rejected, a compile that alone
    outlasts the best run, a config holding at least what one that ran out of memory held, a loader that cannot
    feed the best so far, and last a rate valued from its parts (which may measure a part). The baseline always
    runs: every speed-up is stated against it.
    """
    blocked = blocks(config.as_dict(), learned.hopeless)
    if blocked is not None:  # known not to work: record it, spend no time on it
        return Outcome("failed", reason=f"skipped: {blocked.short()}")
    refused = stream_refusal(setup, config)
    if refused is not None and trial.user_attrs.get("role") != "baseline":  # its samples/s would count copies
        return Outcome("pruned", reason=f"{RULED_OUT}: num_workers={config.num_workers}: {refused}")
    if trial.user_attrs.get("role") != "baseline":
        rejected = learned.families.why_skip(setup, config)
        if rejected is not None:  # its family cannot win
            if trial.user_attrs.get("role") == "seed":
                learned.families.queue_same_math(setup, config)  # the guess's other knobs, measured next
            return Outcome("pruned", reason=rejected)
        why = compile_cost.why_skip(setup, config, learned.valuation)
        if why is not None:  # its compile alone loses
            return Outcome("pruned", reason=why)
    why = skip.predicted(setup, trial, config, learned.loader)
    if why is not None:  # it cannot fit, or its loader cannot feed the best so far
        return Outcome("pruned", reason=why)
    if learned.valuation is not None and balance.SOLVED not in trial.user_attrs:
        # Its predicted rate is clearly worse, or its step alone ran out of memory.
        return skip.valued(setup, trial, config, lr, pool, learned.valuation)
    return None


def _measure(setup: Setup, trial: optuna.Trial, config: Config, lr: float, pool: TrialPool) -> Outcome:
    """The config measured end to end in a trial process, its windows reported to the pruner."""

    def on_window(i: int, samples_per_s: float) -> bool:
        trial.report(samples_per_s, i)
        return trial.should_prune()

    began = time.monotonic()
    give_up = give_up_after(setup, trial)
    # A step still compiling sends no window: it is given up only past the compile's allowance too.
    give_up_s = give_up[0] + COMPILE_ALLOWANCE_S[config.compile] if give_up else None
    outcome = pool.run(config, lr, setup.windows, on_window, give_up_s=give_up_s, limit_s=trial_limit_s(setup, config))
    if give_up and outcome.state == "pruned" and (outcome.reason or "").startswith(GAVE_UP):
        outcome = dataclasses.replace(outcome, reason=f"{outcome.reason}: {give_up[1]}")
    # Wall time, as a finalist's round pays it: the build, warm-up and backlog, the windows and the teardown, and a
    # new process's start where the trial needed one (every round does); see docs/measuring.md.
    trial.set_user_attr("duration_s", round(time.monotonic() - began, 2))
    return outcome


def _tell(setup: Setup, trial: optuna.Trial, config: Config, outcome: Outcome, same: FrozenTrial | None,
          learned: Learned) -> None:
    """Tell the study how the trial went, say it, and learn from a measured rate (the loader's, the valuation's)."""
    if outcome.result:
        outcome = dataclasses.replace(outcome, result=counted_once(setup, config, outcome.result))
        assert outcome.result is not None
        trial.set_user_attr("result", {k: outcome.result.get(k) for k in KEPT_RESULT})
    trial.set_user_attr("reason", outcome.reason)  # None: nothing went wrong
    progress.say(setup, trial.number, config, outcome, same, trial.user_attrs.get("predicted_samples_per_s"))
    if outcome.state != "complete":
        setup.study.tell(trial, state=TrialState.PRUNED if outcome.state == "pruned" else TrialState.FAIL)
        return
    assert outcome.result is not None
    measured = float(outcome.result["samples_per_s"])
    if same is None:
        _note_fresh_compile(trial, config, outcome.result, learned.valuation)
        _learn_rate(setup, trial, config, measured, learned)
    setup.study.tell(trial, measured)


def _note_fresh_compile(trial: optuna.Trial, config: Config, result: dict[str, Any], valuation: Valuation | None
                        ) -> None:
    """Where a compiled trial compiled in less than its step part's whole compile (again, in the process the part
    compiled in), keep the whole compile beside it: its round, in a fresh process, pays more
    (``round_cost.fresh_s``)."""
    whole = valuation.compiles.get(config.compile) if valuation is not None and config.compile != "off" else None
    if whole is not None and whole > float(result.get("compile_s") or 0.0):
        trial.set_user_attr(FRESH_COMPILE, round(whole, 2))


def _learn_rate(setup: Setup, trial: optuna.Trial, config: Config, measured: float, learned: Learned) -> None:
    """A new measured rate checks the loader's ceiling and teaches the valuation; a hybrid's queues its balance."""
    if learned.loader is not None and (wrong := learned.loader.check(config, measured)):
        setup.echo(wrong)
    valuation = learned.valuation
    if valuation is None:
        return
    error = valuation.learn(config, measured)
    if error is not None:
        trial.set_user_attr("prediction_error", round(error, 4))
    setup.study.set_user_attr(VALUATION_ATTRIBUTE, valuation.record())
    said = balance.queue_next(setup, config, measured, valuation)
    if said is not None:  # a hybrid measured: the share its host and card balance at, queued next
        setup.echo(said)


def earlier_trial_of(setup: Setup, number: int, config: Config) -> FrozenTrial | None:
    """An earlier trial of the same config: its outcome stands for this one, so no config is measured twice.

    One still running (on another searcher) is waited for; if its searcher dies, this one measures. A config the
    plan only valued is no such trial: it was never run, and its prediction is judged again now, by what the
    search has learned since (``autotune.study.planning.skip.valued``). Reused, it would keep such configs from ever
    running while the prediction is still untrusted (docs/search.md#the-plan-and-valuation).
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


def trained(trial: FrozenTrial) -> bool:
    """The trial built its config and trained: complete, or pruned while it ran. One skipped by prediction never
    built its config, so it shows nothing of its values."""
    reason = str(trial.user_attrs.get("reason") or "")
    return trial.state == TrialState.COMPLETE or (
        trial.state == TrialState.PRUNED and not reason.startswith((PREDICTED, SKIPPED, VALUED, CANNOT_PAY, RULED_OUT)))


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
