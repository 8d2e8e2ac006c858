"""The `autotune` command: parse, call one library function, print. One file per subcommand."""

from __future__ import annotations

import sys

import click

from autotune.cli.diagnose import diagnose
from autotune.cli.export import export
from autotune.cli.report import report
from autotune.cli.search import search
from autotune.cli.show import show


@click.group()
def main() -> None:
    """autotune: the fastest settings that still train correctly, for your training loop on this machine."""


for command in (search, show, diagnose, report, export):
    main.add_command(command)


def run() -> None:
    """`autotune` as a program: `main`, then an exit that skips the interpreter's teardown.

    SIGINT, SIGTERM and SIGHUP all stop a command as Ctrl-C does (exit status 130;
    see autotune.procs.lifecycle). Tearing the interpreter down, with torch loaded,
    would add about a second to every command's wall time (autotune.procs.lifecycle.exit_now).
    When `main` returns, each command has closed its files and waited for the processes
    it started; the process ends with main's exit status.
    """
    from autotune.procs.lifecycle import exit_now, stop_on_signals

    stop_on_signals()
    try:
        main()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    except KeyboardInterrupt:  # a stop signal outside a command's own handling (while parsing, importing)
        print("interrupted.", file=sys.stderr)
        code = 130
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)  # what Python does with a SystemExit that carries a message
        code = 1
    exit_now(code or 0)
