"""A profile a new search replaces is kept, not lost: a tuned file of its own in the search's state directory.

A search writes its winner over the profile of the same hardware. Where that profile
came from another search (a `--fix` that narrowed the space, a `--study` for a quick
probe, a busy host), the file's better answer was gone without a word: on a 2-core CPU a
one-trial probe replaced a 1.16x profile with the workload's own settings. Now the old
profile is written whole to ``.autotune/replaced/`` as a tuned file of one profile, and
the search says what it replaced, and where it is: copied back over the recipe's tuned
file (or its profile pasted in), it is the answer it was.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from autotune.tuned import file as tuned_file


def keep(path: Path, recipe: str, hardware: str, into: Path) -> tuple[Path, dict[str, Any]] | None:
    """Write the profile `path` holds for `hardware` into the folder `into`, if it holds one; where, and the profile.

    The name says the recipe, the hardware and when the profile was made (its ``created``), so profiles replaced
    one after another each keep their own file.
    """
    if not Path(path).exists():
        return None
    old = tuned_file.read(path)["profiles"].get(hardware)
    if old is None:
        return None
    made = re.sub(r"[^0-9A-Za-z]+", "", str(old.get("created", "unknown")))
    slug = re.sub(r"[^0-9A-Za-z]+", "-", hardware).strip("-").lower()
    kept = (Path(into) / f"{recipe}.{slug}.{made}.tuned.toml").resolve()
    tuned_file.write_profile(kept, recipe, hardware, old)
    return kept, old


def said(kept: Path, old: dict[str, Any], new: dict[str, Any]) -> str:
    """The line a search prints when it replaced a profile: which, how fast it was, and where it is kept."""
    slower = ""
    if float(new.get("speedup", 0.0)) < float(old.get("speedup", 0.0)):
        slower = "; the new one states a smaller speed-up than the one it replaced"
    return (f"replaced the profile of study {old.get('study', '?')!r} ({old.get('speedup', '?')}x, made "
            f"{old.get('created', '?')} by `{old.get('command', '?')}`){slower}; it is kept in {kept}")
