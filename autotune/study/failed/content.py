"""A workload's failures belong to its content: once the workload changed, its failed configs are measured again.

A study records a digest of the workload: its file and the ``.py`` files it imports
from its own folder, found by reading its imports (nothing is executed). A study
resumed after the workload changed queues every failed trial's config again, as
a trial whose worker died is queued again (``autotune.study.shared.sharing``): the
retry stands for the old trial, so the old failure no longer stops the search
("Fix the workload first"), blocks a knob value, or stands for a duplicate.
Measurements that completed are kept: a change that makes a config faster is
for a new study to find.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Callable
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.study.shared import sharing

ATTRIBUTE = "workload_digest"  # the study's user attribute: the digest its trials so far were measured with


def workload_files(path: Path) -> list[Path]:
    """The workload file and the .py files it imports from its folder, directly or through each other, sorted."""
    folder = path.resolve().parent
    found: set[Path] = set()
    todo = [path.resolve()]
    while todo:
        current = todo.pop()
        if current in found or not current.is_file():
            continue
        found.add(current)
        todo += [f for name in _imported(current) for f in _in_folder(folder, name)]
    return sorted(found)


def digest(path: Path) -> str:
    """A digest of what `workload_files` finds: their names relative to the folder, and their bytes."""
    h = hashlib.sha256()
    folder = path.resolve().parent
    for f in workload_files(path):
        h.update(str(f.relative_to(folder)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


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


def _imported(path: Path) -> list[str]:
    """Module names `path` imports, as written (absolute, or relative to its folder)."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError):  # the import itself reports that; its digest still changes with its bytes
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            names += [base, *(f"{base}.{alias.name}" if base else alias.name for alias in node.names)]
    return [n for n in names if n]


def _in_folder(folder: Path, name: str) -> list[Path]:
    """The files of `folder` that module `name` (or a package on its way) would be imported from."""
    parts = name.split(".")
    found = []
    for i in range(1, len(parts) + 1):
        stem = folder.joinpath(*parts[:i])
        found += [p for p in (stem.with_suffix(".py"), stem / "__init__.py") if p.is_file()]
    return found
