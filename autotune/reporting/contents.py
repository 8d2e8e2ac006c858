"""What a report holds (``StudyReport``), apart from how it is read from a study (``autotune.reporting.study``)
and how it is written as files (``autotune.reporting.files``): both import it, neither imports the other.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from autotune.reporting.rounds import Rounds
from autotune.reporting.trials import FailureGroup, Row


@dataclasses.dataclass(frozen=True)
class StudyReport:
    recipe: str
    study: str
    storage: str  # credentials redacted
    hardware: str
    counts: dict[str, int]  # complete, pruned, failed, unfinished
    baseline: Row | None
    best: tuple[Row, ...]
    importances: dict[str, float] | None
    notes: tuple[str, ...]  # what could not be shown, and why
    failures: tuple[FailureGroup, ...]
    figures: dict[str, Path]  # heatmap, history, importance: the ones written
    markdown: Path
    html: Path
    rounds: Rounds | None = None  # None: no finalists measured again in this study, so no speed-up to state
