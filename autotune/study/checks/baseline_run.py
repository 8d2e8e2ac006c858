"""The baseline's parity run made early, by a `--gpus` searcher, and kept in the study for the writer.

Under ``--gpus`` one searcher makes the parity check's baseline run before its
trials (even before the study is set up: it needs none), on its own GPU, while
the others take tickets; the search that writes then checks the finalists
without making it. Only that search takes it (the record carries its
``run_id``): a study resumed later, perhaps over edited workload code, makes
its baseline run again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from autotune.parity.run import PROBE_SAMPLES, probe_size
from autotune.parity.verdict import run_length
from autotune.procs.pool import TrialPool
from autotune.procs.trial_process import STARTUP_TIMEOUT_S
from autotune.study.context import Prepared, Setup
from autotune.study.shared import sharing

PARITY_TIMEOUT_FACTOR = 4  # a parity run trains about an epoch; a trial times a few seconds of it
ATTRIBUTE = "parity:baseline-run"  # the study's user attribute that holds it


def make(p: Prepared, pool: TrialPool) -> dict[str, Any]:
    """The baseline's parity run, sized for the space's largest batch; a record of it, or of why it failed."""
    lr = p.lr(p.baseline)
    largest = max(p.space.domains["batch_size"])
    samples, _ = run_length(p.baseline.batch_size, largest)
    extra = {} if probe_size(samples) == PROBE_SAMPLES else {"probe_samples": probe_size(samples)}  # as the check's
    outcome = pool.parity_run(
        p.baseline, lr, samples, p.baseline.batch_size, PARITY_TIMEOUT_FACTOR * p.options.trial_timeout_s, **extra
    )
    if outcome.state != "complete" or outcome.result is None:
        return {"run": p.options.run_id, "failed": outcome.reason or "no result", "searcher": sharing.owner()}
    return {
        "run": p.options.run_id,
        "config": p.baseline.as_dict(),
        "lr": lr,
        "samples": samples,
        "max_batch": largest,
        "searcher": sharing.owner(),
        "parity_run": outcome.result,
    }


def store(setup: Setup, record: dict[str, Any]) -> None:
    """Keep it in the study: a failure too, since the writer waits for one or the other."""
    setup.study.set_user_attr(ATTRIBUTE, record)
    if "failed" in record:
        setup.echo(f"parity: the baseline's run failed here ({record['failed']}); the writer makes it again")
        return
    setup.echo(
        f"parity: made the baseline's run for the check ({record['samples']:,} samples, "
        f"{record['parity_run']['seconds']:.1f} s) before taking trials"
    )


def _record(setup: Setup) -> dict[str, Any] | None:
    """What this search's searcher stored about the baseline's parity run: the run, or why it failed."""
    stored = setup.study.user_attrs.get(ATTRIBUTE)
    return (
        stored
        if setup.options.run_id and isinstance(stored, dict) and stored.get("run") == setup.options.run_id
        else None
    )


def stored(setup: Setup) -> dict[str, Any] | None:
    """The baseline's parity run a searcher of this very search stored in the study, if there is one."""
    record = _record(setup)
    if (
        record is not None
        and record.get("config") == setup.baseline.as_dict()
        and record.get("lr") == setup.lr(setup.baseline)
    ):
        return record
    return None


def wait_for(setup: Setup, pending: Callable[[], bool]) -> dict[str, Any] | None:
    """Wait for it while it may still come (`pending`: the searcher that makes it still runs).

    A few short trials can all end before that searcher has joined the study; its run is
    then seconds away, and one made here would take as long. The wait ends once the
    searcher has stored its run or why it failed, once it has ended, or after the longest
    its start-up and its run may take.
    """
    deadline = time.monotonic() + STARTUP_TIMEOUT_S + PARITY_TIMEOUT_FACTOR * setup.options.trial_timeout_s
    told = False
    while _record(setup) is None and pending() and time.monotonic() < deadline:
        if not told:
            setup.echo("parity: waiting for the baseline's run that a searcher makes before its trials")
            told = True
        time.sleep(0.1)
    return stored(setup)  # read again: the searcher may have stored it as it ended
