"""Lazy re-exports for a package's ``__init__``: its public names load on first use.

A trial process and the command line start their work before torch is imported
(seconds on a large host), and importing ``autotune.options`` runs
``autotune/study/__init__.py`` first. So no package ``__init__`` imports its
modules eagerly; each lists its names and where they live::

    __all__, __getattr__, __dir__ = lazy_exports(__name__, {"search": "run", "SearchOptions": "options"})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(
    package: str, where: dict[str, str]
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """`__all__`, a module `__getattr__` and `__dir__` that import `package.<where[name]>` when `name` is first read."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        setattr(sys.modules[package], name, value)  # once loaded, a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted([*vars(sys.modules[package]), *where])

    return sorted(where), __getattr__, __dir__
