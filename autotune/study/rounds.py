"""The finalists' rounds: each finalist and the baseline measured again, interleaved, in fresh processes.

The numbers a profile states are these, never a single trial's. The first round measures the baseline and the leader
whatever the clock says; every other measurement runs only while the search's time budget covers it, costed from the
config's own trial (``autotune.study.clock.round_cost``).
"""

from __future__ import annotations

import concurrent.futures
import math
from collections.abc import Mapping

from optuna.trial import FrozenTrial, TrialState

from autotune.config import Config
from autotune.procs.pool import TrialPool
from autotune.study.clock import round_cost
from autotune.study.clock.deadline import round_limit_s
from autotune.study.context import Setup
from autotune.study.pools import SearchPools
from autotune.study.ranking import Results, counted_once, run_s
from autotune.text import rate


class Measured(dict):  # type: ignore[type-arg]
    """The rounds' results (``Results``), and how many of each config's measurements failed: a winner resting on
    fewer rounds than asked says why (``autotune.study.profile.write``)."""

    failed: dict[Config, int]


def measure_rounds(setup: Setup, pools: SearchPools, finalists: list[Config]) -> Results:
    """Each finalist and the baseline, interleaved, in a fresh process per round.

    Under `--gpus` the rounds run side by side, one device each: every device is the
    study's one GPU model, and any difference between them shows in the noise.
    """
    order = [setup.baseline, *finalists]
    results = Measured({c: [] for c in order})
    results.failed = {}
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
    after them only while the budget covers it, costed from its own trial (``autotune.study.clock.round_cost``). The
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
        due = len(rotated) - rotated.index(config)  # this one and those after it
        took[config] = _measure(setup, pool, r, config, results, fresh=not took, due=due)
    if left_out:
        setup.echo(f"  round {r + 1}: not measured, the search's time budget ({setup.options.time_budget_s:.0f} s) "
                   f"would not cover them: {', '.join(c.describe() for c in left_out)}")
    return took


def _in_part(setup: Setup, pool: TrialPool, r: int, order: list[Config], results: Results,
             took: Mapping[Config, float]) -> None:
    """What of round `r` the budget covers: the leader, then the baseline, measured again as a round measures them.

    A speed-up is one rate over another, and on a host where a loader-bound config's rate moves between processes
    (its workers' CPU per sample does), one process a side makes it one draw of the host (docs/measuring.md, on the
    time budget). So the two configs the stated speed-up is made of are measured again while the budget covers
    each one's last time (`took`); a leader that falls behind is followed by the new one, once each. The leader
    goes first: the profile states its rate, which a hand-timed loop checks, and where the budget covers only one
    of the two it is the winner's that rests on two processes (on an H100, the webdataset winner's one round read
    0.913 of the hand loop). As in a whole round, the first starts afresh and the rest take the processes a round
    would (`_round`): the round's pool holds that many, started before the rounds.
    """
    baseline, finalists = order[0], order[1:]
    tried: list[Config] = []
    again: list[Config] = []
    while True:
        leader = min((c for c in finalists if results[c]), key=lambda c: run_s(setup, results, c), default=None)
        due = next((c for c in (leader, baseline) if c is not None and c not in tried), None)
        if due is None or past_budget(setup, took.get(due, math.inf)):
            break
        before = len(results[due])
        left = len({c for c in (leader, baseline) if c is not None and c not in tried})  # this one's included
        _measure(setup, pool, r, due, results, fresh=not tried, due=left)
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


def _measure(setup: Setup, pool: TrialPool, r: int, config: Config, results: Results, fresh: bool,
             due: int = 1) -> float:
    """`config` measured in round `r`, its result kept and echoed; the seconds it took. Its measurement ends by
    its share of the budget left, `due` measurements of the round still to come (``deadline.round_limit_s``)."""
    began = setup.elapsed()
    outcome = pool.run(config, setup.lr(config), setup.windows, fresh=fresh, limit_s=round_limit_s(setup, config, due))
    if outcome.state != "complete" or outcome.result is None:
        setup.echo(f"  round {r + 1}: {config.describe()} failed: {outcome.reason}")
        if isinstance(results, Measured):
            results.failed[config] = results.failed.get(config, 0) + 1
    else:
        results[config].append(counted_once(setup, config, outcome.result))
        cut = " (time-limited)" if outcome.result.get("time_limited") else ""
        said = results[config][-1]["samples_per_s"]
        setup.echo(f"  round {r + 1}: {rate(said):>12}/s  {config.describe()}{cut}")
    return setup.elapsed() - began

