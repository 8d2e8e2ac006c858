"""Processes: the environment a test's child runs in, and, read from /proc, what is left running after a kill."""

from __future__ import annotations

import os
import time
from pathlib import Path

REPO = Path(__file__).parents[1]


def child_env(**extra: str) -> dict[str, str]:
    """This environment with the checkout first on PYTHONPATH, keeping what was there (the dependencies may be)."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, process group) or None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[2])


def _all() -> dict[int, tuple[str, int, int]]:
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            found[int(entry.name)] = stat
    return found


def descendants(pid: int) -> set[int]:
    """Every live process below `pid`."""
    table = _all()
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        children = {p for p, (_, ppid, _) in table.items() if ppid in frontier and p not in found}
        found |= children
        frontier = children
    return found


def alive(pids: set[int]) -> set[int]:
    """The pids still running; a zombie has ended and only waits to be reaped."""
    return {p for p in pids if (stat := _stat(p)) is not None and stat[0] != "Z"}


def wait_gone(pids: set[int], timeout_s: float) -> set[int]:
    deadline = time.monotonic() + timeout_s
    while (left := alive(pids)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def running_with(text: str) -> set[int]:
    """Live processes whose command line mentions `text`."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.add(int(entry.name))
    return alive(found)


def wait_none_with(text: str, timeout_s: float) -> set[int]:
    deadline = time.monotonic() + timeout_s
    while (left := running_with(text)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left
