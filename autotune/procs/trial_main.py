"""A trial process's entry: forked from the fork server, it sets itself up, then serves requests.

Started by ``autotune.procs.trial_process.TrialProcess`` through the fork server
(``autotune.procs.lifecycle.fork``): the server imported torch once, so a trial
process starts in milliseconds, not in the seconds an import takes. This module
does the process's plumbing (its own process group, its environment and working
folder, its log, the parent watch, the exit); ``autotune.trial.serve`` does its
work. See the NOTE in ``autotune.procs.lifecycle`` for how it stops.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import sys
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any


def run(workload_path: str, device: str, cpu_share: int, requests: Connection, events: Connection,
        log_path: str, env: dict[str, str], cwd: str, launched: float) -> None:
    """The trial process's whole life; it ends with `os._exit`, never returning to the fork server's code."""
    os.setsid()  # its own process group: a kill reaches its DataLoader workers too
    # A forked child inherits the fork server's start method; the workload's DataLoader workers must start the
    # way a training script's do on Linux, by fork (a fork server could not import the workload's module).
    multiprocessing.set_start_method("fork", force=True)
    # Python hands a forked child the write end of the pipe whose EOF tells the fork server that the search
    # is gone; held here (and by our DataLoader workers), it would keep the server, and so us, alive forever.
    # The standard library keeps its number on the server object (CPython 3.10-3.13).
    alive_fd = getattr(multiprocessing.forkserver._forkserver, "_forkserver_alive_fd", None)
    if alive_fd is not None:
        with contextlib.suppress(OSError):
            os.close(alive_fd)
    from autotune.procs import lifecycle

    # The search may be killed outright: the fork server then ends, this process loses its parent, and nothing
    # it measures could be reported; it kills its own process group (itself and its DataLoader workers).
    if not lifecycle.watch_parent(lambda: os.killpg(0, signal.SIGKILL), os.getppid()):
        os._exit(1)
    try:
        os.chdir(cwd)
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:  # the search is already tidying up after itself (bad input found after the start)
        os._exit(1)
    os.environ.clear()
    os.environ.update(env)  # the search's environment now, not the fork server's when it started
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    sys.stderr.reconfigure(line_buffering=True)  # type: ignore[union-attr]

    def send(**event: Any) -> None:
        events.send_bytes(json.dumps(event).encode())

    def receive() -> dict[str, Any] | None:
        try:
            return json.loads(requests.recv_bytes())
        except EOFError:  # the search closed its end
            return None

    from autotune.trial.serve import serve

    code = 1
    try:
        code = serve(str(Path(workload_path)), device, cpu_share, send, receive, launched)
    finally:
        # After a failure, skip DataLoader/CUDA teardown that may hang after a fault; after a quit, the
        # interpreter's teardown (a second or more with torch loaded), which the search would wait for.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
