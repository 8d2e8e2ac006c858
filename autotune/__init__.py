"""autotune: the fastest loader and loop settings that still train correctly, per machine.

    autotune search --recipe mnist_cnn          # writes recipes/mnist_cnn.tuned.toml
    autotune diagnose --recipe mnist_cnn        # why the GPU waits: health check and bottleneck verdict
    autotune report --recipe mnist_cnn          # the study's sensitivity map, history and importances

    from autotune import tuned_loader, tuned_step
    loader = tuned_loader(train_dataset, recipe="mnist_cnn")
    step = tuned_step(model, criterion, optimizer, recipe="mnist_cnn")

The names below load on first use: `import autotune` costs nothing, so the
command line and the trial processes it starts begin their work before torch
is imported (seconds on a large host).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {
    "NoProfileWarning": "autotune.api",
    "Tuned": "autotune.api",
    "load_tuned": "autotune.api",
    "tuned_loader": "autotune.api",
    "tuned_step": "autotune.api",
    "Config": "autotune.config",
    "Diagnosis": "autotune.diagnosis",
    "diagnose": "autotune.diagnosis",
    "DeviceLoader": "autotune.loop",
    "Step": "autotune.loop",
    "StudyReport": "autotune.reporting",
    "report": "autotune.reporting",
    "search_parallel": "autotune.scaleout",
    "SearchOptions": "autotune.search",
    "search": "autotune.search",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'autotune' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


if TYPE_CHECKING:
    from autotune.api import NoProfileWarning, Tuned, load_tuned, tuned_loader, tuned_step
    from autotune.config import Config
    from autotune.diagnosis import Diagnosis, diagnose
    from autotune.loop import DeviceLoader, Step
    from autotune.reporting import StudyReport, report
    from autotune.scaleout import search_parallel
    from autotune.search import SearchOptions, search
