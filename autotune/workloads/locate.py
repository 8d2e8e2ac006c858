"""Resolving ``--recipe`` to a workload file and its tuned file.

A recipe is the name that ties a workload (``recipes/<name>.py``) to its tuned
file (``recipes/<name>.tuned.toml``). ``--recipe NAME`` resolves like
``tune run``: ``./recipes/NAME.py``, then a path to a ``.py`` file, then a
built-in shipped with autotune (``autotune/workloads/builtins``).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from autotune.errors import AutotuneError

BUILTIN_DIR = Path(__file__).parent / "builtins"


class WorkloadError(AutotuneError, ValueError):
    """A recipe name, path or workload file that cannot be used; the message says why."""


@dataclasses.dataclass(frozen=True)
class RecipeRef:
    """Where a recipe's workload lives and where its tuned file goes."""

    name: str
    workload_path: Path
    tuned_path: Path
    builtin: bool


def replaced_builtin(ref: RecipeRef, cwd: Path | None = None) -> str | None:
    """What the search banner says of a local workload that has a built-in's name (the local one is used); None for
    any other.

    >>> replaced_builtin(RecipeRef("mnist_cnn", Path("recipes/mnist_cnn.py"), Path("x"), False), Path.cwd())
    './recipes/mnist_cnn.py, which replaces the built-in mnist_cnn'
    """
    if ref.builtin or not (BUILTIN_DIR / f"{ref.name}.py").is_file():
        return None
    cwd = cwd or Path.cwd()
    path = ref.workload_path if ref.workload_path.is_absolute() else cwd / ref.workload_path
    try:
        shown = f"./{path.relative_to(cwd)}"
    except ValueError:
        shown = str(path)
    return f"{shown}, which replaces the built-in {ref.name}"


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.py") if not p.stem.startswith("_"))


def resolve(recipe: str, cwd: Path | None = None) -> RecipeRef:
    """Resolve ``--recipe``: a name in ./recipes, a path to a .py file, or a built-in.

    >>> resolve("mnist_cnn").name
    'mnist_cnn'
    """
    cwd = cwd or Path.cwd()
    local_dir = cwd / "recipes"
    if recipe.endswith(".py") or "/" in recipe or "\\" in recipe:
        path = Path(recipe)
        path = path if path.is_absolute() else cwd / path
        if path.suffix != ".py":
            raise WorkloadError(f"a recipe path must name a `.py` file, but got {recipe!r}.")
        if not path.is_file():
            raise WorkloadError(f"recipe file {recipe!r} does not exist.")
        return RecipeRef(path.stem, path, path.with_name(path.stem + ".tuned.toml"), False)
    if not recipe.isidentifier():
        raise WorkloadError(f"a recipe name must be a Python identifier or a path to a `.py` file, but got {recipe!r}.")
    local = local_dir / f"{recipe}.py"
    if local.is_file():
        return RecipeRef(recipe, local, local_dir / f"{recipe}.tuned.toml", False)
    builtin = BUILTIN_DIR / f"{recipe}.py"
    if builtin.is_file():
        # A built-in's tuned file belongs to the user's project, not to the installed package.
        return RecipeRef(recipe, builtin, local_dir / f"{recipe}.tuned.toml", True)
    known = sorted({p.stem for p in local_dir.glob("*.py")} | set(builtin_names()))
    raise WorkloadError(
        f"unknown recipe {recipe!r}: not ./recipes/{recipe}.py, not a path, not a built-in. "
        f"Known recipes: {', '.join(known)}."
    )


def data_root() -> Path:
    """Where workloads keep data: $AUTOTUNE_DATA, else ./data as the seed does."""
    return Path(os.environ.get("AUTOTUNE_DATA", "./data"))
