"""What measuring one config in a finalists' round costs, from its own trial.

A round measures each config in a process started for the rounds (while the parity
check runs), so what a config costs there is what its trial cost in the study: its
build (a compiled step compiles again) and its measurement, its trial's wall time. The
first trial's wall time has its process's start in it too where it waited for one;
where it did not, the end's reserve adds the start no check run hides
(``autotune.study.clock.deadline``). A median over all trials does not say it (a compiled config's trial takes
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


# A compiled trial's user attribute: the whole compile its step part paid, where the trial compiled again in the process
# that part compiled in, from what it left in memory and in the compile cache (autotune.study.trials)
FRESH_COMPILE = "fresh_compile_s"


def config_s(setup: Setup, complete: list[FrozenTrial], config: Config, default_s: float) -> float:
    """Seconds measuring `config` in a round takes: its longest trial's wall time among `complete` (the study's
    complete trials), `default_s` for one not yet tried; a compiled trial that compiled again where its step part had
    compiled, with the rest of the whole compile on top (``fresh_s``)."""
    own = [max(wall_s(t), float(t.user_attrs.get("duration_s", 0.0))) + fresh_s(t)
           for t in complete if "config" in t.user_attrs and setup.config_of(t) == config]
    return max(own, default=default_s)


def fresh_s(trial: FrozenTrial) -> float:
    """What a round's fresh process pays to compile `trial`'s step beyond what the trial paid: nothing, unless the
    trial compiled again in the process its step part had compiled in. A fresh process is not served so: on an H100,
    ResNet-50 compiled in 41.5 s cold, 1.8 s again in that process, 16.2 s in a fresh one from the compile cache. The
    whole compile is the bound: a round costed at the trial's wall ran 190 s where 111 s more were not left, and the
    winner rested on one round."""
    return max(0.0, whole_compile_s(trial) - _paid_s(trial))


def whole_compile_s(trial: FrozenTrial) -> float:
    """What compiling `trial`'s step costs a process that starts afresh: the whole compile its step part paid, where
    the trial compiled again in that part's process; else what the trial's own compile took (0 for none)."""
    return float(trial.user_attrs.get(FRESH_COMPILE) or _paid_s(trial))


def _paid_s(trial: FrozenTrial) -> float:
    return float((trial.user_attrs.get("result") or {}).get("compile_s") or 0.0)


def measure_s(setup: Setup, complete: list[FrozenTrial], config: Config, default_s: float) -> float:
    """Seconds measuring `config` again takes in a process already started for the rounds: its longest trial's
    measurement (its build included, no process start), `default_s` for one not yet tried. That process is new to
    the config, so a compiled one compiles there as a fresh process does (``fresh_s``): on an H100 the webdataset
    winner's trial measured in about 30 s where its round took 62 s."""
    own = [float(t.user_attrs["duration_s"]) + fresh_s(t) for t in complete
           if "config" in t.user_attrs and "duration_s" in t.user_attrs and setup.config_of(t) == config]
    return max(own, default=default_s)
