"""Which workload a study measured: its source, its DEFAULTS, its data set's length and sample shapes.

A study's numbers belong to the workload they were measured on. Resumed after the
workload changed, a study pruned new configs against a best measured on the old
model and reused parity verdicts made on it; a changed batch size broke Optuna's
distributions outright. So a study records the identity of its workload, and a
search whose workload differs starts a new study beside the old one (kept, and
named in the output), unless the user names the study with ``--study``.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

ATTRIBUTE = "workload"  # the study's user attribute: the identity its trials were measured with


@dataclasses.dataclass(frozen=True)
class Identity:
    """What a study's numbers depend on in the workload, as a record a study keeps and compares."""

    source: dict[str, str]  # each file of the workload (relative to its folder) and a digest of its bytes
    defaults: dict[str, Any]  # the workload's DEFAULTS, as JSON keeps them
    size: int | None  # the data set's length; None for a stream without one
    sample: str  # the tensors of one sample (``autotune.batch.sample_shapes``)

    @property
    def digest(self) -> str:
        """Twelve hex digits that change with any part."""
        return hashlib.sha256(json.dumps(self.as_record(), sort_keys=True).encode()).hexdigest()[:12]

    def as_record(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def changes_from(self, record: dict[str, Any]) -> list[str]:
        """What differs from an earlier identity's record, one phrase per part; [] when nothing does."""
        said: list[str] = []
        old_source: dict[str, str] = record.get("source") or {}
        edited = sorted(f for f in {*old_source, *self.source} if old_source.get(f) != self.source.get(f))
        if edited:
            said.append(f"the source of {', '.join(edited)}")
        old_defaults: dict[str, Any] = record.get("defaults") or {}
        for key in sorted({*old_defaults, *self.defaults}):
            if old_defaults.get(key) != self.defaults.get(key):
                said.append(f"DEFAULTS[{key!r}] {_shown(old_defaults.get(key))} -> {_shown(self.defaults.get(key))}")
        if record.get("size") != self.size:
            said.append(f"the data set's length {_shown(record.get('size'))} -> {_shown(self.size)}")
        if record.get("sample") != self.sample:
            said.append(f"a sample's tensors {record.get('sample') or '-'} -> {self.sample or '-'}")
        return said


def _shown(value: Any) -> str:
    return "unset" if value is None else repr(value)


def identity_of(workload_path: Path, defaults: dict[str, Any], size: int | None, sample: str) -> Identity:
    """The identity of the workload at `workload_path`, with its DEFAULTS and its data set's facts."""
    folder = workload_path.resolve().parent
    source = {str(f.relative_to(folder)): hashlib.sha256(f.read_bytes()).hexdigest()[:16]
              for f in workload_files(workload_path)}
    return Identity(source, json.loads(json.dumps(defaults, default=repr)), size, sample)


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


def source_digest(path: Path) -> str:
    """A digest of what `workload_files` finds: their names relative to the folder, and their bytes."""
    h = hashlib.sha256()
    folder = path.resolve().parent
    for f in workload_files(path):
        h.update(str(f.relative_to(folder)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


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
