"""The `autotune` command: parse, call one library function, print."""

from __future__ import annotations

import atexit
import os
import shlex
import sys
from pathlib import Path

import click

from autotune import recipe as recipe_file
from autotune.config import LR_RULES
from autotune.space import SpaceError, parse_fix
from autotune.workload import WorkloadError, resolve

EPILOG_SEARCH = """\b
Examples:
  autotune search --recipe mnist_cnn
  autotune search --recipe mnist_cnn --trials 8 --time-budget 300
  autotune search --recipe mnist_cnn --fix batch_size=128 --fix num_workers=0..4
  autotune search --recipe mnist_cnn --gpus 0,1
  autotune search --recipe mnist_cnn --lr-scaling sqrt --no-parity-check
  autotune search --recipe ./my_workload.py --storage postgresql://user@db/autotune --study mine
"""


def run() -> None:
    """`autotune` as a program: `main`, then an exit that skips the interpreter's teardown.

    With torch, torchvision and optuna loaded, tearing the interpreter down takes about
    a second (1.0-1.2 s measured on a 2-core CPU machine; 0.05 s of it the atexit
    handlers), which every command would add to its wall time. When `main` returns,
    each command has closed its files and waited for the processes it started; the
    atexit handlers still run (logging, DataLoader workers of `diagnose`), then the
    process ends with main's exit status (also when a reader closed the pipe before
    the last flush, where Python would exit with 120).
    """
    try:
        main()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)  # what Python does with a SystemExit that carries a message
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`autotune show | head`): nothing more can be said
            pass
    os._exit(code or 0)


def _fail(message: str) -> None:
    raise click.UsageError(message)


@click.group()
def main() -> None:
    """autotune: the fastest settings that still train correctly, for your training loop on this machine."""


@main.command(epilog=EPILOG_SEARCH)
@click.option("--recipe", required=True, help="A name in ./recipes, a path to a workload .py file, or a built-in name.")
@click.option("--trials", default=40, show_default=True, type=click.IntRange(min=1), help="Finished trials the study should hold (earlier runs count).")
@click.option("--time-budget", type=click.FloatRange(min=1), help="Seconds after which no new trial starts.")
@click.option("--fix", "fixes", multiple=True, metavar="KNOB=VALUE", help="Pin a knob (batch_size=128) or narrow it (num_workers=0..4, amp=off,bf16). Repeatable.")
@click.option("--storage", help="Optuna storage URL; default: an SQLite file in ./.autotune.")
@click.option("--study", "study_name", help="Study name; default: RECIPE@HARDWARE.")
@click.option("--trial-timeout", default=90.0, show_default=True, type=click.FloatRange(min=1), help="Seconds one trial may take before it fails as a timeout.")
@click.option("--lr-scaling", default="linear", show_default=True, type=click.Choice(LR_RULES), help="How the learning rate follows a new batch size.")
@click.option("--no-parity-check", "no_parity_check", is_flag=True, help="Let a config win without checking that it trains like the baseline.")
@click.option("--device", "device_index", default=0, show_default=True, type=click.IntRange(min=0), help="CUDA device index.")
@click.option("--gpus", help="One worker per GPU on this host, one study: `all` or indices such as 0,1. "
              "Each worker gets cores/workers CPU cores. Workers on several hosts: run the same command on each with a PostgreSQL --storage.")
@click.option("--finalists", default=3, show_default=True, type=click.IntRange(min=1), help="Best configs measured again against the baseline.")
@click.option("--rounds", default=2, show_default=True, type=click.IntRange(min=1), help="Fresh processes each finalist is measured in.")
def search(recipe: str, trials: int, time_budget: float | None, fixes: tuple[str, ...], storage: str | None,
           study_name: str | None, trial_timeout: float, lr_scaling: str, no_parity_check: bool, device_index: int, gpus: str | None,
           finalists: int, rounds: int) -> None:
    """Tune a workload's loader and loop knobs; write recipes/NAME.tuned.toml."""
    from autotune.ahead import Ahead, start_ahead
    from autotune.options import SearchOptions
    from autotune.scaleout import ScaleoutError, parse_gpus
    from autotune.sharing import SharingError

    parsed: dict = {}
    try:
        for text in fixes:
            knob, values = parse_fix(text)
            parsed[knob] = values
    except SpaceError as exc:
        _fail(str(exc))
    options = SearchOptions(
        trials=trials, time_budget_s=time_budget, fixes=parsed, storage=storage, study=study_name,
        trial_timeout_s=trial_timeout, lr_rule=lr_scaling, parity_check=not no_parity_check, device_index=device_index,
        finalists=finalists, rounds=rounds, command=shlex.join(["autotune", *sys.argv[1:]]),
    )
    ahead = start_ahead(recipe, options, gpus, echo=click.echo)  # before torch is imported: see autotune.ahead
    try:
        import torch

        from autotune.scaleout import search_parallel
        from autotune.search import SearchError
        from autotune.search import search as run_search

        if gpus is not None:
            devices = parse_gpus(gpus, torch.cuda.device_count())
            if devices != ahead.devices:  # the guess without torch was wrong: start them again, for these
                ahead.close()
                ahead = Ahead(options)
            search_parallel(recipe, ahead.options, devices, echo=click.echo, pool=ahead.pool, workers=ahead.workers or None)
        else:
            run_search(recipe, options, echo=click.echo, pool=ahead.pool)
    except (WorkloadError, SpaceError, SearchError, SharingError, ScaleoutError, recipe_file.RecipeError) as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        click.echo("interrupted: finished trials are kept in the study; run the same command to resume. No recipe was written.", err=True)
        sys.exit(130)
    finally:
        ahead.close()


