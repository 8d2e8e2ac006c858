"""When a search has stopped finding: so many trials in a row without a faster config that it ends early.

A small model's trials take a second or two, so ``--trials`` and the budget are
not what ends its search: it finds its winner early and spends the rest on
slower configs and the sampler's repeats (docs/search.md#patience). After the
plan (``autotune.study.planning.plan``) has measured what it ranked high, a run
of PATIENCE trials (measured, pruned, skipped, failed, or the sampler's repeats
of a measured config) none of which beat the best by IMPROVEMENT ends the
trials. A heavy model's search rarely gets there within its budget: each of its
trials takes most of a minute, and its budget ends it first. Patience does not end
the trials while the plan predicted a config faster than the best by as much and it
was never tried (``predicted_faster``): that config is measured next instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from autotune.study.shared import tickets
from autotune.study.standing import Family, in_rejected

PATIENCE = 12  # trials in a row that found nothing faster
# A new best beats the one before by more than this share, about a trial's own noise (docs/search.md#patience).
IMPROVEMENT = 0.02


def stale(trials: list[FrozenTrial], rejected: Sequence[Family] = ()) -> tuple[int, FrozenTrial | None]:
    """How many trials in a row, to the latest, found nothing faster; and the trial that holds the best.

    A trial of a math family the parity check `rejected` holds no best: it cannot be the answer
    (``autotune.study.standing``)."""
    best: FrozenTrial | None = None
    since = 0
    done = sorted((t for t in tickets.started(trials) if t.state.is_finished()), key=lambda t: t.number)
    for t in done:
        faster = t.state == TrialState.COMPLETE and t.value is not None and "duplicate_of" not in t.user_attrs and (
            not in_rejected(t.user_attrs.get("config"), rejected)) and (
            best is None or best.value is None or t.value > best.value * (1 + IMPROVEMENT))
        if faster:
            best, since = t, 0
        else:
            since += 1
    return since, best


def why_stop(trials: list[FrozenTrial], planned: bool, rejected: Sequence[Family] = ()) -> str | None:
    """Why the search takes no more tickets, once PATIENCE trials in a row found nothing faster than the best that
    can still win; None to go on.

    `planned`: the plan was made (a search asked for few trials makes none, and runs them all). `rejected`: the math
    families the parity check rejected."""
    if not planned:
        return None
    since, best = stale(trials, rejected)
    if since < PATIENCE or best is None:
        return None
    return (f"search: no trial of the last {since} found a config more than {IMPROVEMENT:.0%} faster than trial "
            f"{best.number}'s {best.value:,.0f}/s; the trials end here")


def predicted_faster(trials: list[FrozenTrial], config_of: Callable[[FrozenTrial], Any],
                     rejected: Sequence[Family] = ()) -> FrozenTrial | None:
    """The config the plan valued fastest, above the best measured that can still win by more than IMPROVEMENT,
    that no trial has tried (measured, skipped or failed); None when there is none. A search that stops while one is
    left ends with time unused and its best guess unmeasured (docs/search.md#patience)."""
    _, best = stale(trials, rejected)
    floor = (best.value or 0.0) * (1 + IMPROVEMENT) if best is not None else 0.0
    tried = {config_of(t) for t in tickets.started(trials) if "config" in t.user_attrs}
    # Queued once already, whatever its config became when it was taken (a hopeless value replaced).
    asked = {t.user_attrs["predicted_of"] for t in trials if "predicted_of" in t.user_attrs}
    valued = [t for t in trials if t.user_attrs.get("role") == tickets.VALUED_ROLE and "config" in t.user_attrs
              and float(t.user_attrs.get("predicted_samples_per_s") or 0.0) > floor and t.number not in asked
              and config_of(t) not in tried and not in_rejected(t.user_attrs.get("config"), rejected)]
    return max(valued, key=lambda t: float(t.user_attrs["predicted_samples_per_s"]), default=None)
