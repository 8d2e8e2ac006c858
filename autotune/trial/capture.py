"""Why a CUDA graph capture failed: a host sync inside the step, named by its line in the workload.

A captured step may not wait for the GPU. ``.item()``, ``.cpu()``, ``.tolist()``,
``nonzero`` (it reads the size of its result on the host) and a Python branch on a
tensor (``if loss > 0:`` calls ``bool()``, which reads the value) all do. CUDA refuses
the wait while a stream captures: torch raises "CUDA error: operation not permitted
when stream is capturing" (cudaErrorStreamCaptureUnsupported) at the sync, then
``torch.cuda.graph``'s exit raises "operation failed due to a previous error during
capture" (cudaErrorStreamCaptureInvalidated) for the capture it could not end, with
the first as its context. The second is what reaches the trial and it hides the
cause, so this module reads the whole chain, and the first one's traceback for the
workload's line.

A capture that failed for another reason keeps the reason the rest of
``autotune.trial.runner.classify_failure`` gives it. No torch here: only the
exceptions' text and tracebacks are read.
"""

from __future__ import annotations

import re
import sys
import traceback
from collections.abc import Collection
from pathlib import Path

HOST_SYNC = "capture: host sync in the step"  # how such a reason starts; autotune.study.failed.hopeless keys on it
SYNC_WHILE_CAPTURING = ("operation not permitted when stream is capturing", "cudaErrorStreamCaptureUnsupported")
WORKLOAD_MODULE_PREFIX = "autotune_workload_"  # autotune.workloads.contract imports each workload under this prefix
MAX_CHAIN = 16  # exceptions followed through __cause__/__context__; a longer chain is not a capture's

# What on a line syncs, most specific first: (pattern, how the reason names it).
_SYNC_CALLS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\.item\s*\("), "`.item()`"),
    (re.compile(r"\.tolist\s*\("), "`.tolist()`"),
    (re.compile(r"\.cpu\s*\("), "`.cpu()`"),
    (re.compile(r"\.numpy\s*\("), "`.numpy()`"),
    (re.compile(r"\bnonzero\b|\bwhere\s*\([^,()]*\)"), "`nonzero`"),
    (re.compile(r"\bsynchronize\s*\("), "`synchronize()`"),
    (re.compile(r"^\s*(if|elif|while|assert)\b|\bbool\s*\(|\bif\b.*\belse\b"), "a Python branch on a tensor"),
)
_ANY_SYNC = "`.item()`, `.cpu()`, `.tolist()`, `nonzero` or a Python branch on a tensor"


def chain(exc: BaseException) -> list[BaseException]:
    """`exc`, then what caused it or was being handled when it was raised, outermost first."""
    found: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in found and len(found) < MAX_CHAIN:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def is_host_sync(exc: BaseException) -> bool:
    """A sync refused because a stream was capturing, anywhere in the exception's chain."""
    return any(_says_sync(e) for e in chain(exc))


def host_sync_reason(exc: BaseException, workload_files: Collection[Path] | None = None) -> str | None:
    """The reason for a capture that failed on a host sync in the step, or None if it failed otherwise.

    Names the innermost line of the workload (its file, or a .py file beside it that it imports)
    in the sync's traceback, and what on that line syncs, when it can.
    """
    syncs = [e for e in chain(exc) if _says_sync(e)]
    if not syncs:
        return None
    files = loaded_workload_files() if workload_files is None else workload_files
    folders = {Path(f).resolve().parent for f in files}
    for sync in reversed(syncs):  # the innermost (first raised) has the traceback through the step
        frame = _innermost_in(sync, folders)
        if frame is not None:
            code = (frame.line or "").split("  #")[0].strip()  # the code, not its comment
            return (
                f"{HOST_SYNC} ({_what_syncs(code)} at {frame.filename}, line {frame.lineno}: `{code}`): "
                f"a CUDA graph cannot wait for the GPU; move it out of the step, or leave cuda_graph off"
            )
    return (
        f"{HOST_SYNC} ({_ANY_SYNC}; no line of the workload in the traceback): a CUDA graph cannot wait "
        f"for the GPU; move it out of the step, or leave cuda_graph off"
    )


def loaded_workload_files() -> list[Path]:
    """The workload files imported in this process (a trial process imports one)."""
    return [
        Path(module.__file__)
        for name, module in list(sys.modules.items())
        if name.startswith(WORKLOAD_MODULE_PREFIX) and getattr(module, "__file__", None)
    ]


def _says_sync(exc: BaseException) -> bool:
    text = str(exc)
    return any(marker in text for marker in SYNC_WHILE_CAPTURING)


def _innermost_in(exc: BaseException, folders: set[Path]) -> traceback.FrameSummary | None:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if _resolved(f.filename).parent in folders]
    return frames[-1] if frames else None


def _resolved(filename: str) -> Path:
    try:
        return Path(filename).resolve()
    except (OSError, RuntimeError):
        return Path(filename)


def _what_syncs(line: str) -> str:
    for pattern, name in _SYNC_CALLS:
        if pattern.search(line):
            return name
    return f"a host sync ({_ANY_SYNC})"
