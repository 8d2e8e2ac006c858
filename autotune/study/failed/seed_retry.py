"""A seed that failed for one knob value is measured again without it; so is every seed not yet taken.

The seeds are the informed guesses (``autotune.study.space.seeds``), and most of them turn
several knobs on at once. When one value proves hopeless (``autotune.study.failed.hopeless``:
a CUDA graph that a host sync in the step breaks, channels_last on a model that
``view``s its activations), skipping every seed that sets it throws the rest of each
guess away, and with it configs that win (docs/search.md#failure-learning). Here such
a seed keeps its other knobs and takes the baseline's value of the hopeless one instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.config import Config
from autotune.study.failed.hopeless import Hopeless, blocks
from autotune.study.shared import sharing, tickets

RETRIED_ATTRIBUTE = "seeds:retried"  # the study's user attribute: seed trials whose variant was queued already


def without(params: dict[str, Any], hopeless: Iterable[Hopeless], baseline: Config) -> dict[str, Any]:
    """`params` with every hopeless value they set replaced by the baseline's value of that knob."""
    fixed = dict(params)
    for h in hopeless:
        if blocks(fixed, [h]) is None:
            continue
        for knob, value in h.values:
            if fixed.get(knob) == value:
                fixed[knob] = getattr(baseline, knob)
    return fixed


def queue_retries(study: optuna.Study, storage: optuna.storages.RDBStorage, hopeless: list[Hopeless],
                  baseline: Config) -> list[int]:
    """Put, next in the study's seeds, each failed seed's variant without the values now known hopeless.

    Returns the numbers of the failed seed trials handled now (a variant is queued for each whose params change);
    each seed trial is handled once.
    """
    if not hopeless:
        return []
    with sharing.study_lock(storage, study.study_name):
        done = set(study.user_attrs.get(RETRIED_ATTRIBUTE, []))
        failed = [
            t for t in sharing.counted(study.get_trials(deepcopy=False))
            if t.state == TrialState.FAIL and t.user_attrs.get("role") == "seed" and t.number not in done
            and "duplicate_of" not in t.user_attrs and blocks(t.user_attrs.get("config", {}), hopeless) is not None
        ]
        if not failed:
            return []
        variants = []
        for t in failed:
            params = without(dict(t.params), hopeless, baseline)
            if params != t.params:
                variants.append({"params": params, "user_attrs": {"role": "seed", "retry_of_seed": t.number}})
        tickets.insert_next(study, variants)
        study.set_user_attr(RETRIED_ATTRIBUTE, sorted(done | {t.number for t in failed}))
    return [t.number for t in failed]
