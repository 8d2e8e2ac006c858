"""The tuned recipe file, ``recipes/<name>.tuned.toml``: schema, read, write, match.

Data, never code. One profile per hardware (GPU model, or ``cpu``); tuning on
other hardware adds a profile and keeps the others. Written atomically: a
reader sees the old file or the new one, never half of one. Reading validates
everything and lists every problem at once.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import Any

import tomli_w

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from autotune.config import AMP_CHOICES, LR_RULES, PLACEMENT_CHOICES, Config

SCHEMA_VERSION = 1

_NUMBER = (int, float)
# Every key a profile may hold, with its type; `None` in a tuple means the key may be absent.
PROFILE_KEYS: dict[str, tuple[type, ...]] = {
    "command": (str,),
    "created": (str,),
    "samples_per_s": _NUMBER,
    "steady_samples_per_s": _NUMBER,  # epoch boundaries excluded; samples_per_s includes them
    "baseline_samples_per_s": _NUMBER,
    "speedup": _NUMBER,
    "spread": _NUMBER,
    "baseline_spread": _NUMBER,
    "step_s": _NUMBER,
    "epoch_s": _NUMBER,
    "setup_s": _NUMBER,
    "run_s": _NUMBER,
    "baseline_run_s": _NUMBER,
    "search_s": _NUMBER,
    "trials_complete": (int,),
    "trials_failed": (int,),
    "trials_pruned": (int,),
    "cpu_share": (int,),
    "lr": _NUMBER,
    "lr_rule": (str,),
    "study": (str,),
    "knobs": (dict,),
    "excluded": (dict,),
    "versions": (dict,),
    "parity": (dict,),
}
REQUIRED_PROFILE_KEYS = ("samples_per_s", "baseline_samples_per_s", "speedup", "knobs", "versions")
KNOB_TYPES: dict[str, tuple[type, ...]] = {
    "batch_size": (int,),
    "num_workers": (int,),
    "pin_memory": (bool,),
    "persistent_workers": (bool,),
    "prefetch_factor": (int,),  # absent: DataLoader's own
    "cudnn_benchmark": (bool,),
    "channels_last": (bool,),
    "amp": (str,),
    "cuda_graph": (bool,),
    "placement": (str,),
}


class RecipeError(ValueError):
    """A tuned recipe file that cannot be used; the message lists every problem."""


class RecipeWriteError(RecipeError, OSError):
    """The tuned recipe could not be written (a folder we may not write, a full disk); the old file stands."""


def _check_type(where: str, value: Any, types: tuple[type, ...], problems: list[str]) -> bool:
    if isinstance(value, bool) and bool not in types:
        ok = False
    else:
        ok = isinstance(value, types)
    if not ok:
        names = "number" if set(types) == set(_NUMBER) else " or ".join(t.__name__ for t in types)
        problems.append(f"{where} must be {names}, but got {value!r}")
    return ok


def validate(data: dict[str, Any], source: str = "recipe") -> list[str]:
    """Every problem in a parsed tuned recipe, as messages that name the key and the rule."""
    problems: list[str] = []
    schema = data.get("schema")
    if schema != SCHEMA_VERSION:
        problems.append(f"schema must be {SCHEMA_VERSION}, but got {schema!r} (a file from another autotune version?)")
    for key in data:
        if key not in ("schema", "recipe", "profiles"):
            problems.append(f"unknown top-level key {key!r}; known: schema, recipe, profiles")
    profiles = data.get("profiles", {})
    if not isinstance(profiles, dict):
        return problems + [f"profiles must be a table, but got {profiles!r}"]
    for hardware, profile in profiles.items():
        at = f"profiles.{hardware!r}"
        if not isinstance(profile, dict):
            problems.append(f"{at} must be a table, but got {profile!r}")
            continue
        for key in REQUIRED_PROFILE_KEYS:
            if key not in profile:
                problems.append(f"{at} lacks {key!r}")
        for key, value in profile.items():
            if key not in PROFILE_KEYS:
                problems.append(f"{at} has unknown key {key!r}")
                continue
            if _check_type(f"{at}.{key}", value, PROFILE_KEYS[key], problems) and key in ("samples_per_s", "baseline_samples_per_s", "speedup"):
                if value <= 0:
                    problems.append(f"{at}.{key} must be > 0, but got {value!r}")
        if profile.get("lr_rule") is not None and profile["lr_rule"] not in LR_RULES:
            problems.append(f"{at}.lr_rule must be one of {', '.join(LR_RULES)}, but got {profile['lr_rule']!r}")
        knobs = profile.get("knobs")
        if isinstance(knobs, dict):
            problems += _validate_knobs(f"{at}.knobs", knobs)
        if isinstance(profile.get("parity"), dict):
            from autotune import parity  # imports torch: only when a profile has a parity table

            problems += parity.validate_record(f"{at}.parity", profile["parity"])
    return problems


def _validate_knobs(at: str, knobs: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    for key, value in knobs.items():
        if key not in KNOB_TYPES:
            problems.append(f"{at} has unknown knob {key!r}")
            continue
        if not _check_type(f"{at}.{key}", value, KNOB_TYPES[key], problems):
            continue
        if key == "batch_size" and value < 1:
            problems.append(f"{at}.batch_size must be >= 1, but got {value}")
        if key == "num_workers" and value < 0:
            problems.append(f"{at}.num_workers must be >= 0, but got {value}")
        if key == "prefetch_factor" and not 1 <= value <= 64:
            problems.append(f"{at}.prefetch_factor must be in 1..64, but got {value}")
        if key == "amp" and value not in AMP_CHOICES:
            problems.append(f"{at}.amp must be one of {', '.join(AMP_CHOICES)}, but got {value!r}")
        if key == "placement" and value not in PLACEMENT_CHOICES:
            problems.append(f"{at}.placement must be one of {', '.join(PLACEMENT_CHOICES)}, but got {value!r}")
    for key in KNOB_TYPES:
        if key not in knobs and key != "prefetch_factor":
            problems.append(f"{at} lacks knob {key!r}")
    return problems


def read(path: Path) -> dict[str, Any]:
    """Parse and validate a tuned recipe; raises RecipeError listing every problem."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise RecipeError(f"cannot read tuned recipe {path}: {exc.strerror}") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"tuned recipe {path} is not valid TOML: {exc}") from exc
    problems = validate(data, str(path))
    if problems:
        raise RecipeError(f"tuned recipe {path} has {len(problems)} problem(s):\n  - " + "\n  - ".join(problems))
    return data


