"""Tickets queued as the search needs them: one waiting trial at a time, never one per requested trial.

``--trials`` is a target, not a queue. A ticket per requested trial, queued up
front, holds the study's lock for as long as a large ``--trials`` takes to write
before the time budget is first checked, and is left behind for later runs
(docs/search.md#sharing-one-study). Here the study keeps the target of the
latest command and the seeds' list (study user attributes), and a worker that
wants a trial, under the study's lock, counts the trials started so far against
the target, takes a waiting one if there is one (a config given back by an
interrupted trial first), or queues the next seed, or an empty ticket for the
sampler, and takes that. So the study never holds more than the few tickets its
workers are about to take, and whatever an earlier run left waiting counts for
nothing beyond the current target.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.study.shared import sharing

TARGET_ATTRIBUTE = "trials"  # the latest command's --trials: finished trials the study should hold
SEEDS_ATTRIBUTE = "seeds"  # the seeds' params and roles, in order, recorded once: every worker queues the same
SEED_ROLES = ("baseline", "seed")


def record(study: optuna.Study, target: int, seeds: list[dict[str, Any]]) -> None:
    """Record this command's target, and the seeds when the study has none yet. Call under the lock.

    A study made before seeds were recorded queued them already; it gets those.
    """
    study.set_user_attr(TARGET_ATTRIBUTE, target)
    if SEEDS_ATTRIBUTE not in study.user_attrs:
        trials = study.get_trials(deepcopy=False)
        # A study made before seeds were recorded queued its seeds already: those are its list.
        queued = [{"params": t.params, "user_attrs": {"role": t.user_attrs["role"]}} for t in sharing.counted(trials)
                  if t.user_attrs.get("role") in SEED_ROLES]
        study.set_user_attr(SEEDS_ATTRIBUTE, queued if trials else seeds)


def target(study: optuna.Study, default: int) -> int:
    """The latest command's target, or `default` in a study made before targets were recorded."""
    return int(study.user_attrs.get(TARGET_ATTRIBUTE, default))


# The role of a config the plan valued from its parts and recorded without measuring (autotune.study.planning.plan).
VALUED_ROLE = "valued"


def started(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The counted trials that a worker took: running or finished; an interrupted one's retry stands for it. A
    config the plan valued and recorded without measuring is no trial taken: --trials counts measurements."""
    return [t for t in sharing.counted(trials)
            if t.state != TrialState.WAITING and t.user_attrs.get("role") != VALUED_ROLE]


def waiting(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """Waiting tickets, a config given back by an interrupted trial first (it was due before the rest)."""
    ready = [t for t in sharing.counted(trials) if t.state == TrialState.WAITING]
    return sorted(ready, key=lambda t: (not t.system_attrs.get("retry_history"), t.number))


def seeds_queued(trials: list[FrozenTrial]) -> int:
    """How many of the recorded seeds were queued: an interrupted seed's retry counts once."""
    return sum(t.user_attrs.get("role") in SEED_ROLES for t in sharing.counted(trials))


def next_seed(study: optuna.Study, trials: list[FrozenTrial]) -> dict[str, Any] | None:
    """The first recorded seed not queued yet; None once all were."""
    seeds = study.user_attrs.get(SEEDS_ATTRIBUTE, [])
    queued = seeds_queued(trials)
    return seeds[queued] if queued < len(seeds) else None


def insert_next(study: optuna.Study, seeds: list[dict[str, Any]]) -> None:
    """Make `seeds` the next ones queued, before the recorded seeds not queued yet. Call under the lock."""
    recorded = list(study.user_attrs.get(SEEDS_ATTRIBUTE, []))
    at = seeds_queued(study.get_trials(deepcopy=False))
    study.set_user_attr(SEEDS_ATTRIBUTE, recorded[:at] + seeds + recorded[at:])


def take(
    study: optuna.Study,
    storage: optuna.storages.RDBStorage,
    default_target: int,
    adjust: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> sharing.Ticket | None:
    """The next ticket for this worker, queued now if none waits; None once the study's target is reached.

    Counting and taking happen under the study's lock, so two workers never both take the last ticket.
    `adjust`: what a seed's params become when it is queued (values found hopeless since it was recorded, replaced).
    """
    sharing.fail_stale(study)
    with sharing.study_lock(storage, study.study_name):
        trials = study.get_trials(deepcopy=False)
        if len(started(trials)) >= target(study, default_target):
            return None
        if not waiting(trials):
            seed = next_seed(study, trials)
            if seed is not None:
                params = adjust(seed["params"]) if adjust is not None else seed["params"]
                study.enqueue_trial(params, user_attrs=seed["user_attrs"])
            else:
                # No params: the sampler fills the ticket in when this worker asks it.
                study.enqueue_trial({}, user_attrs={"role": "search"})
            trials = study.get_trials(deepcopy=False)
        for ticket in waiting(trials):
            taken = sharing.take_waiting(study, storage, ticket)
            if taken is not None:
                return taken
    return None
