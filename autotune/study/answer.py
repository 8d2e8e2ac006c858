"""An answer every time: when nothing faster may win, the workload's own settings are the result, and why.

A search whose baseline ran has an answer. When every faster config was rejected
by the parity check, or the check could judge none of them (the baseline learned
too little in it, or its own run failed), the tuned file keeps the workload's own
settings at 1.0x and states the reason; that is a finding, not an error, and it
ends the same way on every device (docs/search.md#the-finalists-rounds). Only a
search in which not even the baseline ran ends without a file, and then this module
says the real reason: a time budget spent before its trial could start is not "the
failures above".
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.study.shared import sharing

KEPT_ATTRIBUTE = "kept_baseline"  # the study's user attribute: why the workload's own settings are the answer


def keep(study: optuna.Study, reason: str | None) -> None:
    """Record why no config faster than the baseline may win (None: one may); the profile states it."""
    study.set_user_attr(KEPT_ATTRIBUTE, reason)


def kept(study: optuna.Study) -> str | None:
    """Why the workload's own settings are the answer, as this search's check found; None when a faster one may win."""
    reason = study.user_attrs.get(KEPT_ATTRIBUTE)
    return str(reason) if reason else None


def all_rejected(checked: int, baseline: str) -> str:
    return (
        f"no config faster than the baseline trains like it: all {checked} checked, the fastest first, were rejected; "
        f"to search further, narrow the search (e.g. --fix batch_size={baseline}) or try --lr-scaling"
    )


def inconclusive(checked: int, why: str = "the baseline learned too little in it to judge by") -> str:
    return (
        f"the parity check is inconclusive ({why}), so only configs with "
        f"the baseline's math may win (loader knobs, placement, cudnn_benchmark, channels_last, cuda_graph; decode or "
        f"amp once their checks passed), and none of those ran faster ({checked} config(s) checked)"
    )


def unjudged(checked: int) -> str:
    return (
        f"no config faster than the baseline could be judged within the parity check's share of the time budget "
        f"({checked} config(s) checked: their runs did not fit it, or were stopped at it); a longer --time-budget "
        f"gives the check more"
    )


def check_failed(error: str) -> str:
    return f"the parity check could not judge any faster config: {error.rstrip('.')}"


def parity_record(record: dict[str, Any], reason: str, conclusive: bool | None) -> dict[str, Any]:
    """The baseline's parity record, saying why it is the answer; an inconclusive check stays stated as one.

    `conclusive`: the check's (``ParityCheck.conclusive``). None when it never needed the baseline's training run:
    its verdicts were by gradients or images, which are conclusive on their own.
    """
    made = {**record, "reason": f"kept the workload's own settings: {reason}"}
    if conclusive is False:
        made["conclusive"] = False
    return made


def why_nothing_ran(study: optuna.Study, budget_s: float | None, elapsed_s: float, study_name: str) -> str:
    """Why the search has no complete trial, not even the baseline's: the budget, the failures, or the target."""
    trials = sharing.counted(study.get_trials(deepcopy=False))
    finished = [t for t in trials if t.state.is_finished()]
    if not finished and budget_s is not None and elapsed_s >= budget_s:
        return (
            f"the time budget ({budget_s:g} s) was spent before the baseline's trial could start: loading the workload "
            f"and opening study {study_name!r} took {elapsed_s:.1f} s, so nothing was measured. Give a "
            f"--time-budget that covers a few trials (the default is 480 s)."
        )
    if not finished:
        return (
            f"no trial ran in study {study_name!r}: its target of finished trials was already reached "
            f"without a complete one; raise --trials to measure more."
        )
    failed = sum(t.state == TrialState.FAIL for t in finished)
    pruned = sum(t.state == TrialState.PRUNED for t in finished)
    return (
        f"no trial completed in study {study_name!r}: {failed} failed and {pruned} were stopped early, "
        f"the baseline's among them; the lines above give each reason."
    )
