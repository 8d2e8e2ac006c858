"""CPU time of this process and of its child processes (DataLoader workers), Linux /proc first.

Two readings around a run, divided by its wall time, give the cores each side
kept busy. Where /proc is absent, the children's share is unknown (None) rather
than guessed: live workers are only visible there.

    For example::

        before = cpu_times(); run(); after = cpu_times()
        main_cores = (after.main_s - before.main_s) / wall_s
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterable
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class CpuTimes:
    main_s: float  # this process, all its threads (the pin-memory thread included); nanosecond clock
    children_s: float | None  # its child processes, live and already reaped; None where /proc is absent


def _proc_stat(pid: int | str) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # fields after the command name, which may hold spaces


def _process_cpu_s(pid: str) -> float | None:
    """CPU seconds of one process: its threads' schedstat nanoseconds, or stat's 10 ms ticks without schedstat."""
    total = 0.0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            total += int((task / "schedstat").read_text().split()[0]) / 1e9
        return total
    except (OSError, ValueError, IndexError):
        fields = _proc_stat(pid)
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") if fields else None  # utime, stime


def processes_cpu_s(pids: Iterable[int]) -> float | None:
    """CPU seconds of these processes, all their threads; None where one cannot be read (gone, or no /proc).

    A few reads a process, not a walk of /proc: cheap enough for a measurement to take at every window's edges,
    where the workers go on making batches meanwhile (docs/measuring.md has the timings).
    """
    total = 0.0
    for pid in pids:
        used = _process_cpu_s(str(pid))
        if used is None:
            return None
        total += used
    return total


def _live_children_s(pid: int) -> float | None:
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    total = 0.0
    ours = _cmdline(pid)
    for entry in proc.iterdir():
        if entry.name.isdigit():
            fields = _proc_stat(entry.name)
            # Its parent is us and it runs our command line: a DataLoader worker, forked from us (not a fork
            # server or a resource tracker that multiprocessing started with a command line of its own).
            if fields and int(fields[1]) == pid and _cmdline(int(entry.name)) == ours:
                total += _process_cpu_s(entry.name) or 0.0
    return total


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def cpu_times() -> CpuTimes:
    """CPU seconds so far; the difference of two readings over a wall time is cores busy."""
    t = os.times()
    live = _live_children_s(os.getpid())
    # A worker that exits is reaped by the DataLoader, and its time moves into children_user/system.
    return CpuTimes(time.process_time(), None if live is None else live + t.children_user + t.children_system)
