"""`autotune report`: the sensitivity map, history, importances and failures of a study."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from autotune.text import printable

EPILOG = """\b
Examples:
  autotune report --recipe mnist_cnn
  autotune report --recipe mnist_cnn --out docs/
  autotune report --recipe mnist_cnn --storage sqlite:///h200/.autotune/mnist_cnn.db --study mnist_cnn@nvidia-h200
"""


@click.command(epilog=EPILOG)
@click.option("--recipe", required=True, help="A recipe name or path, as given to `autotune search`.")
@click.option("--storage", help="Optuna storage URL; default: the SQLite file `autotune search` writes in ./.autotune.")
@click.option("--study", "study_name", help="Study name; default: the one study for this recipe in the storage, or of "
              "several the one the tuned file names.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for the figures and the report file; default: next to the tuned file (./recipes).",
)
@click.option(
    "--top", default=5, show_default=True, type=click.IntRange(min=1), help="Best configs to list beside the baseline."
)
def report(recipe: str, storage: str | None, study_name: str | None, out: Path | None, top: int) -> None:
    """Sensitivity map, history, importances and failures of a study, as tables, PNGs and one report file."""
    from autotune.reporting.study import render
    from autotune.reporting.study import report as run_report

    result = run_report(
        recipe,
        storage=storage,
        study=study_name,
        out=out,
        top=top,
        command=shlex.join(["autotune", *sys.argv[1:]]),
        echo=lambda line: click.echo(printable(line), err=True),
    )
    click.echo(printable(render(result)))
