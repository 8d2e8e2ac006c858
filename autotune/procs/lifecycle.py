"""Starting and stopping autotune's processes: the one place that does either.

NOTE [ autotune's processes: who starts whom, and how each stops ]

Processes. ``autotune search`` (the *search*) starts:

- a *fork server* (Python's ``multiprocessing`` forkserver), once, that imports
  torch and then forks every trial process on request (``fork``). Importing
  torch and torchvision takes seconds in every process (7 s on a GPU host); a
  fork takes milliseconds. The server never touches CUDA, so each trial process
  starts with a fresh CUDA context and a fresh cuDNN plan cache;
- *trial processes* (``autotune.procs.trial_main``), forked by the server for a
  ``TrialPool`` (``autotune.procs.pool``): each measures configs and makes
  parity runs on one device, one request at a time (``autotune.trial.serve``),
  and may start DataLoader workers of its own. It starts a new session, so its
  process group holds it and its DataLoader workers, and one signal to the
  group reaches them all;
- under ``--gpus``, one *searcher* (``python -m autotune.study.gpus.searcher_main``) per
  GPU but the first (``autotune.procs.searchers``); a searcher starts trial
  processes of its own, exactly as the search does;
- some of both *early*, before the search imports torch (``autotune.procs.early``):
  the first trial processes and the searchers. The search adopts them if its
  guess of the device was right, and stops them if not.

Stopping. Three verbs, one meaning each, on every handle (a process, a pool,
the searchers, what was started early):

- ``ask_to_exit()``: ask, and return at once. A trial process reads ``quit``
  on its request pipe; a searcher gets its stdin closed or SIGTERM;
- ``stop()``: ask, wait up to a deadline, then kill. ``stop_all`` asks every
  handle first and then waits for each, so their exits (each a CUDA context torn
  down, about a second) overlap instead of following one another;
- ``kill()``: SIGKILL now, to the whole process group of a trial process
  (its DataLoader workers too). Used after a failed trial (a CUDA context that
  saw an error is not trusted again), a timeout, or an interrupted measurement.

The command line and a searcher end through ``exit_now``: no interpreter teardown
(a second with torch loaded), and their fork server is ended first
(``end_fork_server``), since its own teardown would hold their stdout open.

Signals. SIGINT, SIGTERM and SIGHUP mean the same to every autotune process
(``stop_on_signals``): stop as Ctrl-C does. The search gives its running trial
back to the study, stops its processes and exits with status 130. A searcher does
the same and exits 130; before it joined the study, it has nothing to give
back, and ends quietly.

When a parent dies. Every child watches its parent (``watch_parent``): a thread
polls ``os.getppid()``. The fork server ends when the process that started it
does (Python's forkserver reads EOF from a pipe only that process holds), so a
trial process, whose parent is the server, loses it then and kills its own
process group at once: nothing it measures can be reported. A searcher that
loses its parent stops as if sent SIGTERM, giving its trial back. Not
PR_SET_PDEATHSIG: it fires when the parent's *thread* that started the child
ends, and finalist rounds start trial processes from searcher threads. A search
killed outright (SIGKILL) leaves its running trial RUNNING in the study; its
heartbeat stops, and after a grace period any searcher, or the same command run
again, fails it as ``interrupted`` and queues its config again
(``autotune.study.shared.sharing``).
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn, Protocol

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PARENT_POLL_S = 0.5  # how often a child looks for its parent
# What the fork server imports before it forks anything: what every trial process needs. A module that is not
# installed is skipped. Nothing here may initialise CUDA: a forked child could not use it. torch._dynamo: the first
# optimizer a process builds imports it (torch.optim.Optimizer.__init__ is wrapped by torch._disable_dynamo), a
# second or more of one core in every trial process otherwise.
FORK_SERVER_PRELOAD = ["torch", "torch._dynamo", "numpy", "autotune.trial.serve", "autotune.trial.runner",
                       "autotune.parity.run", "autotune.procs.trial_main"]
_FORK = multiprocessing.get_context("forkserver")


class Stoppable(Protocol):
    def ask_to_exit(self) -> None: ...

    def stop(self) -> None: ...


def spawn(
    module: str,
    args: Sequence[str],
    *,
    env: dict[str, str],
    stdout: int | IO[bytes],
    pass_fds: tuple[int, ...] = (),
    own_group: bool = False,
) -> subprocess.Popen[bytes]:
    """Start ``python -m module args...`` with a pipe on its stdin; the only place autotune starts a process.

    `own_group`: a new session, so `kill` reaches the process and everything it started.
    """
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdin=subprocess.PIPE,
        stdout=stdout,
        stderr=subprocess.STDOUT,
        pass_fds=pass_fds,
        env={**env, "AUTOTUNE_PARENT_PID": str(os.getpid()), "PYTHONUNBUFFERED": "1"},
        start_new_session=own_group,
    )


def start_fork_server(workload_path: Path | None = None) -> None:
    """Start the fork server now, if it is not running, so that it imports torch while this process works on.

    torchvision takes two seconds more to import: the server imports it too when the workload file names it
    (each trial process would otherwise import it again). The first start decides; later calls find it running.
    """
    preload = list(FORK_SERVER_PRELOAD)
    with contextlib.suppress(OSError):
        if workload_path is not None and "torchvision" in Path(workload_path).read_text(errors="replace"):
            preload.insert(1, "torchvision")
    _FORK.set_forkserver_preload(preload)
    multiprocessing.forkserver.ensure_running()


def end_fork_server() -> None:
    """End this process's fork server now, if it started one; call it once no trial process of it is left.

    Left alone, the server ends when this process does, then tears its interpreter down (a second or more with
    torch loaded) holding the stdout and stderr it inherited from this process: whoever reads those (a pipe into
    `tee`, the search reading a --gpus searcher's lines) waits that long for them to close. SIGTERM ends it at once.
    """
    pid = multiprocessing.forkserver._forkserver._forkserver_pid  # set by ensure_running; None if never started
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


def exit_now(code: int) -> NoReturn:
    """End this process with `code`, skipping the interpreter's teardown; its fork server ends first.

    With torch, torchvision and optuna loaded, tearing the interpreter down takes about a second (1.0-1.2 s
    measured on a 2-core CPU machine; 0.05 s of it the atexit handlers). Call it once everything this process
    started has been waited for and its files are closed: the atexit handlers still run (logging, DataLoader
    workers of `diagnose`), stdout and stderr are flushed, then the process ends with `code` (also when a reader
    closed the pipe before the last flush, where Python would exit with 120).
    """
    end_fork_server()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`autotune show | head`): nothing more can be said
            pass
    os._exit(code)


class Forked:
    """A process forked by the fork server, with the part of Popen's interface that `kill` and `wait_or_kill` use."""

    def __init__(self, target: Callable[..., None], args: tuple[Any, ...], workload_path: Path | None = None) -> None:
        start_fork_server(workload_path)
        self.process = _FORK.Process(target=target, args=args, daemon=False)
        self.process.start()
        self.pid: int = self.process.pid  # type: ignore[assignment]

    def poll(self) -> int | None:
        return None if self.process.is_alive() else self.process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
        return self.process.exitcode

    def kill(self) -> None:
        self.process.kill()


def fork(target: Callable[..., None], args: tuple[Any, ...], workload_path: Path | None = None) -> Forked:
    """Fork `target(*args)` from the fork server; `args` may hold multiprocessing Connections."""
    return Forked(target, args, workload_path)


def kill(proc: subprocess.Popen[bytes] | Forked, group: bool) -> None:
    """SIGKILL the process (and its process group, if it leads one), reap it, and wait for the group to go."""
    if proc.poll() is None:
        try:
            if group:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        except ProcessLookupError:  # not yet the leader of its group (it has just started): the process alone
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
    proc.wait()
    if group:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # workers of a leader that had already exited
        wait_group_gone(proc.pid, GROUP_GONE_S)


# How long a trial process's group may take to go once killed. Its DataLoader workers were forked from a
# process with a CUDA context and keep the device's files open: the driver gives the context's memory
# back only when the last of them has exited. A process started before that finds the GPU still full
# and fails oom (docs/measuring.md, "Faults").
GROUP_GONE_S = 10.0


def wait_group_gone(pgid: int, timeout_s: float) -> bool:
    """Wait until process group `pgid` has no live member (zombies hold no files); False at the deadline."""
    deadline = time.monotonic() + timeout_s
    while group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def group_members(pgid: int) -> list[int]:
    """The pids of process group `pgid` that are not zombies, read from /proc (none where there is no /proc)."""
    members = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:  # exited while we looked
                continue
            # After the command name's closing parenthesis: state, ppid, pgrp, ...
            state, _, pgrp = stat[stat.rindex(b")") + 2:].split()[:3]
            if int(pgrp) == pgid and state != b"Z":
                members.append(int(entry.name))
    return members


def wait_or_kill(proc: subprocess.Popen[bytes] | Forked, timeout_s: float, group: bool) -> None:
    """Wait up to `timeout_s` for an exit already asked for; kill the process if it is still there."""
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pass
    kill(proc, group)


def stop_all(handles: Iterable[Stoppable]) -> None:
    """Stop several handles: every one is asked to exit before any is waited for."""
    handles = list(handles)
    for handle in handles:
        handle.ask_to_exit()
    for handle in handles:
        handle.stop()


def wait_all(procs: Iterable[subprocess.Popen[bytes]], timeout_s: float | None) -> bool:
    """Wait until every process has ended; False if some still run at the deadline."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    procs = list(procs)
    while any(p.poll() is None for p in procs):
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def watch_parent(on_gone: Callable[[], None], parent: int | None = None) -> bool:
    """Call `on_gone` (from a thread) once this process's parent has died; False if it is gone already.

    The parent is `parent`, else the one named in AUTOTUNE_PARENT_PID (`spawn` sets it); without either,
    nothing is watched.
    """
    parent = parent if parent is not None else int(os.environ.get("AUTOTUNE_PARENT_PID", "0"))
    if not parent:
        return True
    if os.getppid() != parent:
        return False

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        on_gone()

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    return True


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def stop_on_signals() -> None:
    """SIGINT, SIGTERM and SIGHUP all stop this process as Ctrl-C does (a KeyboardInterrupt)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _interrupt)


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    """Ignore the stop signals while a hand-back must finish; a second Ctrl-C must not cut it short."""
    try:
        previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOP_SIGNALS}
    except ValueError:  # not the main thread: signals are not ours to change
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
