"""Many searchers, one study: tickets, heartbeats and a setup lock.

Searchers (processes on one host, or on many through PostgreSQL) share one Optuna
study. ``--trials`` is the study's target: each trial begins as a *ticket*, a
WAITING trial, queued under a lock as a searcher needs it (the seeds with their
configs first, the rest empty for the sampler to fill;
``autotune.study.shared.tickets``). A searcher takes a ticket by
moving it from WAITING to RUNNING, which the storage does atomically, so no
two searchers measure the same ticket and, with no ticket left, nobody starts a
surplus trial. A searcher that dies leaves its trial RUNNING with a heartbeat
that stops; after the grace period any searcher fails it as ``interrupted`` and
queues its config again, so nothing is lost and nothing waits forever.

When no ticket is left and no trial runs, one searcher claims the writer's role
(``autotune.study.shared.claim``) and measures the finalists and writes the tuned file.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import optuna
from optuna.exceptions import DuplicatedStudyError, UpdateFinishedTrialError
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import AutotuneError

INTERRUPTED = "interrupted"  # the reason every trial whose searcher stopped mid-trial starts with
LOCK_STALE_S = 60.0  # a setup lock held this long belongs to a dead searcher: setup takes milliseconds
LOCK_WAIT_S = 180.0


class SharingError(AutotuneError, RuntimeError):
    """The study's shared state cannot be used; the message says why and what to do."""


def heartbeat_settings() -> tuple[int, int]:
    """(interval, grace) in seconds: AUTOTUNE_HEARTBEAT_S and AUTOTUNE_GRACE_S, else 5 and 20.

    A live searcher touches its running trial every `interval`; a trial untouched for
    `grace` belongs to a dead searcher. Short values suit tests; long ones suit
    storages far away.
    """
    values: dict[str, int] = {}
    problems = []
    for name, default in (("AUTOTUNE_HEARTBEAT_S", 5), ("AUTOTUNE_GRACE_S", 20)):
        raw = os.environ.get(name, str(default))
        try:
            values[name] = int(raw)
            if values[name] < 1:
                raise ValueError
        except ValueError:
            problems.append(f"{name} must be a whole number of seconds >= 1, but got {raw!r}")
    if not problems and values["AUTOTUNE_GRACE_S"] <= values["AUTOTUNE_HEARTBEAT_S"]:
        problems.append(
            f"`AUTOTUNE_GRACE_S > AUTOTUNE_HEARTBEAT_S` must hold, but got "
            f"(AUTOTUNE_GRACE_S={values['AUTOTUNE_GRACE_S']}, AUTOTUNE_HEARTBEAT_S={values['AUTOTUNE_HEARTBEAT_S']})"
        )
    if problems:
        raise SharingError("; ".join(problems) + ".")
    return values["AUTOTUNE_HEARTBEAT_S"], values["AUTOTUNE_GRACE_S"]


def owner() -> str:
    """This searcher, as other searchers and the user see it."""
    return f"{socket.gethostname()}:{os.getpid()}"


# -- which trials count --------------------------------------------------------------------------


def retried_numbers(trials: list[FrozenTrial]) -> set[int]:
    """Trials that were interrupted and queued again: their retry stands for them."""
    numbers: set[int] = set()
    for t in trials:
        numbers.update(t.system_attrs.get("retry_history", []))
    return numbers


