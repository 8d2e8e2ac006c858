"""A search's third step: the finalists, checked for parity and measured again against the baseline.

The contenders are the configs whose trial ran faster than the baseline's,
shortest declared run first (the workload's `epochs`, one-time costs included).
The parity check (``autotune.parity.check``) takes the
first few that train like the baseline; those and the baseline are then
measured again, interleaved, in fresh processes (``rounds``): the numbers a
profile states are these, never a single trial's.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import math
import statistics
from collections.abc import Mapping
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from autotune.config import Config
from autotune.parity import inputs as parity_inputs
from autotune.parity import numerics as parity_numerics
from autotune.parity.check import ParityCheck
from autotune.parity.inputs import InputsVerdict
from autotune.parity.numerics import NumericsVerdict
from autotune.parity.run import ParityRun
from autotune.parity.verdict import CHECK_SHARE, ParityError, ParityRunFailed, ParityRunOutOfTime
from autotune.procs.pool import TrialPool
from autotune.study import answer, baseline_run, kept_check, round_cost
from autotune.study.pools import SearchPools, Team
from autotune.study.setup import SearchError, Setup
from autotune.text import rate

PARITY_EXTRA_RUNS = 6  # parity runs beyond one per finalist, for the rejected configs among the fastest
MIN_CHECK_RUN_S = 1.0  # a run given less than this by the check's share could only be stopped

Results = dict[Config, list[dict[str, Any]]]  # each config's measurements, one per round


def declared_run_s(result: Mapping[str, Any], epochs: int, size: int) -> float:
    """Seconds the workload's declared run (`epochs` epochs of `size` samples) takes at a measurement, one-time costs
    included: the data set materialised on the device, and the set-up before the first timed step (the first
    iterator, warm-up, graph capture, cuDNN's autotuning). A measurement without `epoch_s` is timed by its rate.

    >>> declared_run_s({"samples_per_s": 1000.0, "epoch_s": 2.0, "setup_s": 0.5, "materialize_s": 20.0}, 3, 2000)
    26.5
    """
    epoch_s = result.get("epoch_s") or size / result["samples_per_s"]
    return (result.get("setup_s") or 0.0) + (result.get("materialize_s") or 0.0) + epochs * epoch_s


def run_s(setup: Setup, results: Results, config: Config) -> float:
    """The median over the rounds of `config`'s declared run, one-time costs included (`declared_run_s`)."""
    epochs = setup.workload.defaults["epochs"]
    return statistics.median(declared_run_s(r, epochs, setup.facts.size) for r in results[config])


def trial_run_s(setup: Setup, trial: FrozenTrial) -> float:
    """A complete trial's `declared_run_s`."""
    result = trial.user_attrs.get("result") or {"samples_per_s": trial.value}
    return declared_run_s(result, setup.workload.defaults["epochs"], setup.facts.size)


def ranked(setup: Setup) -> dict[Config, int]:
    """Distinct complete configs, shortest declared run first, each with that trial's number; not the baseline.

    The workload's declared run decides, not steady samples/s: one-time costs (a data set materialised on the
    device, a graph captured) count as often as the run pays them.
    """
    complete = sorted(setup.study.get_trials(states=(TrialState.COMPLETE,)), key=lambda t: trial_run_s(setup, t))
    chosen: dict[Config, int] = {}
    for t in complete:
        config = setup.config_of(t)
        if config not in chosen and config != setup.baseline:
            chosen[config] = t.number
    return chosen


def contenders(setup: Setup) -> dict[Config, int]:
    """The ranked configs whose trial beat the baseline's declared run or its samples/s: a config slower on both is
    never recommended; one faster only in samples/s is measured beside the winner, to state what it would cost."""
    complete = setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    own = [t for t in complete if setup.config_of(t) == setup.baseline]
    floor_rate = max((t.value or 0.0 for t in own), default=0.0)
    floor_run_s = min((trial_run_s(setup, t) for t in own), default=math.inf)
    faster = {
        setup.config_of(t) for t in complete if (t.value or 0.0) > floor_rate or trial_run_s(setup, t) < floor_run_s
    }
    return {c: n for c, n in ranked(setup).items() if c in faster}


def rate_leader(setup: Setup, found: Mapping[Config, int]) -> Config | None:
    """The config among `found` whose trial had the highest steady samples/s: what ranking by rate would pick."""
    best: dict[Config, float] = {}
    for t in setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        config = setup.config_of(t)
        if config in found:
            best[config] = max(best.get(config, 0.0), t.value or 0.0)
    return max(best, key=lambda c: best[c], default=None)


def with_rate_leader(setup: Setup, found: Mapping[Config, int], chosen: list[Config],
                     check: ParityCheck | None = None) -> list[Config]:
    """`chosen`, and the rate leader among `found` when it is not in it (and trains like the baseline, when checked).

    Measured in the same rounds as the winner, it lets the profile state both picks from numbers of one run.
    """
    leader = rate_leader(setup, found)
    if not chosen or leader is None or leader in chosen:
        return chosen
    if check is None:
        return [*chosen, leader]
    return [*chosen, *check.select([leader], want=1, max_runs=1)]


def baseline_rate(setup: Setup) -> float | None:
    """The baseline's samples/s in its trials (the median), which bounds the parity runs' length."""
    values = [t.value for t in setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
              if t.value is not None and "config" in t.user_attrs and setup.config_of(t) == setup.baseline]
    return statistics.median(values) if values else None


def check_budget(setup: Setup) -> float | None:
    """Seconds the parity check may take: CHECK_SHARE of the search's time budget (None: no budget, no bound)."""
    budget = setup.options.time_budget_s
    return None if budget is None else CHECK_SHARE * budget


def learning_rate(setup: Setup, best: Config, parity_record: dict[str, Any] | None) -> dict[str, Any]:
    """The profile's `lr`, `lr_rule` and `lr_reason`: the rate the parity check passed `best` at, and why that one."""
    if best.batch_size == setup.baseline.batch_size:
        why = "the workload's own batch size keeps its own learning rate"
        return {"lr": setup.lr(best), "lr_rule": setup.lr_rule.name, "lr_reason": why}
    if parity_record is not None and "lr_rule" in parity_record:
        return {k: parity_record[k] for k in ("lr", "lr_rule", "lr_reason")}
    why = setup.lr_rule.why if setup.options.parity_check else f"{setup.lr_rule.why}; not checked (--no-parity-check)"
    return {"lr": setup.lr(best), "lr_rule": setup.lr_rule.name, "lr_reason": why}


def new_parity_check(
    setup: Setup, pool: TrialPool, candidates: list[Config], team: Team, max_batch: int | None = None
) -> ParityCheck:
    """The check, made once per search; it goes on from the one an earlier run of this search kept in the study
    (``autotune.study.kept_check``), or adopts the baseline run a `--gpus` searcher made, if there is one.

    `max_batch`: size the runs for it; by default the space's largest batch, whichever step makes the check and
    whatever the contenders so far: a check made afresh after a stop, sized for the contenders left, trained
    shorter runs than the first run's check and judged otherwise.
    """
    max_batch = max_batch or max(setup.space.domains["batch_size"])
    trial_limit = baseline_run.PARITY_TIMEOUT_FACTOR * setup.options.trial_timeout_s

    def timeout() -> tuple[float, bool]:
        """What the next training run may take, and whether the check's share, not the trial's limit, set it: every
        run is held to what is left of the share (never under MIN_CHECK_RUN_S), the baseline's first. On a busy
        2-core host, a `--time-budget 60` search's baseline run took 116.8 s of its 9 s. (The images and the
        gradients take a few batches: they keep the trial's limit, since one stopped would stand as a failure for
        every config it judges, and neither starts once the share is spent.)"""
        left = check.budget.left_s()
        if left is None or left >= trial_limit:
            return trial_limit, False
        return max(left, MIN_CHECK_RUN_S), True

    def make_run(config: Config, lr: float, samples: int) -> ParityRun:
        limit, by_share = timeout()
        outcome = pool.parity_run(config, lr, samples, setup.baseline.batch_size, limit)
        if outcome.state != "complete" or outcome.result is None:
            reason = outcome.reason or "no result"
            if by_share and reason.startswith("timeout"):
                raise ParityRunOutOfTime(f"{reason}, what was left of the check's share ({check.budget.budget_s:.0f} "
                                         f"s, {CHECK_SHARE:.0%} of the search's budget)")
            raise ParityRunFailed(reason)
        return ParityRun.from_dict(outcome.result)

    def check_inputs(config: Config) -> InputsVerdict:
        outcome = pool.inputs_check(config, trial_limit)
        if outcome.state != "complete" or outcome.result is None:
            return parity_inputs.failed(outcome.reason or "no result")
        return parity_inputs.judge(outcome.result)

    def check_numerics(config: Config) -> NumericsVerdict:
        outcome = pool.numerics_check(setup.baseline, config, setup.lr(setup.baseline), trial_limit)
        if outcome.state != "complete" or outcome.result is None:
            return parity_numerics.failed(outcome.reason or "no result", parity_numerics.label(config))
        return parity_numerics.judge(outcome.result, parity_numerics.label(config))

    stored = baseline_run.wait_for(setup, team.baseline_run_pending)
    # A baseline run made during the trials was sized for the space's largest batch; the check keeps that length.
    check = ParityCheck(
        setup.baseline,
        setup.lr,
        make_run,
        candidates,
        setup.echo,
        max_batch=stored.get("max_batch") if stored is not None else max_batch,
        baseline_rate=baseline_rate(setup),
        budget_s=check_budget(setup),
        lr_rule=setup.lr_rule,
        lr_at=setup.lr,
        check_inputs=check_inputs,
        check_numerics=check_numerics,
    )
    if not kept_check.take_up(setup, check):
        setup.echo(
            f"parity: checking the fastest against the baseline ({setup.baseline.describe()}, lr "
            f"{setup.lr(setup.baseline):g}, "
            f"fp32, eager) from the same weights and data order, {check.samples:,} samples each"
        )
        if stored is not None and stored.get("samples") == check.samples:
            check.adopt_baseline(
                ParityRun.from_dict(stored["parity_run"]), f"run by searcher {stored['searcher']} before its trials"
            )
    kept_check.keep_as_it_goes(setup, check)
    return check


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


def choose(
    setup: Setup, pools: SearchPools, team: Team, check: ParityCheck | None
) -> tuple[list[Config], ParityCheck | None]:
    """The configs to measure again: the fastest contenders that train like the baseline (unchecked: the fastest).

    None when nothing faster may win: the baseline is then the answer, and the study keeps why
    (``autotune.study.answer``). Only a search whose baseline never completed ends here without one.
    """
    if not setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        raise SearchError(answer.why_nothing_ran(setup.study, setup.options.time_budget_s, setup.elapsed(),
                                                 setup.study_name))
    answer.keep(setup.study, None)
    found = contenders(setup)
    if not (setup.options.parity_check and found):
        return with_rate_leader(setup, found, list(found)[: setup.options.finalists]), None
    check = check or new_parity_check(setup, pools.trials, list(found), team)
    chosen: list[Config] = []
    stopped = False
    try:
        want = setup.options.finalists
        chosen = check.select(list(found), want=want, max_runs=want + PARITY_EXTRA_RUNS)
        chosen = with_rate_leader(setup, found, chosen, check)
    except ParityError as exc:
        answer.keep(setup.study, answer.check_failed(str(exc)))
    except KeyboardInterrupt:
        stopped = True  # a check cut short has no cost worth stating ("0 config(s) checked ... took 7.4 s")
        raise
    finally:
        numbers = ranked(setup)  # every config checked, early too, though it may have left the contenders since
        for config, verdict in check.verdicts.items():
            # Optuna keeps a finished trial read-only: the verdict is kept on the study, under its trial.
            if config in numbers:
                setup.study.set_user_attr(
                    f"parity:trial-{numbers[config]}", {**verdict.as_record(), "config": config.describe()}
                )
        if not stopped:
            setup.echo(check.summary())
    if not chosen and answer.kept(setup.study) is None:
        checked = len(check.verdicts)
        if check.conclusive is False:
            reason = answer.inconclusive(checked, check.why_inconclusive())
        elif check.verdicts and not any(v.conclusive for v in check.verdicts.values()):
            reason = answer.unjudged(checked)  # not one rejected by its numbers: the clock left them unjudged
        else:
            reason = answer.all_rejected(checked, str(setup.baseline.batch_size))
        answer.keep(setup.study, reason)
    return chosen, check


def measure_rounds(setup: Setup, pools: SearchPools, finalists: list[Config]) -> Results:
    """Each finalist and the baseline, interleaved, in a fresh process per round.

    Under `--gpus` the rounds run side by side, one device each: every device is the
    study's one GPU model, and any difference between them shows in the noise.
    """
    order = [setup.baseline, *finalists]
    results: Results = {c: [] for c in order}
    rounds = pools.rounds or pools.prestart_rounds()
    pools.trials.stop()  # the trial processes are done: none tears down while a round measures

    def rounds_on(k: int) -> None:
        took: dict[Config, float] = {}
        for r in range(k, setup.options.rounds, len(rounds)):
            if r >= len(rounds) and past_budget(setup, sum(took.values())):
                _in_part(setup, rounds[k], r, order, results, took)
                return
            took = _round(setup, rounds[k], r, order, results, first=r < len(rounds))

    if len(rounds) == 1:
        rounds_on(0)
        return results
    executor = concurrent.futures.ThreadPoolExecutor(len(rounds))
    futures = [executor.submit(rounds_on, k) for k in range(len(rounds))]
    try:
        for future in futures:
            future.result()
    finally:
        if not all(f.done() for f in futures):  # interrupted: stop the rounds still measuring
            for each in rounds:
                each.kill()
        executor.shutdown(wait=True)
    return results


def past_budget(setup: Setup, round_s: float) -> bool:
    """Another round of `round_s` would end the search after its time budget: the first round always runs, and
    every later one keeps to the budget, whatever the trials' times made of the end's cost."""
    budget = setup.options.time_budget_s
    return budget is not None and setup.elapsed() + round_s > budget


def _round(setup: Setup, pool: TrialPool, r: int, order: list[Config], results: Results,
           first: bool = False) -> dict[Config, float]:
    """Round `r`: every config of `order`, rotated by `r`; the seconds each took.

    A `first` round always measures the baseline and the leader, the speed-up the profile states; each finalist
    after them only while the budget covers it, costed from its own trial (``autotune.study.round_cost``). The
    trials left the time for all of them, unless one ran long: a finalist left out is said, not waited for.
    """
    rotated = order[r % len(order) :] + order[: r % len(order)]
    took: dict[Config, float] = {}
    left_out: list[Config] = []
    stated = order[:2]  # the baseline and the leader, wherever a later pool's rotation puts them (under --gpus)
    complete: list[FrozenTrial] | None = None  # read once, when a config first needs its cost
    for config in rotated:
        if first and config not in stated:
            complete = complete if complete is not None else setup.study.get_trials(
                deepcopy=False, states=(TrialState.COMPLETE,))
            if past_budget(setup, round_cost.config_s(setup, complete, config, max(took.values(), default=0.0))):
                left_out.append(config)
                continue
        took[config] = _measure(setup, pool, r, config, results, fresh=not took)
    if left_out:
        setup.echo(f"  round {r + 1}: not measured, the search's time budget ({setup.options.time_budget_s:.0f} s) "
                   f"would not cover them: {', '.join(c.describe() for c in left_out)}")
    return took


def _in_part(setup: Setup, pool: TrialPool, r: int, order: list[Config], results: Results,
             took: Mapping[Config, float]) -> None:
    """What of round `r` the budget covers: the baseline, then the leader, measured again as a round measures them.

    A speed-up is one rate over another, and on a host where a loader-bound config's rate moves by a third between
    processes (its workers' CPU per sample does), one process a side makes it one draw of the host: on an H200,
    a search's single round put the workload's own settings at 1,297/s, which hand loops on the same host ran at
    899-1,124/s. So the two configs the stated speed-up is made of are measured again while the budget covers
    each one's last time (`took`); a leader that falls behind is followed by the new one, once each. As in a
    whole round, the first starts afresh and the rest take the processes a round would (`_round`): the round's
    pool holds that many, started before the rounds.
    """
    baseline, finalists = order[0], order[1:]
    tried: list[Config] = []
    again: list[Config] = []
    while True:
        leader = min((c for c in finalists if results[c]), key=lambda c: run_s(setup, results, c), default=None)
        due = next((c for c in (baseline, leader) if c is not None and c not in tried), None)
        if due is None or past_budget(setup, took.get(due, math.inf)):
            break
        before = len(results[due])
        _measure(setup, pool, r, due, results, fresh=not tried)
        tried.append(due)
        if len(results[due]) > before:
            again.append(due)
    said = (f"  round {r + 1} {'run in part' if tried else 'not run'}: the last took {sum(took.values()):.0f} s, and "
            f"the search's time budget ({setup.options.time_budget_s:.0f} s) would not cover another")
    if again:
        said += f"; measured again: {', '.join(c.describe() for c in again)}"
    if again and leader is not None and len(results[leader]) != len(results[baseline]):
        said += (f"; the leader, {leader.describe()}, rests on {len(results[leader])} process(es), the baseline "
                 f"on {len(results[baseline])}")
    setup.echo(said)


def _measure(setup: Setup, pool: TrialPool, r: int, config: Config, results: Results, fresh: bool) -> float:
    """`config` measured in round `r`, its result kept and echoed; the seconds it took."""
    began = setup.elapsed()
    outcome = pool.run(config, setup.lr(config), setup.windows, fresh=fresh)
    if outcome.state != "complete" or outcome.result is None:
        setup.echo(f"  round {r + 1}: {config.describe()} failed: {outcome.reason}")
    else:
        results[config].append(outcome.result)
        cut = " (time-limited)" if outcome.result.get("time_limited") else ""
        setup.echo(f"  round {r + 1}: {rate(outcome.result['samples_per_s']):>12}/s  {config.describe()}{cut}")
    return setup.elapsed() - began
