"""What every part of a search shares: the prepared search (``Prepared``), the same with its study open (``Setup``),
and the one error a search raises (``SearchError``).

Every step and every subpackage of ``autotune.study`` takes a ``Setup``; it lives here, below them all, so that no
step needs another to name it. ``Setup`` is frozen: the state of a search lives in its Optuna study.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import optuna

from autotune.config import Config, LrRule, scaled_lr
from autotune.errors import AutotuneError
from autotune.knobs import DataFacts, Machine
from autotune.options import SearchOptions
from autotune.study.identity import Identity
from autotune.study.space.domains import Space
from autotune.trial.timing import Windows
from autotune.workloads import RecipeRef, Workload


class SearchError(AutotuneError, RuntimeError):
    """A search that cannot start or finish; the message says why and what to do."""


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What a search knows before it opens its study."""

    options: SearchOptions
    ref: RecipeRef
    workload: Workload
    machine: Machine
    facts: DataFacts
    space: Space
    baseline: Config  # the workload's own settings, in this space's terms
    device: str  # "cuda:N" or "cpu"
    study_name: str
    storage_url: str
    windows: Windows  # how each trial is timed
    lr_rule: LrRule  # how the learning rate follows a new batch size, and why (the optimizer, or --lr-scaling)
    echo: Callable[[str], None]
    started: float  # time.monotonic() when the search began
    started_at: float  # time.time(), compared with other searchers' records
    identity: Identity  # the workload as its study measures it: source, DEFAULTS, data set (autotune.study.identity)

    def lr(self, config: Config, rule: str | None = None) -> float:
        """The learning rate `config` trains at: the workload's, scaled to its batch size by `rule` (default: the
        search's rule; the parity check tries gentler ones when a batch size fails at it)."""
        d = self.workload.defaults
        rule = rule or self.lr_rule.name
        return scaled_lr(float(d["lr"]), d["batch_size"], config.batch_size, rule, self.workload.lr_max)

    def config_of(self, trial: optuna.trial.FrozenTrial) -> Config:
        """The config a trial measured, in this space's terms."""
        return self.space.normalise(Config.from_dict(trial.user_attrs["config"]))

    def elapsed(self) -> float:
        return time.monotonic() - self.started


@dataclasses.dataclass(frozen=True)
class Setup(Prepared):
    """A prepared search with its study open."""

    study: optuna.Study
    storage: optuna.storages.RDBStorage


def where_raised(exc: BaseException, path: Path) -> str:
    """`Type: message (file, line N)`, at the innermost line of the workload file that raised."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == Path(path)]
    first = (str(exc).strip().splitlines() or [""])[0]
    at = f" ({path}, line {frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {first}{at}"

