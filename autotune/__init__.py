"""autotune: the fastest loader and loop settings that still train correctly, per machine.

    autotune search --recipe mnist_cnn          # writes recipes/mnist_cnn.tuned.toml
    autotune diagnose --recipe mnist_cnn        # why the GPU waits: health check and bottleneck verdict
    autotune report --recipe mnist_cnn          # the study's sensitivity map, history and importances

    from autotune import tuned_loader, tuned_step
    loader = tuned_loader(train_dataset, recipe="mnist_cnn")
    step = tuned_step(model, criterion, optimizer, recipe="mnist_cnn")
"""

from autotune.api import NoProfileWarning, Tuned, load_tuned, tuned_loader, tuned_step
from autotune.config import Config
from autotune.diagnosis import Diagnosis, diagnose
from autotune.loop import DeviceLoader, Step
from autotune.reporting import StudyReport, report
from autotune.scaleout import search_parallel
from autotune.search import SearchOptions, search

__all__ = [
    "Config",
    "DeviceLoader",
    "Diagnosis",
    "NoProfileWarning",
    "SearchOptions",
    "Step",
    "StudyReport",
    "Tuned",
    "diagnose",
    "load_tuned",
    "report",
    "search",
    "search_parallel",
    "tuned_loader",
    "tuned_step",
]
