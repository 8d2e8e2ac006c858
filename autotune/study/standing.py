"""The complete trials a search can still answer with: those whose math family the parity check has not rejected.

A config the parity check rejected (a batch size that trains otherwise at every learning rate) was measured, and its
trial stays complete in the study, often as its fastest. Every rule that weighs a config against "the best so far"
must weigh it against the best that can still win: measured against a rejected rate, every config that can win looks
slow, so the valuation and the loader's ceiling skip it, the pruner stops it, the give-up clock runs short, and
patience ends the trials with the budget unused. On one H100, text_transformer's default search (480 s) had batch
256 rejected, judged the rest against its 31,199/s, and ended 66 s in with 414 s unused
(docs/search.md#the-parity-check-inside-the-search).

The rejected families are kept in the study (REJECTED_ATTRIBUTE), so every searcher under --gpus and the pruner,
which sees only the study, read the same list.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

REJECTED_ATTRIBUTE = "parity_rejected_families"  # the study's user attribute: a list of {knob: value} families

Family = Mapping[str, Any]  # a math family's knobs and values (autotune.study.checks.families.math_family)


def rejected_families(study: optuna.Study) -> list[dict[str, Any]]:
    """The math families the parity check rejected in this study so far, as {knob: value} maps."""
    return list(study.user_attrs.get(REJECTED_ATTRIBUTE, []))


def record(study: optuna.Study, family: Iterable[tuple[str, Any]]) -> None:
    """Keep `family` among the study's rejected families (once). Callers hold the study's lock under --gpus."""
    known = rejected_families(study)
    entry = dict(family)
    if entry not in known:
        study.set_user_attr(REJECTED_ATTRIBUTE, [*known, entry])


def clear(study: optuna.Study) -> None:
    """Forget the rejected families: a new check judges them afresh. Callers hold the study's lock under --gpus."""
    if study.user_attrs.get(REJECTED_ATTRIBUTE):
        study.set_user_attr(REJECTED_ATTRIBUTE, [])


def in_rejected(config: Mapping[str, Any] | None, families: Sequence[Family]) -> bool:
    """Whether a trial's config (its ``config`` user attribute) belongs to one of `families`: it holds every knob
    of one at that family's value. A trial without a config belongs to none.

    >>> in_rejected({"batch_size": 256, "amp": "bf16", "num_workers": 8}, [{"batch_size": 256, "amp": "bf16"}])
    True
    >>> in_rejected({"batch_size": 256, "amp": "off", "num_workers": 8}, [{"batch_size": 256, "amp": "bf16"}])
    False
    """
    if not config:
        return False
    return any(all(config.get(k) == v for k, v in family.items()) for family in families)


def still_standing(trials: Iterable[FrozenTrial], families: Sequence[Family]) -> list[FrozenTrial]:
    """The complete trials with a value whose config no rejected family holds."""
    return [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None
            and not in_rejected(t.user_attrs.get("config"), families)]


def standing_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The study's complete trials that can still be its answer (`still_standing`)."""
    return still_standing(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), rejected_families(study))


def best_of(trials: Iterable[FrozenTrial], families: Sequence[Family]) -> float | None:
    """The fastest samples/s among `trials` that can still be the answer; None before one completed."""
    return max((t.value for t in still_standing(trials, families) if t.value), default=None)


def best_rate(study: optuna.Study) -> float | None:
    """The fastest samples/s among the study's trials that can still be the answer; None before one completed."""
    return best_of(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), rejected_families(study))
