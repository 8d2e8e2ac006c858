"""A search whose time budget ends its trials says so, and says it again where it states the result.

`--time-budget 5` on mnist_cnn ran trial 0 only, then printed "no config ran faster than the baseline", as though
the search had looked. The trials are faked (tests/study/test_search.py's FakePool, each taking a second); the
search, its clock and what it says are the real ones.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial
from study.test_search import FakePool

from autotune.config import Config
from autotune.options import SearchOptions
from autotune.procs.trial_process import Outcome
from autotune.study import pools, search
from autotune.study.shared import tickets
from autotune.study.trials import taken

FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_a_budget_that_ends_the_trials_is_named_as_what_ended_them(project: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(FIXTURES / "random_labels.py", project / "recipes" / "random_labels.py")
    run = FakePool.run

    def slow(self: FakePool, config: Config, *args: object, **kwargs: object) -> Outcome:
        time.sleep(1.0)  # a trial's second: the 3 s budget has room for the baseline's and the end's reserve only
        return run(self, config, *args, **kwargs)

    FakePool.runs = []
    monkeypatch.setattr(pools, "TrialPool", FakePool)
    monkeypatch.setattr(FakePool, "run", slow)
    lines: list[str] = []
    options = SearchOptions(trials=10, rounds=1, cpu_share=1, time_budget_s=3.0)
    search("random_labels", options, echo=lines.append)

    ended = [line for line in lines if line.startswith("trials: the time budget")]
    assert len(ended) == 1
    assert ended[0].startswith("trials: the time budget (3 s) ended them after 1 trial(s), ")
    assert ended[0].endswith(" s in; the rest of it is the parity check's and the final rounds'")
    assert ("no config ran faster than the baseline in the 1 trial(s) the time budget left room for; measuring it, "
            "1 round(s), fresh processes") in lines


def test_a_search_that_ran_every_trial_does_not_blame_the_budget(project: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(FIXTURES / "random_labels.py", project / "recipes" / "random_labels.py")
    FakePool.runs = []
    monkeypatch.setattr(pools, "TrialPool", FakePool)
    lines: list[str] = []
    search("random_labels", SearchOptions(trials=3, rounds=1, cpu_share=1, time_budget_s=600.0), echo=lines.append)
    assert not [line for line in lines if line.startswith("trials: the time budget")]


def _trial(state: TrialState, role: str | None = None) -> FrozenTrial:
    return create_trial(state=state, value=1.0 if state == TrialState.COMPLETE else None, params={"x": 0.0},
                        distributions={"x": FloatDistribution(0, 1)}, user_attrs={"role": role} if role else {})


def test_the_trials_taken_are_what_trials_counts_not_the_configs_the_plan_valued() -> None:
    # Whether tickets are left when the clock ends the loop: a running trial of another searcher is a ticket taken
    # (the writer, waiting for it, must not blame the budget), and the plan's valued configs, recorded as pruned
    # trials, are none (a search that measured 2 of its 20 must say the budget ended it).
    study = optuna.create_study(direction="maximize")
    for state in (TrialState.COMPLETE, TrialState.COMPLETE, TrialState.RUNNING):
        study.add_trial(_trial(state))
    for _ in range(20):
        study.add_trial(_trial(TrialState.PRUNED, role=tickets.VALUED_ROLE))
    assert taken(SimpleNamespace(study=study)) == 3  # type: ignore[arg-type]
