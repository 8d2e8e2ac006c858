from autotune.cli import run

run()
