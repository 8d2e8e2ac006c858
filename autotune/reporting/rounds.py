"""The winner's numbers: the finalists the search measured again beside the baseline, read back from the study.

The search keeps its rounds on the study (``autotune.study.run``) when it writes
the tuned file; a report states the speed-up from them only, in the file's own
numbers, never from the trials' single measurements.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any

import optuna

ROUNDS_ATTRIBUTE = "rounds"  # as autotune.study.run keeps them (not imported: a report loads no search)


@dataclasses.dataclass(frozen=True)
class Finalist:
    """One config as the search measured it again, beside the baseline, in fresh processes."""

    config: str  # described
    role: str  # "winner", "baseline" or "finalist"
    rounds: int  # rounds it completed
    samples_per_s: float | None  # the median of its rounds; None when it failed in every round
    vs_baseline: float | None  # that median over the baseline's, as the tuned file states the winner's


@dataclasses.dataclass(frozen=True)
class Rounds:
    """The rounds the tuned file's numbers come from, as the search kept them on the study."""

    winner: str  # described
    samples_per_s: float
    baseline_samples_per_s: float
    speedup: float  # exactly the tuned file's
    spread: float
    tuned_file: str
    finalists: tuple[Finalist, ...]


def read_rounds(study: optuna.Study) -> Rounds | None:
    """The finalists measured again, as the search that wrote the tuned file kept them; None if it kept none."""
    kept = study.user_attrs.get(ROUNDS_ATTRIBUTE)
    if not isinstance(kept, dict):
        return None
    try:
        medians = {
            c["config"]: statistics.median(c["samples_per_s"]) if c["samples_per_s"] else None for c in kept["configs"]
        }
        # The winner and the baseline as the tuned file states them; the other finalists by the file's own rule,
        # the median of the rounds over the baseline's, to two places.
        stated = {kept["baseline"]: (float(kept["baseline_samples_per_s"]), 1.0),
                  kept["winner"]: (float(kept["samples_per_s"]), float(kept["speedup"]))}
        base = medians[kept["baseline"]]

        def finalist(c: dict[str, Any]) -> Finalist:
            name, median = c["config"], medians[c["config"]]
            role = "winner" if name == kept["winner"] else "baseline" if name == kept["baseline"] else "finalist"
            value, ratio = stated.get(name, (median, round(median / base, 2) if median and base else None))
            return Finalist(name, role, len(c["samples_per_s"]), value, ratio)

        return Rounds(
            kept["winner"], float(kept["samples_per_s"]), float(kept["baseline_samples_per_s"]),
            float(kept["speedup"]), float(kept["spread"]), str(kept["tuned_file"]),
            tuple(finalist(c) for c in kept["configs"]),
        )
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None  # not what this version keeps: stated as "no rounds", never as numbers half read
