"""The writer's claim: which searcher of a study measures the finalists and writes the tuned file.

When no ticket is left and no trial runs, one searcher claims the role under the
study's lock; the others end. The claim is kept in the study's user attribute
``writer`` with a heartbeat, so a writer that dies is replaced once its
heartbeat stops. A searcher that finds the role held waits (``wait_for_writer``)
until the holder has written the tuned file or its heartbeat has stopped for
the grace period, and then takes the role over: a searcher that exits without
writing can say that the file is written, never that it will be.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import optuna

from autotune.study.shared.sharing import Heartbeat, owner, study_lock

# How often a waiting searcher looks for the writer's file: a read under the study's lock, cheap next to the
# heartbeat's 5 s, which would leave a peer idle for up to that long after the file is written.
WAIT_POLL_S = 0.5


class Claim:
    """This searcher's claim to measure the finalists and write the tuned file.

    Kept in the study's user attribute ``writer``: who holds it, its state
    (``running``, ``done``, ``failed``) and a heartbeat.
    """

    def __init__(self, study: optuna.Study, interval_s: int) -> None:
        self.study, self.interval_s = study, interval_s
        self.record: dict[str, Any] = {"owner": owner(), "state": "running", "since": time.time(), "beat": time.time()}
        self.replaced: dict[str, Any] | None = None  # the claim this one took over: its holder failed or went silent

    def save(self) -> None:
        self.study.set_user_attr("writer", self.record)

    def beat(self) -> None:
        current = self.study.user_attrs.get("writer", {})
        if current.get("owner") == self.record["owner"] and current.get("since") == self.record["since"]:
            self.record["beat"] = time.time()
            self.save()

    def heartbeat(self) -> Heartbeat:
        return Heartbeat(self.beat, self.interval_s)

    def done(self, path: str) -> None:
        self.record.update(state="done", done_at=time.time(), path=path, beat=time.time())
        self.save()

    def failed(self, reason: str) -> None:
        self.record.update(state="failed", reason=reason, beat=time.time())
        self.save()


def claim_writer(
    study: optuna.Study, storage: optuna.storages.RDBStorage, started_at: float, interval_s: int, grace_s: int
) -> tuple[Claim | None, dict[str, Any] | None]:
    """Claim the writer's role, or return who holds it (or already wrote this round's recipe).

    `started_at` is when this searcher started (time.time()): a recipe written after that
    came from this round, by a peer; one written before, from an earlier command, which
    this one redoes.
    """
    with study_lock(storage, study.study_name):
        current = study.user_attrs.get("writer")
        if current:
            live = current.get("state") == "running" and time.time() - current.get("beat", 0) <= grace_s
            this_round = current.get("state") == "done" and current.get("done_at", 0) >= started_at
            if live or this_round:
                return None, current
        claim = Claim(study, interval_s)
        claim.replaced = current if current and current.get("state") != "done" else None
        claim.save()
        return claim, None


def wait_for_writer(
    study: optuna.Study,
    storage: optuna.storages.RDBStorage,
    started_at: float,
    interval_s: int,
    grace_s: int,
    echo: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[Claim | None, dict[str, Any]]:
    """Claim the writer's role, waiting while another searcher holds it; or the record of the tuned file it wrote.

    Returns (claim, None) once this searcher holds the role, or (None, holder) once the
    holder wrote this round's file. A holder that died (killed with -9, its host
    gone) stops beating: within `grace_s` it is taken over. Ending while the holder
    still runs would report a file that may never come.
    """
    told = False
    while True:
        claim, holder = claim_writer(study, storage, started_at, interval_s, grace_s)
        if claim is not None:
            return claim, None
        assert holder is not None
        if holder.get("state") == "done":
            return None, holder
        if not told:
            silent = max(0.0, time.time() - float(holder.get("beat", 0)))
            echo(
                f"study {study.study_name!r}: searcher {holder.get('owner')} holds the writer's role (last heartbeat "
                f"{silent:.0f} s ago); waiting until it has written the tuned file, or for its heartbeat to stop for "
                f"{grace_s} s (AUTOTUNE_GRACE_S), then taking over"
            )
            told = True
        sleep(min(interval_s, WAIT_POLL_S))
