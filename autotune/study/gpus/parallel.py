"""``autotune search --gpus 0,1``: one searcher process per GPU on this host, all sharing one study.

The search starts a searcher process (``python -m autotune.study.gpus.searcher_main``) for each GPU
but the first at once: importing torch and building the data set take a searcher
as long as they take the search, so both do it side by side. The search then
sets the study up once (hardware, CPU share, seeds, tickets) and tells each
searcher where it is; a searcher touches the study only after that. The search
prints the searchers' lines with a prefix and takes tickets itself on the first
GPU. One searcher first makes the baseline's parity run, so the check at the end
need not make it (it waits for it only if the trials all end first). When no
ticket is left and no trial runs, the search checks parity, measures the
finalists, their rounds side by side on the GPUs, and writes the tuned file:
one writer. Searchers on one host share its CPU cores: each gets ``cores // searchers``
for its DataLoader workers, and the profile records that share, which is what a
training run with one process per GPU has too.

The default SQLite study file serves the searchers of one host (its transactions
take the file's lock up front); searchers on several hosts need a database
server: ``--storage postgresql://...``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from autotune.options import SearchOptions
from autotune.procs import lifecycle
from autotune.procs.pool import TrialPool
from autotune.procs.searchers import GpusError, Searcher, device_labels, parallel_options, start_searchers, wait_for_end
from autotune.study.pools import SearchPools, Team
from autotune.study.profile import SearchResult
from autotune.study.run import quiet_optuna, run_steps
from autotune.study.setup import announce, open_study, prepare
from autotune.study.shared import sharing


def search_parallel(
    recipe: str,
    options: SearchOptions,
    devices: list[int],
    echo: Callable[[str], None] = print,
    early: TrialPool | None = None,
    searchers: list[Searcher] | None = None,
) -> SearchResult | None:
    """One searcher per device on this host against one study; this process is the first, and writes the tuned file.

    `early` and `searchers`, if given, were started early by the command line for these
    devices with these options (`autotune.procs.early`); this function owns them from here.
    For example, ``search_parallel("mnist_cnn", SearchOptions(trials=40), devices=[0, 1])``.
    """
    import torch

    if not devices:
        raise GpusError("--gpus names no device.")
    quiet_optuna()
    cores = len(os.sched_getaffinity(0))
    cuda = torch.cuda.is_available()
    labels = device_labels(devices, cuda)
    if searchers is None:
        options = parallel_options(options, devices)
        # Started first, they import and build the data set while this process does the same.
        searchers = start_searchers(recipe, options, devices, cuda, echo)
    try:
        prepared = prepare(recipe, options, echo)
        announce(prepared)
        setup = open_study(prepared)  # set up once, before any searcher joins: no two searchers race to create it
    except BaseException:
        lifecycle.stop_all([*searchers, *([early] if early is not None else [])])
        raise
    echo(
        f"{len(devices)} searchers share study {setup.study_name!r}, {setup.machine.cpu_share} of {cores} CPU cores "
        f"each; "
        f"this process is {labels[0]} and writes the tuned file once no trial runs"
    )
    for w in searchers:
        w.join_study(setup.storage_url, setup.study_name)
    maker = (
        searchers[0] if searchers and options.parity_check else None
    )  # start_searchers asked the first for the baseline's run

    def workers_ended() -> None:
        # No trial runs anywhere and the parity check is done: the searchers' processes go before the rounds are timed.
        wait_for_end(searchers)
        for w in searchers:
            if w.proc.returncode not in (0, None):
                echo(
                    f"{w.label} ended with exit status {w.proc.returncode} (its lines above say why); "
                    f"its trials stay in the study, and tickets it left were taken here"
                )

    team = Team(
        round_devices=tuple(f"cuda:{d}" if cuda else "cpu" for d in devices),
        baseline_run_pending=(lambda: maker.proc.poll() is None) if maker is not None else (lambda: False),
        before_rounds=workers_ended,
    )
    interrupted = False
    try:
        return run_steps(setup, SearchPools(setup, early, team), team)
    except KeyboardInterrupt:
        interrupted = True
        with lifecycle.signals_ignored():  # one Ctrl-C stops everything; a second must not cut the hand-back short
            lifecycle.stop_all(searchers)
        raise
    finally:
        if not interrupted and not sharing.running(setup.study):
            # The study is done (the check or the rounds may have failed): the searchers are ending by
            # themselves; a stop now would tell them to hand back a trial they do not have.
            wait_for_end(searchers)
        lifecycle.stop_all(searchers)  # a no-op for searchers that ended
