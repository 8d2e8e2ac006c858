"""The folders a search writes, checked before any process starts: one message for a folder that refuses them.

A search writes its study and the trial processes' logs under the state folder (``.autotune/``) and its tuned file
beside the workload (``recipes/``). Run from a folder that takes no new files, the trial processes started early
(``autotune.procs.early``) failed in a thread with a traceback, and the search then named ``recipes/``, which did
not exist. Checked first, the user reads which folder refuses what, once, and nothing has run.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from autotune.errors import AutotuneError


class FolderError(AutotuneError, OSError):
    """A folder the search must write to refuses new files; nothing was run."""


def nearest_existing(path: Path) -> Path:
    """`path` itself if it exists, else the nearest folder above it that does: where it would be made."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def refusal(folder: Path) -> OSError | None:
    """Why `folder` cannot take a new file (tried for real: root ignores mode bits, not a read-only mount or the
    immutable flag); None when it can."""
    try:
        if not folder.is_dir():
            return NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(folder))
        fd, tmp = tempfile.mkstemp(prefix=".autotune-", suffix=".check", dir=folder)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        return exc
    return None


def check_search_folders(state_dir: Path, tuned_path: Path) -> None:
    """Fail at once when the state folder cannot be made or written; say so together with the tuned file's folder
    when one folder refuses both. A tuned file's folder alone is checked by ``autotune.tuned.file.check_writable``,
    which says more about the tuned file."""
    needs = {
        state_dir.absolute(): f"{state_dir.name}/ (the study and the trial processes' logs)",
        tuned_path.parent.absolute(): f"{tuned_path.parent.name}/ (the tuned file, {tuned_path.name})",
    }
    by_folder: dict[Path, list[str]] = {}
    for needed, what in needs.items():
        by_folder.setdefault(nearest_existing(needed), []).append(what)
    state_at = nearest_existing(state_dir)
    exc = refusal(state_at)
    if exc is None:
        return
    what = " and ".join(by_folder[state_at])
    raise FolderError(
        f"autotune needs to write in {state_at}: {what}; {state_at} refuses new files ({exc.strerror or exc}). "
        f"Nothing was run: run the command from a folder you can write to, or make {state_at} writable."
    )
