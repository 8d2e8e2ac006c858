"""`autotune export`: a tuned file's settings in the terms of Hugging Face, Lightning or plain PyTorch."""

from __future__ import annotations

import warnings
from typing import Any

import click

from autotune.text import printable


@click.command(
    "export",
    epilog="\b\nExamples:\n  autotune export --recipe mnist_cnn --to hf\n"
    "  autotune export --recipe mnist_cnn --to lightning --hardware 'NVIDIA H200'\n"
    "  autotune export --recipe mnist_cnn --to torch --storage sqlite:///.autotune/mnist_cnn.db\n"
    "  autotune export --recipe results/mnist_cnn.tuned.toml --to hf",
)
@click.option("--recipe", required=True, help="A recipe name or path (its tuned file is read), or a .tuned.toml file.")
@click.option("--to", "target", required=True, type=click.Choice(["hf", "lightning", "torch"]),
              help="hf: TrainingArguments; lightning: Trainer and DataLoader arguments; torch: DataLoader and loop.")
@click.option("--hardware", help="One profile (a GPU's name, or cpu); default: every profile in the file.")
@click.option("--storage", help="The study's Optuna storage URL, for what the knobs a framework lacks are worth; "
              "default: the search's own SQLite file in ./.autotune, when it is there.")
def export(recipe: str, target: str, hardware: str | None, storage: str | None) -> None:
    """Print the tuned settings in a framework's own terms, and what it cannot express."""
    from autotune.errors import AutotuneError
    from autotune.study.shared.storage import open_storage
    from autotune.tuned.export import export as export_recipe
    from autotune.tuned.export import render

    def opened(url: str) -> Any:
        import optuna

        with warnings.catch_warnings():  # heartbeats are what the search relies on, not the reader's concern
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return open_storage(url, create=False)

    try:
        # Opened as search and report open it: a URL that cannot be opened is one error line and exit status 2; so is
        # the search's own file, when no --storage names one: a damaged one is refused, not passed over.
        given = opened(storage) if storage is not None else None
        items = export_recipe(recipe, target, hardware, given, open_local=opened)
    except AutotuneError:
        raise  # an outcome (a tuned file that cannot be read): one line, from the command group
    except ValueError as exc:  # an option's value the file cannot serve (a --hardware it has no profile for)
        raise click.UsageError(printable(str(exc))) from None
    click.echo(printable("\n\n".join(render(item) for item in items)))