@main.command(epilog="\b\nExamples:\n  autotune show --recipe mnist_cnn\n  autotune show --recipe ./recipes/mine.tuned.toml")
@click.option("--recipe", required=True, help="A recipe name or path, or a .tuned.toml file.")
def show(recipe: str) -> None:
    """Print a tuned recipe's profiles as a table."""
    from autotune.show import render

    try:
        path = Path(recipe) if recipe.endswith(".toml") else resolve(recipe).tuned_path
        if not path.exists():
            _fail(f"no tuned recipe at {path}: run `autotune search --recipe {recipe}` first.")
        click.echo(render(recipe_file.read(path), path))
    except (WorkloadError, recipe_file.RecipeError) as exc:
        _fail(str(exc))


EPILOG_DIAGNOSE = """\b
Examples:
  autotune diagnose --recipe mnist_cnn
  autotune diagnose --recipe mnist_cnn --profile      # the tuned profile for this machine
  autotune diagnose --recipe ./my_workload.py --device 1
"""


@main.command(epilog=EPILOG_DIAGNOSE)
@click.option("--recipe", required=True, help="A name in ./recipes, a path to a workload .py file, or a built-in name.")
@click.option("--profile", is_flag=True, help="Diagnose the tuned profile for this machine instead of the workload's own settings.")
@click.option("--device", "device_index", default=0, show_default=True, type=click.IntRange(min=0), help="CUDA device index.")
def diagnose(recipe: str, profile: bool, device_index: int) -> None:
    """Health check and bottleneck attribution of a workload's loop: why the GPU waits, in under a minute."""
    from autotune.diagnosis import DiagnoseError, render
    from autotune.diagnosis import diagnose as run_diagnose

    try:
        result = run_diagnose(recipe, profile=profile, device_index=device_index, echo=lambda line: click.echo(line, err=True))
    except (WorkloadError, DiagnoseError, recipe_file.RecipeError) as exc:
        _fail(str(exc))
    click.echo(render(result))


EPILOG_REPORT = """\b
Examples:
  autotune report --recipe mnist_cnn
  autotune report --recipe mnist_cnn --out docs/
  autotune report --recipe mnist_cnn --storage sqlite:///h200/.autotune/mnist_cnn.db --study mnist_cnn@nvidia-h200
"""


@main.command(epilog=EPILOG_REPORT)
@click.option("--recipe", required=True, help="A recipe name or path, as given to `autotune search`.")
@click.option("--storage", help="Optuna storage URL; default: the SQLite file `autotune search` writes in ./.autotune.")
@click.option("--study", "study_name", help="Study name; default: the one study for this recipe in the storage.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Folder for the figures and the report file; default: next to the recipe (./recipes).")
@click.option("--top", default=5, show_default=True, type=click.IntRange(min=1), help="Best configs to list beside the baseline.")
def report(recipe: str, storage: str | None, study_name: str | None, out: Path | None, top: int) -> None:
    """Sensitivity map, history, importances and failures of a study, as tables, PNGs and one report file."""
    from autotune.reporting import ReportError, render
    from autotune.reporting import report as run_report

    try:
        result = run_report(recipe, storage=storage, study=study_name, out=out, top=top,
                            command=shlex.join(["autotune", *sys.argv[1:]]), echo=lambda line: click.echo(line, err=True))
    except (WorkloadError, ReportError) as exc:
        _fail(str(exc))
    click.echo(render(result))
