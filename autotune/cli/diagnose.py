"""`autotune diagnose`: health check and bottleneck attribution of a workload's loop."""

from __future__ import annotations

import click

from autotune.text import printable

EPILOG = """\b
Examples:
  autotune diagnose --recipe mnist_cnn
  autotune diagnose --recipe mnist_cnn --profile      # the tuned profile for this machine
  autotune diagnose --recipe ./my_workload.py --device 1
"""


@click.command(epilog=EPILOG)
@click.option("--recipe", required=True, help="A name in ./recipes, a path to a workload .py file, or a built-in name.")
@click.option(
    "--profile",
    is_flag=True,
    help="Diagnose the tuned profile for this machine instead of the workload's own settings.",
)
@click.option(
    "--device", "device_index", default=0, show_default=True, type=click.IntRange(min=0), help="CUDA device index."
)
def diagnose(recipe: str, profile: bool, device_index: int) -> None:
    """Health check and bottleneck attribution of a workload's loop: why the GPU waits, in under a minute."""
    from autotune.diagnosis.run import diagnose as run_diagnose
    from autotune.diagnosis.tables import render

    result = run_diagnose(
        recipe, profile=profile, device_index=device_index, echo=lambda line: click.echo(printable(line), err=True)
    )
    click.echo(printable(render(result)))