def knobs_to_config(knobs: dict[str, Any]) -> Config:
    return Config.from_dict({k: v for k, v in knobs.items()})


def config_to_knobs(config: Config) -> dict[str, Any]:
    # TOML has no null: an unset prefetch_factor is simply absent.
    return {k: v for k, v in config.as_dict().items() if v is not None}


def write_profile(path: Path, recipe: str, hardware: str, profile: dict[str, Any]) -> dict[str, Any]:
    """Add or replace one hardware's profile, keeping the others; atomic."""
    path = Path(path)
    data: dict[str, Any] = {"schema": SCHEMA_VERSION, "recipe": recipe, "profiles": {}}
    if path.exists():
        data = read(path)
    data["profiles"][hardware] = profile
    problems = validate(data)
    if problems:  # our own bug if it happens; never write a file we could not read back
        raise RecipeError("refusing to write an invalid tuned recipe:\n  - " + "\n  - ".join(problems))
    header = (
        f"# autotune tuned recipe for {recipe!r}: data, not code. Commit it.\n"
        f"# Each profile says which command made it; `autotune show --recipe {recipe}` prints it.\n"
    )
    text = header + tomli_w.dumps(data)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise RecipeWriteError(_unwritable(path, exc)) from exc
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise RecipeWriteError(_unwritable(path, exc)) from exc
        raise
    return data


def check_writable(path: Path) -> None:
    """Fail before a search, not after it, when the tuned recipe's folder cannot take the file."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".check", dir=path.parent)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise RecipeWriteError(_unwritable(path, exc)) from exc


def _unwritable(path: Path, exc: OSError) -> str:
    fix = f"make {path.parent} writable" if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else "fix that"
    return (
        f"cannot write tuned recipe {path}: {exc.strerror or exc} ({exc.filename or path.parent}); "
        f"the study keeps its trials: {fix} and run the same command again."
    )


def match(data: dict[str, Any], hardware: str) -> dict[str, Any] | None:
    """The profile for this hardware, if the recipe has one."""
    return data.get("profiles", {}).get(hardware)
