"""One `--gpus` searcher's search: prepare while the study is set up elsewhere, then take tickets in it.

Run in the searcher process (``autotune.study.gpus.searcher_main`` does its plumbing).
It prepares (workload, machine, space) and, if asked, makes the parity check's
baseline run while the search that started it sets the study up; then it joins
the study, takes tickets until none is left, and ends. The search that started
it writes the tuned file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from autotune.knobs import SpaceError
from autotune.options import SearchOptions
from autotune.procs.pool import TrialPool
from autotune.study.checks import baseline_run
from autotune.study.context import Prepared, SearchError
from autotune.study.pools import SearchPools
from autotune.study.run import quiet_optuna, run_steps
from autotune.study.setup import open_study, prepare
from autotune.tuned.file import TunedFileError
from autotune.workloads import WorkloadError

PROBLEMS = (WorkloadError, SpaceError, SearchError, TunedFileError)  # said in one line; the search meets them too


@dataclasses.dataclass(frozen=True)
class Ready:
    """A searcher prepared before it joins the study: what it knows, or why it cannot work."""

    prepared: Prepared | None
    problem: str | None
    baseline: dict[str, Any] | None  # the baseline's parity run, made if this searcher was asked to


def get_ready(recipe: str, options: SearchOptions, pool: TrialPool | None, echo: Callable[[str], None]) -> Ready:
    quiet_optuna()
    try:
        prepared = prepare(recipe, options, echo)
    except PROBLEMS as exc:
        return Ready(None, str(exc), None)
    record = None
    if (
        pool is not None
        and options.baseline_parity_first
        and options.parity_check
        and (pool.device, pool.cpu_share) == (prepared.device, prepared.machine.cpu_share)
    ):
        record = baseline_run.make(prepared, pool)  # needs no study: made while the study is set up
    return Ready(prepared, None, record)


def work(ready: Ready, storage_url: str, study_name: str, pool: TrialPool | None) -> None:
    """Join the study and take tickets until none is left."""
    assert ready.prepared is not None
    setup = open_study(ready.prepared, storage_url, study_name)
    pools = SearchPools(setup, pool)
    if setup.options.baseline_parity_first and setup.options.parity_check:
        baseline_run.store(setup, ready.baseline or baseline_run.make(setup, pools.trials))
    run_steps(setup, pools)
