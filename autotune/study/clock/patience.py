"""When a search has stopped finding: so many trials in a row without a faster config that it ends early.

A small model's trials take a second or two, so ``--trials`` and the budget are
not what ends its search: it finds its winner early and spends the rest on
slower configs and the sampler's repeats (docs/search.md#patience). After the
plan (``autotune.study.planning.plan``) has measured what it ranked high, a run
of PATIENCE trials (measured, pruned, skipped, failed, or the sampler's repeats
of a measured config) none of which beat the best by IMPROVEMENT ends the
trials. A heavy model's search rarely gets there within its budget: each of its
trials takes most of a minute, and its budget ends it first.
"""

from __future__ import annotations

from optuna.trial import FrozenTrial, TrialState

from autotune.study.shared import tickets

PATIENCE = 12  # trials in a row that found nothing faster
# A new best beats the one before by more than this share, about a trial's own noise (docs/search.md#patience).
IMPROVEMENT = 0.02


def stale(trials: list[FrozenTrial]) -> tuple[int, FrozenTrial | None]:
    """How many trials in a row, to the latest, found nothing faster; and the trial that holds the best."""
    best: FrozenTrial | None = None
    since = 0
    done = sorted((t for t in tickets.started(trials) if t.state.is_finished()), key=lambda t: t.number)
    for t in done:
        faster = t.state == TrialState.COMPLETE and t.value is not None and "duplicate_of" not in t.user_attrs and (
            best is None or best.value is None or t.value > best.value * (1 + IMPROVEMENT))
        if faster:
            best, since = t, 0
        else:
            since += 1
    return since, best


def why_stop(trials: list[FrozenTrial], planned: bool) -> str | None:
    """Why the search takes no more tickets, once PATIENCE trials in a row found nothing faster; None to go on.

    `planned`: the plan was made (a search asked for few trials makes none, and runs them all)."""
    if not planned:
        return None
    since, best = stale(trials)
    if since < PATIENCE or best is None:
        return None
    return (f"search: no trial of the last {since} found a config more than {IMPROVEMENT:.0%} faster than trial "
            f"{best.number}'s {best.value:,.0f}/s; the trials end here")
