"""Part rates and compile times a host measured for a workload, kept across studies in the state folder.

A heavy model's plan measured two or three parts in its share of the budget; a rerun, or a second study of the same
workload (another `--study`, other `--fix`es), measured them all again. Kept here, they value configs at once
(docs/search.md#the-plan-and-valuation). A step or loader rate belongs to the host that measured it: its cores, its
GPU, the torch that ran it, and the workload as ``autotune.study.identity`` reads it (its source, DEFAULTS, data
set). A compile's time belongs to the GPU model, torch and the workload, whichever host of that model measured it:
it says before any trial whether a compiled config can pay in what is left of a budget
(docs/search.md#compile-cost).

    kept = remembered.sync(setup, valuation, None)   # before the plan: every part measured here before is known
    kept = remembered.sync(setup, valuation, kept)   # after a part or a trial: what was measured since is kept
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
from pathlib import Path
from typing import Any

from optuna.trial import TrialState

from autotune.study.clock.round_cost import whole_compile_s
from autotune.study.context import Setup
from autotune.study.planning.valuation import Valuation

FILE = "measured.json"  # under the state folder (--state-dir, .autotune by default)
VERSION = 1


def path_of(setup: Setup) -> Path:
    return setup.options.state_dir / FILE


def _torch() -> str:
    import torch

    return str(torch.__version__)


def host_key(setup: Setup) -> str:
    """Where a part rate holds: this host, its GPU model (or cpu) and the cores the search runs on, torch, and the
    workload."""
    return (f"{socket.gethostname()}|{setup.machine.hardware}|cores={setup.machine.cpu_share}|torch={_torch()}|"
            f"{setup.identity.digest}")


def model_key(setup: Setup) -> str:
    """Where a compile's time holds: the GPU model, torch, and the workload."""
    return f"{setup.machine.hardware}|torch={_torch()}|{setup.identity.digest}"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):  # none yet, or half-written by a search that was killed: nothing remembered
        return {}
    return data if isinstance(data, dict) and data.get("version") == VERSION else {}


def _pairs(key: Any) -> tuple[tuple[str, Any], ...]:
    return tuple((str(k), v) for k, v in key)


def recall(setup: Setup, valuation: Valuation) -> int:
    """Put every part rate and compile time remembered for this host and workload into `valuation` (what it measured
    itself stands); how many parts were recalled."""
    data = _read(path_of(setup))
    rates = data.get("rates", {}).get(host_key(setup), {})
    recalled = 0
    for name, known in (("steps", valuation.steps), ("loaders", valuation.loaders)):
        for key, value in rates.get(name, []):
            pairs = _pairs(key)
            if pairs not in known:
                known[pairs] = float(value)
                recalled += 1
    valuation.remembered_compiles.update(
        {mode: float(took) for mode, took in data.get("compiles", {}).get(model_key(setup), {}).items()})
    return recalled


def compiles(setup: Setup, valuation: Valuation) -> dict[str, float]:
    """The least compile per mode this search timed: in its step parts and in its complete trials."""
    least = dict(valuation.compiles)
    for t in setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        took = whole_compile_s(t)  # not the fraction a trial paid compiling again where its step part compiled
        mode = setup.config_of(t).compile if took > 0 and "config" in t.user_attrs else "off"
        if mode != "off":
            least[mode] = min(took, least.get(mode, took))
    return least


def keep(setup: Setup, valuation: Valuation) -> None:
    """Add what `valuation` holds to the file, atomically; a folder that refuses it loses nothing but the memory."""
    path = path_of(setup)
    data = _read(path) or {"version": VERSION}
    rates = data.setdefault("rates", {}).setdefault(host_key(setup), {})
    for name, known in (("steps", valuation.steps), ("loaders", valuation.loaders)):
        merged = {json.dumps(k): v for k, v in rates.get(name, [])}
        merged.update({json.dumps([list(p) for p in key]): rate for key, rate in known.items()})
        rates[name] = [[json.loads(k), v] for k, v in merged.items()]
    kept = data.setdefault("compiles", {}).setdefault(model_key(setup), {})
    for mode, took in compiles(setup, valuation).items():
        kept[mode] = min(took, kept.get(mode, took))
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{FILE}.")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


Kept = tuple[int, int, int]  # how many step rates, loader rates and compile modes the file was last given


def sync(setup: Setup, valuation: Valuation | None, kept: Kept | None) -> Kept | None:
    """Recall what is remembered into `valuation` the first time (`kept` None), and keep it whenever it holds more
    than the file was last given; what the file now holds."""
    if valuation is None:
        return kept
    if kept is None:
        valuation.recalled = recall(setup, valuation)
    now = (len(valuation.steps), len(valuation.loaders), len(compiles(setup, valuation)))
    if now != kept:
        keep(setup, valuation)
    return now
