"""What measuring one config in a finalists' round costs, from its own trial.

A round measures each config in a process started for the rounds (while the parity
check runs), so what a config costs there is what its trial cost in the study: its
build (a compiled step compiles again) and its measurement, its trial's wall time. The
first trial's wall time has its process's start in it too, and stands for the round's
fresh start. A median over all trials does not say it (a compiled config's trial takes
several times the others'), nor does a start added to every config (the first trial's
start is the data set's first read, paid once): both cost a round wrongly, one past the
budget, the other ending the trials early (docs/search.md#what-a-round-costs).
"""

from __future__ import annotations

from optuna.trial import FrozenTrial

from autotune.config import Config
from autotune.study.context import Setup


def wall_s(trial: FrozenTrial) -> float:
    """Seconds from a trial's start to its end in the study: its build, its measurement, and any process start."""
    if trial.datetime_start is None or trial.datetime_complete is None:
        return 0.0
    return (trial.datetime_complete - trial.datetime_start).total_seconds()


def config_s(setup: Setup, complete: list[FrozenTrial], config: Config, default_s: float) -> float:
    """Seconds measuring `config` in a round takes: its longest trial's wall time among `complete` (the study's
    complete trials), `default_s` for one not yet tried."""
    own = [max(wall_s(t), float(t.user_attrs.get("duration_s", 0.0)))
           for t in complete if "config" in t.user_attrs and setup.config_of(t) == config]
    return max(own, default=default_s)


def measure_s(setup: Setup, complete: list[FrozenTrial], config: Config, default_s: float) -> float:
    """Seconds measuring `config` again takes in a process already started: its longest trial's measurement (its
    build included, no process start), `default_s` for one not yet tried."""
    own = [float(t.user_attrs["duration_s"]) for t in complete
           if "config" in t.user_attrs and "duration_s" in t.user_attrs and setup.config_of(t) == config]
    return max(own, default=default_s)
