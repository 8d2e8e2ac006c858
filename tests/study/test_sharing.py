"""Many searchers, one study: tickets, heartbeats, the lock and the writer's claim, on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune.study.shared import sharing
from autotune.study.shared.claim import WAIT_POLL_S, claim_writer, wait_for_writer
from autotune.study.shared.storage import open_storage

optuna.logging.set_verbosity(optuna.logging.ERROR)
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


def _take(study: optuna.Study, storage: optuna.storages.RDBStorage) -> optuna.Trial | None:
    ticket = sharing.take_ticket(study, storage)
    return None if ticket is None else ticket.trial


@pytest.fixture(params=["sqlite", "postgresql"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/study.db"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def study_name() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


def new_study(url: str, name: str) -> tuple[optuna.Study, optuna.storages.RDBStorage]:
    storage = open_storage(url)
    study = optuna.create_study(storage=storage, study_name=name, direction="maximize", load_if_exists=True)
    return study, storage


def test_top_up_queues_seeds_once_then_empty_tickets_to_the_target(storage_url: str, study_name: str) -> None:
    study, storage = new_study(storage_url, study_name)
    seeds = [
        {"params": {"x": 1}, "user_attrs": {"role": "baseline"}},
        {"params": {"x": 2}, "user_attrs": {"role": "seed"}},
    ]
    with sharing.study_lock(storage, study_name):
        assert sharing.queue_tickets(study, 5, seeds) == 5
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.WAITING] * 5
    assert [t.system_attrs["fixed_params"] for t in trials] == [{"x": 1}, {"x": 2}, {}, {}, {}]
    assert [t.user_attrs["role"] for t in trials] == ["baseline", "seed", "search", "search", "search"]
    with sharing.study_lock(storage, study_name):
        assert sharing.queue_tickets(study, 5, seeds) == 0  # a second searcher of the same study adds nothing
        assert sharing.queue_tickets(study, 7, seeds) == 2  # a larger --trials adds the difference, no seed again
    assert [t.system_attrs["fixed_params"] for t in study.get_trials()][2:] == [{}] * 5


def test_each_ticket_is_taken_by_exactly_one_searcher(storage_url: str, study_name: str) -> None:
    study, storage = new_study(storage_url, study_name)
    with sharing.study_lock(storage, study_name):
        sharing.queue_tickets(study, 30, [])
    taken: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def searcher(i: int) -> None:
        # Its own storage and connections, as another process has.
        mine, my_storage = new_study(storage_url, study_name)
        taken[i] = []
        try:
            while (trial := _take(mine, my_storage)) is not None:
                trial.suggest_int("x", 0, 100)
                mine.tell(trial, 1.0)
                taken[i].append(trial.number)
        except BaseException as exc:  # a ticket two searchers took: the second one's writes fail
            errors.append(exc)

    threads = [threading.Thread(target=searcher, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert sorted(n for numbers in taken.values() for n in numbers) == list(range(30)), (
        "every ticket once: none twice, none lost"
    )
    trials = study.get_trials()
    assert len(trials) == 30, "no surplus trial when the tickets run out"
    assert all(t.state == TrialState.COMPLETE for t in trials)


@pytest.mark.slow
@pytest.mark.steady  # in this process, on one thread, and mostly asleep: it may run beside the alone tests
def test_a_dead_searchers_trial_is_failed_and_its_config_queued_again(
    storage_url: str, study_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_S", "1")
    monkeypatch.setenv("AUTOTUNE_GRACE_S", "2")
    study, storage = new_study(storage_url, study_name)
    with sharing.study_lock(storage, study_name):
        sharing.queue_tickets(study, 2, [{"params": {"x": 7}, "user_attrs": {"role": "seed"}}])
    dead = _take(study, storage)
    assert dead is not None and dead.suggest_int("x", 0, 9) == 7
    dead.set_user_attr("reason", "interrupted: its searcher stopped")
    # The searcher dies here: no more heartbeats. Another searcher, later, takes the next ticket.
    time.sleep(3.5)
    other_study, other_storage = new_study(storage_url, study_name)
    retry = _take(other_study, other_storage)
    assert retry is not None
    frozen = {t.number: t for t in other_study.get_trials()}
    assert frozen[dead.number].state == TrialState.FAIL
    assert frozen[dead.number].user_attrs["reason"] == "interrupted: its searcher stopped"
    assert frozen[retry.number].system_attrs["retry_history"] == [dead.number]
    assert retry.suggest_int("x", 0, 9) == 7, "the retry measures the same config"
    trials = other_study.get_trials()
    assert sharing.retried_numbers(trials) == {dead.number}
    assert [t.number for t in sharing.counted(trials)] == sorted(n for n in frozen if n != dead.number)


def test_an_interrupted_trial_is_given_back(storage_url: str, study_name: str) -> None:
    study, storage = new_study(storage_url, study_name)
    with sharing.study_lock(storage, study_name):
        sharing.queue_tickets(study, 1, [])
    trial = _take(study, storage)
    assert trial is not None
    trial.suggest_int("x", 0, 9)
    sharing.requeue(study, storage, trial, "interrupted: stopped by SIGINT")
    first, second = study.get_trials()
    assert (first.state, first.user_attrs["reason"]) == (TrialState.FAIL, "interrupted: stopped by SIGINT")
    assert (second.state, second.params) == (TrialState.WAITING, first.params)
    assert sharing.counted([first, second]) == [second]


def test_the_study_lock_is_exclusive_and_a_dead_holders_lock_is_taken_over(
    storage_url: str, study_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, storage = new_study(storage_url, study_name)
    monkeypatch.setattr(sharing, "LOCK_WAIT_S", 0.5)
    with sharing.study_lock(storage, study_name):
        with pytest.raises(
            sharing.SharingError,
            match=rf"study lock '{study_name}#lock' is held by .+:{os.getpid()}; if no autotune searcher runs",
        ):
            with sharing.study_lock(storage, study_name):
                pass
    # A holder that died holding it: the lock study exists, nobody will delete it.
    storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], f"{study_name}#lock")
    monkeypatch.setattr(sharing, "LOCK_STALE_S", 0.3)
    monkeypatch.setattr(sharing, "LOCK_WAIT_S", 8.0)  # only the takeover lets it in, however slow its first look
    entered = threading.Event()

    def enter() -> None:
        with sharing.study_lock(storage, study_name):
            entered.set()

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join(timeout=10)
    assert entered.is_set()
    assert f"{study_name}#lock" not in optuna.get_all_study_names(storage), "released on exit"


def test_one_writer_per_round(storage_url: str, study_name: str) -> None:
    study, storage = new_study(storage_url, study_name)
    round_start = time.time()
    claim, holder = claim_writer(study, storage, round_start, interval_s=1, grace_s=30)
    assert claim is not None and holder is None
    peer, holder = claim_writer(study, storage, round_start, interval_s=1, grace_s=30)
    assert peer is None and holder is not None and (holder["owner"], holder["state"]) == (sharing.owner(), "running")
    claim.done("recipes/tiny.tuned.toml")
    late_peer, holder = claim_writer(study, storage, round_start, interval_s=1, grace_s=30)
    assert (
        late_peer is None
        and holder is not None
        and (holder["state"], holder["path"]) == ("done", "recipes/tiny.tuned.toml")
    )
    # The same command run again after that: a new round, a new writer.
    rerun, holder = claim_writer(study, storage, time.time() + 1, interval_s=1, grace_s=30)
    assert rerun is not None and holder is None
    rerun.failed("TunedFileError: cannot write")
    after_failure, _ = claim_writer(study, storage, round_start, interval_s=1, grace_s=30)
    assert after_failure is not None, "a failed writer leaves the role to the next searcher"


def test_a_dead_writer_is_replaced(storage_url: str, study_name: str) -> None:
    study, storage = new_study(storage_url, study_name)
    dead = {"owner": "elsewhere:1", "state": "running", "since": time.time() - 100, "beat": time.time() - 100}
    study.set_user_attr("writer", dead)
    claim, holder = claim_writer(study, storage, time.time() - 200, interval_s=1, grace_s=30)
    assert claim is not None and holder is None
    assert study.user_attrs["writer"]["owner"] == sharing.owner()


def test_a_searcher_waits_for_a_live_writer_until_it_has_written(storage_url: str, study_name: str) -> None:
    """Ending while the writer still works would say a file is written that may never come."""
    study, storage = new_study(storage_url, study_name)
    round_start = time.time()
    writer, _ = claim_writer(study, storage, round_start, interval_s=1, grace_s=30)
    assert writer is not None
    naps: list[float] = []

    def nap(seconds: float) -> None:  # the writer works through two of the waiting searcher's checks, then writes
        naps.append(seconds)
        writer.beat()
        if len(naps) == 2:
            writer.done("recipes/tiny.tuned.toml")

    lines: list[str] = []
    claim, holder = wait_for_writer(study, storage, round_start, 1, 30, lines.append, sleep=nap)
    assert claim is None and holder is not None and (holder["state"], holder["path"]) == (
        "done", "recipes/tiny.tuned.toml"
    )
    assert naps == [WAIT_POLL_S, WAIT_POLL_S] and len(lines) == 1, lines
    assert lines[0].startswith(f"study {study_name!r}: searcher {sharing.owner()} holds the writer's role")


@pytest.mark.parametrize(
    ("beat", "grace", "message"),
    [
        ("0", "20", "AUTOTUNE_HEARTBEAT_S must be a whole number of seconds >= 1, but got '0'."),
        ("5", "2.5", "AUTOTUNE_GRACE_S must be a whole number of seconds >= 1, but got '2.5'."),
        (
            "5",
            "5",
            "`AUTOTUNE_GRACE_S > AUTOTUNE_HEARTBEAT_S` must hold, but got (AUTOTUNE_GRACE_S=5, "
            "AUTOTUNE_HEARTBEAT_S=5).",
        ),
    ],
)
def test_heartbeat_settings_are_checked(beat: str, grace: str, message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_S", beat)
    monkeypatch.setenv("AUTOTUNE_GRACE_S", grace)
    with pytest.raises(sharing.SharingError) as info:
        sharing.heartbeat_settings()
    assert str(info.value) == message


@pytest.fixture(params=["sqlite", "postgresql"])
def fresh_storage_url(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A URL whose database has no tables yet."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/fresh.db"
        return
    url = request.getfixturevalue("postgres_url")
    import psycopg

    base, _, _ = url.rpartition("/")
    name = f"autotune_fresh_{uuid.uuid4().hex[:8]}"
    admin = url.replace("postgresql+psycopg://", "postgresql://", 1)
    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
    except psycopg.Error as exc:
        pytest.skip(f"cannot create a database on the test server: {exc}")
    yield f"{base}/{name}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def test_searchers_starting_together_on_a_new_database(fresh_storage_url: str) -> None:
    """Each creates the tables if they are missing; all but one collide, and retry."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def start() -> None:
        barrier.wait()
        try:
            open_storage(fresh_storage_url)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
