"""The `autotune` command: parse, call one library function, print. One file per subcommand."""

from __future__ import annotations

import sys

import click

from autotune.cli.diagnose import diagnose
from autotune.cli.export import export
from autotune.cli.report import report
from autotune.cli.search import search
from autotune.cli.show import show
from autotune.text import printable


class _Group(click.Group):
    """The command group; an ``AutotuneError`` from any command ends it as an outcome, not a usage mistake.

    A usage mistake (an option's value breaks its rule) gets click's usage banner. An error
    autotune states (a study file that cannot be read, a workload that fails to import, a
    search where even the baseline could not run) is one line saying what happened and what
    to do, exit status 2: the banner and "Try --help" would point at a typo that was not made.
    """

    def invoke(self, ctx: click.Context) -> object:
        from autotune.errors import AutotuneError

        try:
            return super().invoke(ctx)
        except AutotuneError as exc:
            click.echo(f"Error: {printable(str(exc))}", err=True)
            ctx.exit(2)


@click.group(cls=_Group)
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