def counted(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The study's tickets: every trial but those interrupted and queued again."""
    retried = retried_numbers(trials)
    return [t for t in trials if t.number not in retried]


def finished(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    return [t for t in counted(trials) if t.state.is_finished()]


# -- the setup lock ------------------------------------------------------------------------------


@contextlib.contextmanager
def study_lock(storage: optuna.storages.BaseStorage, study_name: str) -> Iterator[None]:
    """Hold the study's lock: a second study named ``<study>#lock``, whose name is unique in any storage.

    Guards the few read-then-write steps that must not interleave between searchers:
    recording the hardware, queueing tickets, claiming the writer's role.
    """
    name = f"{study_name}#lock"
    me = owner()
    deadline = time.monotonic() + LOCK_WAIT_S
    first_seen: dict[int, float] = {}
    while True:
        try:
            lock_id = storage.create_new_study([StudyDirection.MINIMIZE], name)
            storage.set_study_user_attr(lock_id, "owner", me)
            break
        except DuplicatedStudyError:
            pass
        try:
            lock_id = storage.get_study_id_from_name(name)
            holder = storage.get_study_user_attrs(lock_id).get("owner", "?")
        except KeyError:  # released between our two calls
            continue
        seen = first_seen.setdefault(lock_id, time.monotonic())
        if time.monotonic() - seen > LOCK_STALE_S:
            # Held far longer than setup takes: its holder died holding it.
            with contextlib.suppress(KeyError):
                storage.delete_study(lock_id)
            continue
        if time.monotonic() > deadline:
            raise SharingError(
                f"study lock {name!r} is held by {holder}; if no autotune searcher runs, "
                f"delete that study (optuna delete-study --study-name {name!r}) and run again."
            )
        time.sleep(0.2)
    try:
        yield
    finally:
        with contextlib.suppress(KeyError):
            storage.delete_study(lock_id)


# -- tickets -------------------------------------------------------------------------------------


def queue_tickets(study: optuna.Study, target: int, seeds: list[dict[str, Any]]) -> int:
    """Queue tickets until the study holds `target`; seeds first, once. Call under the lock.

    Returns how many were queued. A study already holding `target` or more is left as it is.
    """
    trials = study.get_trials(deepcopy=False)
    queued = 0
    if not trials:
        for seed in seeds[:target]:
            study.enqueue_trial(seed["params"], user_attrs=seed["user_attrs"])
            queued += 1
    have = len(counted(trials)) + queued
    for _ in range(max(0, target - have)):
        # No params: the sampler fills the ticket in when a searcher takes it.
        study.enqueue_trial({}, user_attrs={"role": "search"})
        queued += 1
    return queued


def fail_stale(study: optuna.Study) -> None:
    """Fail the trials of dead searchers; the storage's callback queues each config again."""
    optuna.storages.fail_stale_trials(study)


class Ticket(NamedTuple):
    """A ticket taken: the trial to run, and its id in the storage (for its heartbeat)."""

    trial: optuna.Trial
    trial_id: int


def take_ticket(study: optuna.Study, storage: optuna.storages.RDBStorage) -> Ticket | None:
    """Take the next ticket, or None when none waits. The move to RUNNING is atomic in the storage."""
    fail_stale(study)
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    # Configs given back by interrupted trials first: they were due before the rest.
    for ticket in sorted(waiting, key=lambda t: (not t.system_attrs.get("retry_history"), t.number)):
        taken = take_waiting(study, storage, ticket)
        if taken is not None:
            return taken
    return None


def take_waiting(study: optuna.Study, storage: optuna.storages.RDBStorage, ticket: FrozenTrial) -> Ticket | None:
    """Move the waiting `ticket` to RUNNING; None when another searcher took it first."""
    ticket_id = trial_id(storage, study, ticket.number)
    try:
        if not storage.set_trial_state_values(ticket_id, state=TrialState.RUNNING):
            return None  # another searcher took it first
    except UpdateFinishedTrialError:
        return None
    # A heartbeat now, before anything can go wrong: a trial without one is never found stale.
    storage.record_heartbeat(ticket_id)
    return Ticket(optuna.Trial(study, ticket_id), ticket_id)


def trial_id(storage: optuna.storages.BaseStorage, study: optuna.Study, number: int) -> int:
    """The storage's id of the study's trial `number`, through the storage's public API."""
    return storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(study.study_name), number)


def requeue(study: optuna.Study, storage: optuna.storages.RDBStorage, trial: optuna.Trial, reason: str) -> None:
    """End a trial this searcher cannot finish as FAIL with `reason`, and queue its config again."""
    trial.set_user_attr("reason", reason)
    frozen = study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
    retry = storage.get_heartbeat_stale_trial_callback()
    if retry is not None:
        retry(study, frozen)


def running(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))


class Heartbeat:
    """Touch a trial (or the writer's claim) every interval from a thread, while a `with` block runs.

    A storage hiccup does not stop it: a missed beat is retried at the next one, and
    only a dead process lets the grace period run out.
    """

    def __init__(self, beat: Any, interval_s: float) -> None:
        self.beat, self.interval_s = beat, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            with contextlib.suppress(Exception):
                self.beat()

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
