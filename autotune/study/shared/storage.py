"""Opening a study's storage: SQLite for one host, PostgreSQL (any SQLAlchemy URL) for many.

Every storage gets heartbeats (``autotune.study.shared.sharing`` says why). SQLite serves
several searcher processes on one host once each transaction takes the file's
write lock at BEGIN; a network file system breaks SQLite's locks, so searchers on
several hosts need a database server.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import optuna

from autotune.study.shared import sharing, storage_errors
from autotune.study.shared.storage_errors import redact

SQLITE_BUSY_TIMEOUT_S = 60  # searchers on one host wait this long for the SQLite file's lock
CONNECT_TIMEOUT_S = 10  # an unreachable database server fails after this long, not TCP's minutes
SCHEMA_ATTEMPTS = 5  # searchers starting together on a new database: all but one lose the race to create its tables


def open_storage(url: str, create: bool = True) -> optuna.storages.RDBStorage:
    """An RDB storage with heartbeats, or a clear error for a URL that cannot be used.

    SQLite serves several searcher processes on one host: every transaction takes the
    file's write lock up front (BEGIN IMMEDIATE), so taking a ticket is atomic there
    as it is in PostgreSQL. It is no storage for searchers on several hosts.
    `create`: False for a command that reads a study (report, export): an SQLite file
    that is not there is an error, not a new empty database left behind.
    """
    interval, grace = sharing.heartbeat_settings()
    given, url = url, _with_driver(url)
    if not create and url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        path = url[len("sqlite:///") :].split("?")[0]
        if not Path(path).is_file():
            raise sharing.SharingError(
                f"cannot open study storage {redact(given)}: there is no file {path}; give the URL of the study's "
                f"storage (`autotune search` creates it)."
            )
    engine_kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if url.startswith("sqlite"):
        engine_kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_S}
    elif url.startswith("postgresql"):
        engine_kwargs["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_S}
    try:
        storage = _create(url, interval, grace, engine_kwargs)
    except ImportError as exc:
        raise sharing.SharingError(
            f"cannot open study storage {redact(given)}: its database driver is not installed; "
            f"for PostgreSQL: pip install 'autotune[postgres]'."
        ) from exc
    except Exception as exc:  # sqlalchemy raises many kinds; the user needs one line
        failure = storage_errors.explain(exc, given, "")
        if failure is not None and create:
            raise failure from exc
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise sharing.SharingError(f"cannot open study storage {redact(given)}: {first}{_next_step(url, exc)}") from exc
    if url.startswith("sqlite"):
        _serialise_sqlite(storage)
    return storage


def _create(url: str, interval: int, grace: int, engine_kwargs: dict[str, Any]) -> optuna.storages.RDBStorage:
    """The storage; searchers that create a new database's tables at the same moment collide once, then find them."""
    import sqlalchemy.exc

    for attempt in range(SCHEMA_ATTEMPTS):
        try:
            return optuna.storages.RDBStorage(
                url,
                heartbeat_interval=interval,
                grace_period=grace,
                heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=2),
                engine_kwargs=engine_kwargs,
            )
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError, sqlalchemy.exc.OperationalError) as exc:
            text = str(exc).lower()
            racing = isinstance(exc, sqlalchemy.exc.IntegrityError) or "already exists" in text or "locked" in text
            if not racing or attempt == SCHEMA_ATTEMPTS - 1:
                raise
            time.sleep(random.uniform(0.2, 1.0))
    raise AssertionError("unreachable")


def _next_step(url: str, exc: Exception) -> str:
    """What to do about a storage that cannot be opened, where the error says; "" where it does not."""
    import sqlalchemy.exc

    if url.startswith("sqlite:///") and isinstance(exc, sqlalchemy.exc.DatabaseError):
        text = str(exc)
        # SQLite's words for a file that is not (or no longer) a whole database: truncated, overwritten, another format.
        if "malformed" in text or "not a database" in text:
            path = url[len("sqlite:///") :]
            return (
                f"; the file is damaged or is not an SQLite database. Move it aside to start the study afresh "
                f"(mv {path} {path}.damaged), or give --storage and --study to keep it and use another."
            )
    return ""


def _with_driver(url: str) -> str:
    # We ship psycopg 3; SQLAlchemy's default PostgreSQL driver depends on its version.
    for plain in ("postgresql://", "postgres://"):
        if url.startswith(plain):
            return "postgresql+psycopg://" + url[len(plain) :]
    return url


def _serialise_sqlite(storage: optuna.storages.RDBStorage) -> None:
    """Make every SQLite transaction take the write lock at BEGIN (SQLAlchemy's documented recipe).

    By default pysqlite begins lazily: two processes can both read a ticket as WAITING
    and both move it to RUNNING. Taking the lock at BEGIN makes that read-then-write atomic.
    """
    import sqlalchemy

    @sqlalchemy.event.listens_for(storage.engine, "connect")
    def _no_implicit_begin(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @sqlalchemy.event.listens_for(storage.engine, "begin")
    def _begin_immediate(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    storage.engine.dispose()  # connections opened before the hooks would skip them
