"""A workload's failures belong to its content: once the workload changed, its failed configs are measured again.

A study records a digest of the workload's source: its file and the ``.py`` files it imports
from its own folder, found by reading its imports (``autotune.study.identity``). A changed workload
gets a study of its own unless the user names the study (``--study``); a study so named and
resumed after the workload changed queues every failed trial's config again, as
a trial whose worker died is queued again (``autotune.study.shared.sharing``): the
retry stands for the old trial, so the old failure no longer stops the search
("Fix the workload first"), blocks a knob value, or stands for a duplicate.
Measurements that completed are kept: a change that makes a config faster is
for a new study to find.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.study.identity import source_digest as digest
from autotune.study.identity import workload_files
from autotune.study.shared import sharing

ATTRIBUTE = "workload_digest"  # the study's user attribute: the digest its trials so far were measured with


def measure_again_if_changed(study: optuna.Study, path: Path, echo: Callable[[str], None]) -> list[int]:
    """Record the workload's digest; if it changed, queue again every failed trial's config and say so.

    Call under the study's lock. Returns the numbers of the failed trials queued again.
    """
    now = digest(path)
    recorded = study.user_attrs.get(ATTRIBUTE)
    if recorded == now:
        return []
    study.set_user_attr(ATTRIBUTE, now)
    if recorded is None:  # a new study, or one made before digests were kept: nothing to compare with
        return []
    failed = [t for t in sharing.counted(study.get_trials(deepcopy=False)) if t.state == TrialState.FAIL]
    for trial in failed:
        study.add_trial(_retry_of(trial))
    if failed:
        numbers = ", ".join(str(t.number) for t in failed)
        echo(
            f"workload {path} changed since trial(s) {numbers} failed: measuring their config(s) again "
            f"({len(workload_files(path))} file(s) read)"
        )
    return [t.number for t in failed]


def _retry_of(trial: FrozenTrial) -> FrozenTrial:
    # As optuna's RetryFailedTrialCallback makes one: `retry_history` is how sharing.counted leaves the old one out.
    system_attrs = {**trial.system_attrs, "failed_trial": trial.number}
    system_attrs["retry_history"] = [*trial.system_attrs.get("retry_history", []), trial.number]
    return optuna.trial.create_trial(
        state=TrialState.WAITING,
        params=trial.params,
        distributions=trial.distributions,
        user_attrs={"role": trial.user_attrs.get("role", "search")},  # the rest was the failed measurement's
        system_attrs=system_attrs,
    )
