"""Where a workload failed: what a DataLoader worker raised, and the line of the workload's own code that raised it.

A trial's failure reason is one line (``autotune.trial.runner.classify_failure``). The exception torch
re-raises from a worker reads "Caught ValueError in DataLoader worker process 0." with the worker's
traceback below it, and an error in the loop's own process names no place: these read the traceback
for the message and the innermost frame in the workload's file, not torch's, the standard library's or
autotune's machinery.
"""

from __future__ import annotations

import re
import sysconfig
import traceback
from pathlib import Path
from types import TracebackType

_AUTOTUNE = Path(__file__).resolve().parents[1]  # autotune/: its frames are not where a workload failed
_BUILTINS = _AUTOTUNE / "workloads" / "builtins"  # ... but the built-in workloads' are
_STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(: |$)")  # "ValueError: ...", "KeyError", "pkg.mod.Error: ..."


def worker_raised(text: str) -> str | None:
    """What a DataLoader worker raised, from the exception the loop re-raises (``Caught X in DataLoader worker
    process N.`` and the worker's traceback): its last line and the workload's line that raised it.

    The first line alone named the worker and the type, not the error: a data set with one corrupt row read
    "Caught ValueError in DataLoader worker process 0." where its trace said "could not convert string to float".
    """
    head, _, trace = text.partition("\nOriginal Traceback (most recent call last):\n")
    if not trace or not head.startswith("Caught "):
        return None
    lines = [line for line in trace.splitlines() if line.strip()]
    files = re.findall(r'^  File "([^"]+)", line (\d+)', trace, flags=re.MULTILINE)
    # The exception's own line, its type and message, searched from the end: a message of several lines (or notes)
    # ends the trace with its last line, which names no type.
    raised = next((line for line in reversed(lines) if EXCEPTION_LINE.match(line)), head)
    where_ = next((f" ({Path(f).name}, line {n})" for f, n in reversed(files) if _own(f)), "")
    # Only the message is cut: failures.py reads "in DataLoader worker process" to blame the loader's knobs.
    return f"{raised[:200]} in {head.removeprefix('Caught ').split(' in ', 1)[-1].rstrip('.')}{where_}"


def where(tb: TracebackType | None) -> str:
    """ " (file.py, line N)": the innermost frame of the traceback in the workload's code, not torch's or ours."""
    frames = [f for f in traceback.extract_tb(tb) if _own(f.filename)] if tb is not None else []
    return f" ({Path(frames[-1].filename).name}, line {frames[-1].lineno})" if frames else ""


def _own(filename: str) -> bool:
    """A file of the workload's (the user's, or a built-in one), not the standard library's, an installed
    package's (torch's) or autotune's own machinery."""
    path = Path(filename)
    if _BUILTINS in path.parents:  # a built-in workload, wherever autotune is installed
        return True
    if filename.startswith("<") or {"site-packages", "dist-packages"} & set(path.parts):
        return False
    if _STDLIB in path.parents:
        return False
    return _AUTOTUNE not in path.parents or _BUILTINS in path.parents
