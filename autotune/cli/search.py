"""`autotune search`: tune a workload's loader and loop knobs and write its tuned file."""

from __future__ import annotations

import shlex
import sys
from typing import Any

import click

from autotune.config import LR_RULES
from autotune.options import DEFAULT_TIME_BUDGET_S, SearchOptions
from autotune.text import printable

EPILOG = """\b
Examples:
  autotune search --recipe mnist_cnn
  autotune search --recipe mnist_cnn --trials 8 --time-budget 300
  autotune search --recipe mnist_cnn --fix batch_size=128 --fix num_workers=0..4
  autotune search --recipe mnist_cnn --gpus 0,1
  autotune search --recipe imagenet_resnet50 --cpus 5
  autotune search --recipe mnist_cnn --lr-scaling sqrt --no-parity-check
  autotune search --recipe ./my_workload.py --storage postgresql://user@db/autotune --study mine
"""


@click.command(epilog=EPILOG)
@click.option("--recipe", required=True, help="A name in ./recipes, a path to a workload .py file, or a built-in name.")
@click.option(
    "--trials",
    default=40,
    show_default=True,
    type=click.IntRange(min=1),
    help="Finished trials the study should hold (earlier runs count).",
)
@click.option("--time-budget", default=DEFAULT_TIME_BUDGET_S, show_default=True, type=click.FloatRange(min=0),
              help="Seconds the whole search aims to take: no trial starts once the time left would not cover the "
              "parity check and the finalists' rounds. 0: no limit but --trials.")
@click.option(
    "--fix",
    "fixes",
    multiple=True,
    metavar="KNOB=VALUE",
    help="Pin a knob (batch_size=128) or narrow it (num_workers=0..4, amp=off,bf16). Repeatable.",
)
@click.option("--storage", help="Optuna storage URL; default: an SQLite file in ./.autotune.")
@click.option("--study", "study_name", help="Study name; default: RECIPE@HARDWARE.")
@click.option(
    "--trial-timeout",
    default=90.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="Seconds one trial may take before it fails as a timeout; its measurement ends with the windows it has "
    "by 80% of them.",
)
@click.option(
    "--lr-scaling",
    default=None,
    type=click.Choice(LR_RULES),
    help="How the learning rate follows a new batch size. Default: by the workload's optimizer, linear for "
    "SGD-family ones, sqrt for adaptive ones (Adam, AdamW, Adadelta, Adagrad, RMSprop, ...). A batch size that "
    "fails the parity check at its rule's rate is tried at the gentler ones (sqrt, then none).",
)
@click.option(
    "--no-parity-check",
    "no_parity_check",
    is_flag=True,
    help="Let a config win without checking that it trains like the baseline.",
)
@click.option(
    "--device", "device_index", default=0, show_default=True, type=click.IntRange(min=0), help="CUDA device index."
)
@click.option(
    "--gpus",
    help="One searcher per GPU on this host, one study: `all` or indices such as 0,1. Each searcher gets "
    "cores/searchers CPU cores. Searchers on several hosts: run the same command on each with a PostgreSQL --storage.",
)
@click.option(
    "--finalists",
    default=3,
    show_default=True,
    type=click.IntRange(min=1),
    help="Best configs measured again against the baseline.",
)
@click.option(
    "--rounds",
    default=2,
    show_default=True,
    type=click.IntRange(min=1),
    help="Fresh processes each finalist is measured in.",
)
@click.option(
    "--cpus",
    type=int,
    help="Run the search on this many of the host's cores (trial processes and their DataLoader workers "
    "included), to tune for a host that will give the job fewer. Default: every core this process may use.",
)
def search(
    recipe: str,
    trials: int,
    time_budget: float | None,
    fixes: tuple[str, ...],
    storage: str | None,
    study_name: str | None,
    trial_timeout: float,
    lr_scaling: str | None,
    no_parity_check: bool,
    device_index: int,
    gpus: str | None,
    finalists: int,
    rounds: int,
    cpus: int | None,
) -> None:
    """Tune a workload's loader and loop knobs; write recipes/NAME.tuned.toml."""
    options = SearchOptions(
        trials=trials,
        time_budget_s=time_budget or None,
        fixes=_parse_fixes(fixes),
        storage=storage,
        study=study_name,
        trial_timeout_s=trial_timeout,
        lr_rule=lr_scaling,
        parity_check=not no_parity_check,
        device_index=device_index,
        finalists=finalists,
        rounds=rounds,
        command=shlex.join(["autotune", *sys.argv[1:]]),
        cpus=cpus,
    )
    if cpus is not None:
        _restrict_cpus(cpus)  # before any process starts: they inherit the cores
    _run(recipe, options, gpus)


def _say(line: str) -> None:
    click.echo(printable(line))  # a trial's failure reason may quote the workload's own text


def _parse_fixes(fixes: tuple[str, ...]) -> dict[str, Any]:
    """The --fix options by knob; a knob given twice with other values is bad input, not the last one winning."""
    from autotune.knobs import SpaceError
    from autotune.study.space.domains import parse_fix

    parsed: dict[str, Any] = {}
    try:
        for text in fixes:
            knob, values = parse_fix(text)
            if knob in parsed and parsed[knob] != values:
                raise SpaceError(f"--fix {knob} is given twice, with different values ({text!r} after "
                                 f"{knob}={','.join(map(str, parsed[knob]))}); give each knob once.")
            parsed[knob] = values
    except SpaceError as exc:
        raise click.UsageError(printable(str(exc))) from None
    return parsed


def _restrict_cpus(cpus: int) -> None:
    """Pin this process, and so every process it starts, to `cpus` cores; a count it cannot have is bad input."""
    from autotune.procs.cpus import CpusError, restrict

    try:
        restrict(cpus)
    except CpusError as exc:
        raise click.UsageError(str(exc)) from None


def _run(recipe: str, options: SearchOptions, gpus: str | None) -> None:
    """Start the trial processes (and the --gpus searchers) early, then search on one GPU or on several.

    Whatever was started is stopped on the way out, however the search ends.
    """
    from autotune.procs.early import StartedEarly, start_early
    from autotune.procs.folders import check_search_folders
    from autotune.procs.searchers import parse_gpus
    from autotune.workloads.locate import WorkloadError, resolve

    try:
        check_search_folders(options.state_dir, resolve(recipe).tuned_path)
    except WorkloadError:
        pass  # the search names a recipe it cannot find, with its own message
    early = start_early(recipe, options, gpus, echo=_say)  # before torch is imported: see autotune.procs.early
    try:
        import torch

        from autotune.study.gpus.parallel import search_parallel
        from autotune.study.run import search as run_search

        if gpus is not None:
            devices = parse_gpus(gpus, torch.cuda.device_count())
            if devices != early.devices:  # the guess without torch was wrong: start them again, for these
                early.stop()
                early = StartedEarly(early.options)
            search_parallel(
                recipe, early.options, devices, echo=_say, early=early.pool, searchers=early.searchers or None
            )
        else:
            run_search(recipe, options, echo=_say, early=early.pool)
    except KeyboardInterrupt:
        click.echo(
            "interrupted: finished trials are kept in the study; run the same command to resume. No tuned file was "
            "written.",
            err=True,
        )
        sys.exit(130)
    finally:
        early.stop()
