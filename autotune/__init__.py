"""autotune: the fastest loader and loop settings that still train correctly, per machine.

    autotune search --recipe mnist_cnn          # writes recipes/mnist_cnn.tuned.toml
    autotune diagnose --recipe mnist_cnn        # why the GPU waits: health check and bottleneck verdict
    autotune report --recipe mnist_cnn          # the study's sensitivity map, history and importances

    from autotune import tuned_loader, tuned_step
    loader = tuned_loader(train_dataset, recipe="mnist_cnn")
    step = tuned_step(model, criterion, optimizer, recipe="mnist_cnn")

The packages, by concept, from the top: ``cli``; ``reporting`` and
``diagnosis``; ``study`` (the search); ``procs`` (every process autotune
starts); ``trial`` (what runs in a trial process); ``parity`` (is a faster
config still the same training?); ``tuned`` (the tuned file and its API);
``loop`` (loader and step); ``workloads`` (the user's file). Under them all, the
bottom layer every package may import: ``config``, ``knobs``, ``options``,
``errors``, ``batch``, ``text``, ``exports``. Imports run one way, down
(tests/test_layers.py). The names below load on first use:
``import autotune`` costs nothing, so the command line and the trial processes
it starts begin their work before torch is imported (seconds on a large host).
"""

from autotune.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AutotuneError": "errors",
        "NoProfileWarning": "tuned.api",
        "Tuned": "tuned.api",
        "load_tuned": "tuned.api",
        "tuned_loader": "tuned.api",
        "tuned_step": "tuned.api",
        "Config": "config",
        "Diagnosis": "diagnosis.run",
        "diagnose": "diagnosis.run",
        "DeviceLoader": "loop.loader",
        "Step": "loop.step",
        "StudyReport": "reporting.contents",
        "report": "reporting.study",
        "search_parallel": "study.parallel",
        "SearchOptions": "options",
        "search": "study.run",
    },
)
