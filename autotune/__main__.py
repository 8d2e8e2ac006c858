"""`python -m autotune`: the `autotune` command, for a tree that is not installed."""

from autotune.cli import run

run()
