"""Tickets queued as the search needs them: a target, the seeds first, nothing left behind to overrule a later run."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune.study.shared import sharing, tickets
from autotune.study.shared.storage import open_storage

optuna.logging.set_verbosity(optuna.logging.ERROR)
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")

SEEDS = [{"params": {"x": 1}, "user_attrs": {"role": "baseline"}}, {"params": {"x": 2}, "user_attrs": {"role": "seed"}}]


def _study(tmp_path: Path, name: str = "s") -> tuple[optuna.Study, optuna.storages.RDBStorage]:
    storage = open_storage(f"sqlite:///{tmp_path}/study.db")
    return optuna.create_study(storage=storage, study_name=name, direction="maximize", load_if_exists=True), storage


def _run_all(study: optuna.Study, storage: optuna.storages.RDBStorage, default: int = 1) -> list[int]:
    """Take tickets until none is left, measuring each at once; the x each measured."""
    measured = []
    while (ticket := tickets.take(study, storage, default)) is not None:
        waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        assert waiting == [], "no ticket waits beyond the one just taken"
        measured.append(ticket.trial.suggest_int("x", 0, 100))
        study.tell(ticket.trial, 1.0)
    return measured


def test_seeds_are_queued_one_by_one_then_empty_tickets_up_to_the_target(tmp_path: Path) -> None:
    study, storage = _study(tmp_path)
    tickets.record(study, 5, SEEDS)
    assert study.get_trials() == [], "recording queues nothing"
    measured = _run_all(study, storage)
    assert measured[:2] == [1, 2] and len(measured) == 5
    assert [t.user_attrs["role"] for t in study.get_trials()] == ["baseline", "seed", "search", "search", "search"]
    tickets.record(study, 7, SEEDS)  # a later, larger --trials: two more, no seed again
    assert len(_run_all(study, storage)) == 2
    assert [t.user_attrs["role"] for t in study.get_trials()][5:] == ["search", "search"]


def test_tickets_an_interrupted_run_left_do_not_overrule_a_later_smaller_target(tmp_path: Path) -> None:
    # The study of a run that queued a ticket per requested trial (1,007) and was stopped after none ran.
    study, storage = _study(tmp_path)
    with sharing.study_lock(storage, study.study_name):
        sharing.queue_tickets(study, 1007, SEEDS)
    tickets.record(study, 3, SEEDS)
    assert tickets.target(study, 1) == 3
    measured = []
    while (ticket := tickets.take(study, storage, 1)) is not None:
        measured.append(ticket.trial.suggest_int("x", 0, 100))
        study.tell(ticket.trial, 1.0)
    assert len(measured) == 3 and measured[:2] == [1, 2]


def test_an_interrupted_trials_config_is_taken_first_and_does_not_raise_the_count(tmp_path: Path) -> None:
    study, storage = _study(tmp_path)
    tickets.record(study, 2, SEEDS)
    first = tickets.take(study, storage, 1)
    assert first is not None and first.trial.suggest_int("x", 0, 100) == 1
    sharing.requeue(study, storage, first.trial, "interrupted: stopped by SIGINT")
    assert _run_all(study, storage) == [1, 2], "the baseline again, then the seed; two in all"


def test_each_ticket_is_taken_by_exactly_one_worker_and_none_beyond_the_target(tmp_path: Path) -> None:
    study, _ = _study(tmp_path)
    tickets.record(study, 12, [])
    taken: list[int] = []
    errors: list[BaseException] = []

    def worker() -> None:
        mine, my_storage = _study(tmp_path)  # its own connections, as another process has
        try:
            while (ticket := tickets.take(mine, my_storage, 1)) is not None:
                ticket.trial.suggest_int("x", 0, 100)
                mine.tell(ticket.trial, 1.0)
                taken.append(ticket.trial.number)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert sorted(taken) == list(range(12))
    assert [t.state for t in study.get_trials()] == [TrialState.COMPLETE] * 12


@pytest.mark.slow
def test_a_one_second_budget_ends_at_once_saying_so_and_queues_nothing(project: Path) -> None:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "autotune", "search", "--recipe", "tiny", "--trials", "100000", "--time-budget", "1"],
        capture_output=True, text=True, env=os.environ.copy(), timeout=120,
    )
    took = time.monotonic() - began
    assert done.returncode == 2, done.stderr
    assert took < 30, f"{took:.1f} s"
    assert "Error: the time budget (1 s) was spent before the baseline's trial could start: " in done.stderr
    assert "the failures above" not in done.stderr
    study = optuna.load_study(study_name="tiny@cpu", storage=f"sqlite:///{project}/.autotune/tiny.db")
    assert (len(study.trials), tickets.target(study, 1)) == (0, 100000)
