"""autotune: the fastest loader and loop settings that still train correctly, per machine.

    autotune search --recipe mnist_cnn          # writes recipes/mnist_cnn.tuned.toml

    from autotune import tuned_loader, tuned_step
    loader = tuned_loader(train_dataset, recipe="mnist_cnn")
    step = tuned_step(model, criterion, optimizer, recipe="mnist_cnn")
"""

from autotune.api import NoProfileWarning, Tuned, load_tuned, tuned_loader, tuned_step
from autotune.config import Config
from autotune.loop import DeviceLoader, Step
from autotune.scaleout import search_parallel
from autotune.search import SearchOptions, search

__all__ = [
    "Config",
    "DeviceLoader",
    "NoProfileWarning",
    "SearchOptions",
    "Step",
    "Tuned",
    "load_tuned",
    "search",
    "search_parallel",
    "tuned_loader",
    "tuned_step",
]
