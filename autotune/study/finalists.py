"""A search's third step: the finalists, checked for parity and measured again against the baseline.

The contenders are the configs whose trial ran faster than the baseline's,
fastest first. The parity check (``autotune.study.parity_check``) takes the
first few that train like the baseline; those and the baseline are then
measured again, interleaved, in fresh processes (``rounds``): the numbers a
profile states are these, never a single trial's.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import statistics
from typing import Any

from optuna.trial import TrialState

from autotune.config import Config
from autotune.procs.pool import TrialPool
from autotune.study import baseline_run
from autotune.study.parity import ParityError, ParityRunFailed
from autotune.study.parity_check import ParityCheck
from autotune.study.pools import SearchPools, Team
from autotune.study.setup import SearchError, Setup
from autotune.text import rate
from autotune.trial.parity_run import ParityRun

PARITY_EXTRA_RUNS = 6  # parity runs beyond one per finalist, for the rejected configs among the fastest

Results = dict[Config, list[dict[str, Any]]]  # each config's measurements, one per round


def ranked(setup: Setup) -> dict[Config, int]:
    """Distinct complete configs, fastest first, each with its fastest trial's number; not the baseline."""
    complete = sorted(setup.study.get_trials(states=(TrialState.COMPLETE,)), key=lambda t: t.value or 0.0, reverse=True)
    chosen: dict[Config, int] = {}
    for t in complete:
        config = setup.config_of(t)
        if config not in chosen and config != setup.baseline:
            chosen[config] = t.number
    return chosen


def contenders(setup: Setup) -> dict[Config, int]:
    """The ranked configs whose trial ran faster than the baseline's: a slower one is never recommended."""
    complete = setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    floor = max((t.value or 0.0 for t in complete if setup.config_of(t) == setup.baseline), default=0.0)
    values = {t.number: t.value or 0.0 for t in complete}
    return {c: n for c, n in ranked(setup).items() if values[n] > floor}


def baseline_rate(setup: Setup) -> float | None:
    """The baseline's samples/s in its trials (the median), which bounds the parity runs' length."""
    values = [t.value for t in setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
              if t.value is not None and "config" in t.user_attrs and setup.config_of(t) == setup.baseline]
    return statistics.median(values) if values else None


def new_parity_check(
    setup: Setup, pool: TrialPool, candidates: list[Config], team: Team, max_batch: int | None = None
) -> ParityCheck:
    """The check, made once per search; it adopts the baseline run a `--gpus` worker made, if there is one.

    `max_batch`: size the runs for it, not for the largest batch among `candidates` (more may come).
    """
    timeout = baseline_run.PARITY_TIMEOUT_FACTOR * setup.options.trial_timeout_s

    def make_run(config: Config, lr: float, samples: int) -> ParityRun:
        outcome = pool.parity_run(config, lr, samples, setup.baseline.batch_size, timeout)
        if outcome.state != "complete" or outcome.result is None:
            raise ParityRunFailed(outcome.reason or "no result")
        return ParityRun.from_dict(outcome.result)

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
    )
    setup.echo(
        f"parity: checking the fastest against the baseline ({setup.baseline.describe()}, lr "
        f"{setup.lr(setup.baseline):g}, "
        f"fp32, eager) from the same weights and data order, {check.samples:,} samples each"
    )
    if stored is not None and stored.get("samples") == check.samples:
        check.adopt_baseline(
            ParityRun.from_dict(stored["parity_run"]), f"run by worker {stored['worker']} before its trials"
        )
    return check


def check_early(setup: Setup, pools: SearchPools, team: Team) -> ParityCheck | None:
    """Check the contenders so far while another worker's last trial runs: time this worker would spend idle.

    The check after the trials reuses each verdict and runs only what the last trials
    add; a failure here is said by that check, with its reason.
    """
    found = contenders(setup)
    if not found:
        return None
    want = setup.options.finalists
    check = new_parity_check(setup, pools.trials, list(found), team, max_batch=max(setup.space.domains["batch_size"]))
    with contextlib.suppress(ParityError):
        check.select(list(found), want=want, max_runs=want + PARITY_EXTRA_RUNS)
    return check


def choose(
    setup: Setup, pools: SearchPools, team: Team, check: ParityCheck | None
) -> tuple[list[Config], ParityCheck | None]:
    """The configs to measure again: the fastest contenders that train like the baseline (unchecked: the fastest)."""
    if not setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        raise SearchError(f"no trial completed in study {setup.study_name!r}; the failures above say why.")
    found = contenders(setup)
    if not (setup.options.parity_check and found):
        return list(found)[: setup.options.finalists], None
    check = check or new_parity_check(setup, pools.trials, list(found), team)
    chosen: list[Config] = []
    stopped = False
    try:
        want = setup.options.finalists
        chosen = check.select(list(found), want=want, max_runs=want + PARITY_EXTRA_RUNS)
    except ParityError as exc:
        raise SearchError(f"{exc} Run with --no-parity-check to skip the check.") from exc
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
    if not chosen:
        raise SearchError(
            f"no config faster than the baseline trains like it: all {len(check.verdicts)} checked, the fastest "
            f"first, were "
            f"rejected (the lines above give the numbers). Narrow the search (e.g. --fix batch_size="
            f"{setup.baseline.batch_size}), try --lr-scaling, or skip the check with --no-parity-check."
        )
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
        for r in range(k, setup.options.rounds, len(rounds)):
            _round(setup, rounds[k], r, order, results)

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


def _round(setup: Setup, pool: TrialPool, r: int, order: list[Config], results: Results) -> None:
    rotated = order[r % len(order) :] + order[: r % len(order)]
    for i, config in enumerate(rotated):
        outcome = pool.run(config, setup.lr(config), setup.windows, fresh=(i == 0))
        if outcome.state != "complete" or outcome.result is None:
            setup.echo(f"  round {r + 1}: {config.describe()} failed: {outcome.reason}")
            continue
        results[config].append(outcome.result)
        setup.echo(f"  round {r + 1}: {rate(outcome.result['samples_per_s']):>12}/s  {config.describe()}")
