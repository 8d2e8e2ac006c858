"""The `autotune` command: parse, call one library function, print. One file per subcommand."""

from __future__ import annotations

import atexit
import os
import sys

import click

from autotune.cli.diagnose import diagnose
from autotune.cli.report import report
from autotune.cli.search import search
from autotune.cli.show import show


@click.group()
def main() -> None:
    """autotune: the fastest settings that still train correctly, for your training loop on this machine."""


for command in (search, show, diagnose, report):
    main.add_command(command)


def run() -> None:
    """`autotune` as a program: `main`, then an exit that skips the interpreter's teardown.

    SIGINT, SIGTERM and SIGHUP all stop a command as Ctrl-C does (exit status 130;
    see autotune.procs.lifecycle). With torch, torchvision and optuna loaded, tearing
    the interpreter down takes about a second (1.0-1.2 s measured on a 2-core CPU
    machine; 0.05 s of it the atexit handlers), which every command would add to its
    wall time. When `main` returns, each command has closed its files and waited for
    the processes it started; the atexit handlers still run (logging, DataLoader
    workers of `diagnose`), then the process ends with main's exit status (also when a
    reader closed the pipe before the last flush, where Python would exit with 120).
    """
    from autotune.procs.lifecycle import stop_on_signals

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
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`autotune show | head`): nothing more can be said
            pass
    os._exit(code or 0)
