"""`autotune show`: a tuned file's profiles as a table."""

from __future__ import annotations

from pathlib import Path

import click

from autotune.text import printable


@click.command(
    epilog="\b\nExamples:\n  autotune show --recipe mnist_cnn\n  autotune show --recipe ./recipes/mine.tuned.toml"
)
@click.option("--recipe", required=True, help="A recipe name or path, or a .tuned.toml file.")
def show(recipe: str) -> None:
    """Print a tuned file's profiles as a table."""
    from autotune.tuned.file import TunedFileError, read
    from autotune.tuned.show import render
    from autotune.workloads import resolve

    # A .tuned.toml path says whose it is; a recipe's own tuned file must be that recipe's.
    ref = None if recipe.endswith(".toml") else resolve(recipe)
    path = Path(recipe) if ref is None else ref.tuned_path
    if not path.exists():
        raise TunedFileError(f"no tuned file at {path}: run `autotune search --recipe {recipe}` first.")
    click.echo(printable(render(read(path, None if ref is None else ref.name), path)))
