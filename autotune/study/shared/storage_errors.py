"""A study's storage that fails mid-search, named by its cause: no space left, a read-only file, a locked database.

Optuna wraps every failed commit in one ``StorageInternalError`` whose text guesses at "invalid data in the commit,
e.g. exceeding max length"; the cause is in the exception it was raised from (SQLite's or the database server's own
words). The search reads that chain and says what happened, where, that the finished trials are kept (each one was
committed when it finished), and what to do next.
"""

from __future__ import annotations

import errno
import os
import re
import resource
import shutil
from pathlib import Path

from autotune.errors import AutotuneError

# (words in the database's message or the errno, the cause as said to the user, what to do about it)
_CAUSES: tuple[tuple[tuple[str, ...], tuple[int, ...], str, str], ...] = (
    (("database or disk is full", "no space left", "file too large", "could not extend file"),
     (errno.ENOSPC, errno.EFBIG, errno.EDQUOT),
     "no space left: its disk, or this process's file-size limit (ulimit -f), cannot take more",
     "free space on that disk (or raise the limit), or give --storage another place for a new study"),
    (("attempt to write a readonly database", "read-only file system", "readonly database"),
     (errno.EROFS,),
     "the database is read-only",
     "make {where} writable (and its folder, where SQLite keeps its journal)"),
    (("database is locked", "lock timeout", "could not obtain lock"),
     (),
     "the database is locked by another process",
     "wait for the other search or program to finish, or stop it"),
    (("unable to open database file",),
     (errno.EACCES, errno.EPERM),
     "the database file cannot be opened for writing",
     "make {where} and its folder writable"),
)


class StorageFailure(AutotuneError, RuntimeError):
    """The study's storage refused a write; the finished trials are kept in it."""


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        orig = getattr(current, "orig", None)  # SQLAlchemy keeps the driver's exception here
        current = orig if isinstance(orig, BaseException) and orig not in seen else (
            current.__cause__ or current.__context__)
    return seen


def where_stored(url: str) -> str:
    """The SQLite file of `url`, else the URL with its password hidden."""
    if url.startswith("sqlite:///"):
        return str(Path(url[len("sqlite:///"):].split("?")[0]))
    return redact(url)


def _sqlite_io_cause(url: str) -> str:
    """What SQLite's bare "disk I/O error" most likely was, read off the file and its disk: SQLite says no more.

    A write past the process's file-size limit (``ulimit -f``) or onto a full disk, or a file that refuses writes.
    """
    if not url.startswith("sqlite:///"):
        return ""
    path = Path(where_stored(url))
    limit, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    size = path.stat().st_size if path.exists() else 0
    if limit != resource.RLIM_INFINITY and size + _SLACK_BYTES >= limit:
        return "file too large"
    if shutil.disk_usage(path.parent if path.parent.exists() else Path.cwd()).free < _SLACK_BYTES:
        return "no space left"
    if path.exists() and not os.access(path, os.W_OK):
        return "readonly database"
    return ""


_SLACK_BYTES = 1 << 20  # a transaction's pages and journal: a file this close to a limit cannot take one more


def _from_the_database(link: BaseException) -> bool:
    """Raised by the storage's layers (Optuna's storage, SQLAlchemy, the database's driver), not by other code."""
    return type(link).__module__.split(".")[0] in _DATABASE_MODULES


_DATABASE_MODULES = ("optuna", "sqlalchemy", "sqlite3", "psycopg2", "psycopg")


def explain(exc: BaseException, url: str, study_name: str) -> StorageFailure | None:
    """The failure `exc` stands for when the storage at `url` refused a write, with its cause; None for any other
    (an OSError of the tuned file's write is not the study's: a full disk there says so itself)."""
    chain = _chain(exc)
    if not any(_from_the_database(link) for link in chain):
        return None
    for link in chain:
        text = str(link).lower()
        if "disk i/o error" in text:
            text += " " + _sqlite_io_cause(url)
        code = getattr(link, "errno", None)
        for words, codes, cause, fix in _CAUSES:
            if any(w in text for w in words) or (code is not None and code in codes):
                where = where_stored(url)
                first = re.sub(r"^\([\w.]+\) ", "", (str(link).strip().splitlines() or [type(link).__name__])[0])
                what = f"the study {study_name!r} in {where}" if study_name else f"the study storage {where}"
                return StorageFailure(
                    f"{what} could not be written: {cause} ({first}). The trials that "
                    f"finished are kept in it; {fix.format(where=where)}, then run the same command again to resume."
                )
    return None


def redact(url: str) -> str:
    """The storage URL with its password hidden, fit to print."""
    return re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", url)
