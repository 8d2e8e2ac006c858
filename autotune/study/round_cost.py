"""What measuring one config in a finalists' round costs, from its own trial.

A round measures each config in a fresh process: it pays the process's start, the
build (a compiled step compiles again) and the measurement. A config's own trial
says what its build and measurement take; the first trial, which started its
process too, says what a start adds. A median over all trials does not: on an H200
a compiled ResNet-50 trial took 56 s against the others' 11-15 s, and the search's
first round (444 s to 569 s) ended it 89 s past its 480 s budget.
"""

from __future__ import annotations

from optuna.trial import FrozenTrial, TrialState

from autotune.config import Config
from autotune.study.setup import Setup


def wall_s(trial: FrozenTrial) -> float:
    """Seconds from a trial's start to its end in the study: its build, its measurement, and any process start."""
    if trial.datetime_start is None or trial.datetime_complete is None:
        return 0.0
    return (trial.datetime_complete - trial.datetime_start).total_seconds()


def start_s(complete: list[FrozenTrial]) -> float:
    """What a fresh process adds to a measurement: the first complete trial's wall time less its measurement's."""
    if not complete:
        return 0.0
    first = complete[0]
    return max(0.0, wall_s(first) - float(first.user_attrs.get("duration_s", 0.0)))


def config_s(setup: Setup, config: Config, default_s: float) -> float:
    """Seconds measuring `config` in a round takes: its longest complete trial's wall time (`default_s` for one not
    yet tried), and a process start."""
    complete = setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    start = start_s(complete)
    # The first trial's wall time has a start in it already: counted once.
    own = [max(wall_s(t) - (start if i == 0 else 0.0), float(t.user_attrs.get("duration_s", 0.0)))
           for i, t in enumerate(complete) if "config" in t.user_attrs and setup.config_of(t) == config]
    return max(own, default=default_s) + start
