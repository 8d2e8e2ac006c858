"""`autotune search` as four plain steps: setup, trials, finalists, write.

    result = search("mnist_cnn", SearchOptions(trials=8))   # writes recipes/mnist_cnn.tuned.toml

Each step is a function of a few lines over a frozen ``Setup``; the state lives
in the Optuna study. The study survives a killed search: the same command
resumes it. Several searchers may share one study (``autotune.study.shared.sharing``);
one of them measures the finalists and writes the tuned file
(``autotune.study.shared.claim``). ``autotune.study.gpus.parallel`` runs the same steps
under ``--gpus``.
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from collections.abc import Callable, Iterator

import optuna
from optuna.trial import TrialState

from autotune.config import Config
from autotune.errors import AutotuneError
from autotune.options import SearchOptions
from autotune.parity.check import ParityCheck
from autotune.procs.pool import TrialPool
from autotune.study import answer, ending, finalists, profile, rounds, standing
from autotune.study.checks import kept_check
from autotune.study.checks.parity import check_early
from autotune.study.clock import spent
from autotune.study.context import Setup
from autotune.study.ending import StoredCheck
from autotune.study.planning import memory
from autotune.study.pools import SOLO, SearchPools, Team
from autotune.study.profile import SearchResult
from autotune.study.ranking import Results
from autotune.study.setup import announce, open_study, prepare
from autotune.study.shared import sharing, storage_errors, tickets
from autotune.study.shared.claim import wait_for_writer
from autotune.study.trials import run_trials, taken, wait_for_other_workers


def search(
    recipe: str,
    options: SearchOptions = SearchOptions(),
    echo: Callable[[str], None] = print,
    early: TrialPool | None = None,
) -> SearchResult | None:
    """Run or resume the study for `recipe` and write its tuned file.

    Returns None when another searcher of the same study wrote the tuned file (this one waits until it has), or
    when the options ask for no tuned file (a `--gpus` searcher's).
    `early`: trial processes the command line started before importing torch;
    adopted if they suit this search, stopped either way.
    """
    quiet_optuna()
    try:
        setup = _setup(recipe, options, echo)
    except BaseException:
        if early is not None:
            early.stop()  # its unused processes go, leaving no file
        raise
    return run_steps(setup, SearchPools(setup, early))


def run_steps(setup: Setup, pools: SearchPools, team: Team = SOLO) -> SearchResult | None:
    """The trials, then, for the one searcher that writes, the finalists and the tuned file; stops `pools`."""
    marks: dict[str, float] = {"trials_from": setup.elapsed()}  # where the budget went (autotune.study.clock.spent)
    try:
        stored = _stored_end(setup, team)
        check, budget_ended = _trials(setup, pools, team, marks) if stored is None else (None, False)
        marks["trials_to"] = setup.elapsed()
        if not setup.options.write_tuned_file:
            return None
        with _writer_claim(setup) as claimed:
            if not claimed:
                return None
            # A trial this run finished makes a stored end stale (ending.key): then it is measured afresh.
            ended = stored or ending.load(setup)
            if ended is not None:
                chosen, results, check = ended
                setup.echo(REUSED)
            else:
                chosen, results, check = _finalists(setup, pools, team, check, budget_ended, marks)
                ending.save(setup, chosen, results, check)  # a failed write loses none of it
            written = _write(setup, chosen, results, check, marks)
            ending.clear(setup)
            kept_check.clear(setup)
            standing.clear(setup.study)  # the next run of the same command judges every family afresh
            return written
    except KeyboardInterrupt:
        pools.kill()
        raise
    except AutotuneError:
        raise
    except Exception as exc:
        failure = storage_errors.explain(exc, setup.storage_url, setup.study_name)
        if failure is None:
            raise
        raise failure from exc
    finally:
        pools.stop()


REUSED = ("finalists: reusing the parity verdicts and rounds of the run whose tuned file was not written; nothing is "
          "measured again")


def _stored_end(setup: Setup, team: Team = SOLO) -> ending.Ended | None:
    """The end a run measured but could not write, when this run writes it without running a trial.

    Only a search that runs alone on its study: under --gpus, or while another searcher's trial runs, other
    processes measure trials beside it, and its end is then measured afresh from all of them.
    """
    if not setup.options.write_tuned_file or team.round_devices or sharing.running(setup.study):
        return None
    return ending.load(setup)


def _setup(recipe: str, options: SearchOptions, echo: Callable[[str], None]) -> Setup:
    prepared = prepare(recipe, options, echo)
    announce(prepared)
    setup = open_study(prepared)
    trials = setup.study.get_trials(deepcopy=False)
    done, total = len(sharing.finished(trials)), tickets.target(setup.study, options.trials)
    if done and _stored_end(setup) is not None:
        echo(f"resuming study {setup.study_name!r}: {done} trial(s) already finished; its tuned file was not written, "
             f"so this run writes it from them and runs no trial")
    elif done:
        echo(f"resuming study {setup.study_name!r}: {done} trial(s) already finished, {max(0, total - done)} to go")
    return setup


def _trials(setup: Setup, pools: SearchPools, team: Team, marks: dict[str, float] | None = None
            ) -> tuple[ParityCheck | None, bool]:
    """Take tickets until none is left; the writer then waits for the other searchers' last trials.

    Returns the parity check the writer began while it waited (under --gpus), if any, and whether the time budget
    ended the trials. `marks`: where the plan's and the check's seconds are kept, for the budget's line.
    """
    writes = setup.options.write_tuned_file
    if team.round_devices and writes:
        pools.prestart_rounds()  # under --gpus, the other devices' round processes start beside the first trials
    learned = run_trials(setup, pools.trials, team=team if writes else SOLO)
    if marks is not None:
        marks["plan"] = learned.plan_s
        check = learned.families.check
        marks["parity_in_trials"] = check.budget.seconds - check.budget.carried_s if check is not None else 0.0
    # How much was searched: configs valued from their parts, measured end to end, families judged.
    setup.echo(learned.valuation.summary())
    earlier = sum(t.user_attrs.get("role") == tickets.VALUED_ROLE for t in setup.study.get_trials(deepcopy=False))
    if earlier and learned.valuation.valued == 0:  # a resumed search: its plan was an earlier run's
        setup.echo(f"  (this run valued none; the study holds {earlier} config(s) an earlier run's plan valued)")
    if setup.options.parity_check:
        setup.echo(learned.families.summary())
    if learned.loader is not None and (learned.loader.skipped or learned.loader.wrong):
        setup.echo(learned.loader.summary())
    too_large = memory.summary(str(t.user_attrs.get("reason") or "") for t in setup.study.get_trials(deepcopy=False))
    if too_large:
        setup.echo(too_large)
    if not writes:
        return None, learned.budget_ended
    if setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        pools.prestart_rounds()  # no round runs without a complete trial: the search ends saying why
    began: list[ParityCheck | None] = []

    def check_while_waiting() -> None:
        # Under --gpus, idle time for the check; none is left to make where the trials judged the families already.
        if team.round_devices and setup.options.parity_check and learned.families.check is None:
            began.append(check_early(setup, pools, team))

    wait_for_other_workers(setup, pools.trials, learned, check_while_waiting)
    # The verdicts made during the trials stand.
    return (began[0] if began else learned.families.check), learned.budget_ended


@contextlib.contextmanager
def _writer_claim(setup: Setup) -> Iterator[bool]:
    """Hold the writer's role while the block runs; False once another searcher of this round wrote the tuned file.

    While another searcher holds the role this one waits, and takes it over if that searcher's heartbeat stops: a
    rerun within the grace period of a killed writer must not end (exit 0) without a tuned file.
    """
    interval, grace = sharing.heartbeat_settings()
    claim, holder = wait_for_writer(setup.study, setup.storage, setup.started_at, interval, grace, setup.echo)
    if claim is None:
        setup.echo(f"study {setup.study_name!r} is done; searcher {holder['owner']} wrote {holder.get('path')}")
        yield False
        return
    gone = claim.replaced
    if gone is not None and gone.get("state") == "running":  # a failed writer said why when it failed
        silent = time.time() - float(gone.get("beat", 0))
        setup.echo(f"taking over the writer's role from searcher {gone.get('owner')}: no heartbeat for {silent:.0f} s")
    try:
        with claim.heartbeat():
            yield True
    except BaseException as exc:
        with contextlib.suppress(Exception):
            claim.failed(f"{type(exc).__name__}: {exc}")
        raise
    claim.done(str(setup.ref.tuned_path))


def _finalists(
    setup: Setup, pools: SearchPools, team: Team, check: ParityCheck | None, budget_ended: bool = False,
    marks: dict[str, float] | None = None,
) -> tuple[list[Config], Results, ParityCheck | None]:
    chosen, check = finalists.choose(setup, pools, team, check)
    count = setup.options.rounds
    if chosen:
        setup.echo(
            f"finalists: measuring {len(chosen)} config(s) against the baseline, {count} round(s), fresh processes"
        )
    elif (why := answer.kept(setup.study)) is not None:
        # Faster configs ran, but none may win: the workload's own settings are the answer, at a speed-up of 1.
        setup.echo(f"keeping the workload's own settings: {why}; measuring them, {count} round(s), fresh processes")
    else:
        # Nothing beat the workload's own settings: they are the result, at a speed-up of 1.
        within = f" in the {taken(setup)} trial(s) the time budget left room for" if budget_ended else ""
        setup.echo(f"no config ran faster than the baseline{within}; measuring it, {count} round(s), fresh processes")
    team.before_rounds()
    marks = marks if marks is not None else {}
    marks["rounds_from"] = setup.elapsed()
    measured = rounds.measure_rounds(setup, pools, chosen)
    marks["rounds_to"] = setup.elapsed()
    return chosen, measured, check


def _write(
    setup: Setup, chosen: list[Config], results: Results, check: ParityCheck | StoredCheck | None,
    marks: dict[str, float] | None = None,
) -> SearchResult:
    best = profile.winner(setup, chosen, results)
    marks = dict(marks or {})
    if isinstance(check, ParityCheck):  # a stored end's check cost this run nothing
        marks["parity"] = check.budget.seconds - check.budget.carried_s
    written = profile.write(setup, best, results, check, spent.of(setup.options.time_budget_s, setup.elapsed(), marks))
    keep_rounds(setup, best, chosen, results, written)
    return written


ROUNDS_ATTRIBUTE = "rounds"  # the study's user attribute `autotune report` states the winner's speed-up from


def keep_rounds(setup: Setup, best: Config, chosen: list[Config], results: Results, written: SearchResult) -> None:
    """Keep the rounds on the study: the report then states the tuned file's speed-up from the same numbers.

    A trial measures its config once, the baseline's trial too; only the rounds measure each finalist beside
    the baseline, in one run, so only they state a speed-up.
    """
    made = written.profile
    setup.study.set_user_attr(ROUNDS_ATTRIBUTE, {
        "winner": best.describe(),
        "baseline": setup.baseline.describe(),
        "samples_per_s": made["samples_per_s"],
        "baseline_samples_per_s": made["baseline_samples_per_s"],
        "speedup": made["speedup"],
        "spread": made["spread"],
        "tuned_file": str(written.tuned_path),
        "configs": [
            {"config": c.describe(), "samples_per_s": [r["samples_per_s"] for r in results[c]]}
            for c in dict.fromkeys([setup.baseline, *chosen])
        ],
    })


def quiet_optuna() -> None:
    logging.getLogger("optuna").setLevel(logging.ERROR)
    # Heartbeats and grouped TPE are marked experimental; they are what we rely on, on purpose.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
