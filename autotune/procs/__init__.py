"""Every process autotune starts, and how each one stops: see the NOTE in ``autotune.procs.lifecycle``.

- ``lifecycle``: start, ask to exit, stop, kill; signals; a parent's death;
- ``trial_process``: one trial process, seen from its parent (requests out, events back);
- ``pool``: the trial processes of one device, reused while healthy, replaced when not;
- ``searchers``: the ``--gpus`` searcher processes;
- ``early``: what the command line starts before it imports torch;
- ``trial_main``: the trial process's entry point (``python -m ...``); a ``--gpus`` searcher's is
  ``autotune.study.gpus.searcher_main``.
"""

from autotune.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "stop_all": "lifecycle",
        "stop_on_signals": "lifecycle",
        "Outcome": "trial_process",
        "TrialProcess": "trial_process",
        "TrialPool": "pool",
        "GpusError": "searchers",
        "Searcher": "searchers",
        "parse_gpus": "searchers",
        "StartedEarly": "early",
        "start_early": "early",
    },
)
