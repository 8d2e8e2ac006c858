"""The search: an Optuna study over the knobs, measured in trial processes.

``search()`` (``run``) is four steps, each a module of this package:

- ``setup``: the workload, the machine, the space of knobs, and the study they are measured in;
- ``trials``: take the study's tickets one by one and measure each config in a trial process, unless it need not
  run (``planning.skip``);
- ``finalists``: the fastest contenders that pass the parity check, measured again beside the baseline (``rounds``);
- ``profile``: the winner and its profile, written to the tuned file (``answer``: the workload's own settings when
  nothing faster may win; ``ending``: what a rerun reuses when only the write failed).

Below the steps, which import only downwards (``tests/test_layers.py`` keeps the order):

- ``standing``: the complete trials that can still be the answer (none of a math family the parity check rejected),
  against whose best every rule weighs a config;
- ``context``: ``Prepared``, ``Setup`` and ``SearchError``, which every part takes or raises;
- ``ranking``: the trials ranked by the time each config takes to finish the declared run;
- ``pools``: the trial processes one search uses;
- ``space``: the knobs and their domains (the only place that calls ``suggest_*``), the seeds, the pruner;
- ``shared``: one study for many searchers: its storage, tickets, heartbeats, the writer's claim;
- ``clock``: when no trial may start, when one is given up, what a round costs, when patience ends the trials;
- ``failed``: knob values learned hopeless from failed trials, seeds retried without them, failures of a changed
  workload measured again;
- ``planning``: a grid of configs valued from their parts (step and loader rates measured apart), and why a config
  need not run end to end (memory, the loader's ceiling, its predicted rate, a compile that cannot pay);
- ``checks``: the parity check as the search makes it, and the verdicts by math family during the trials.

Above them, ``gpus``: ``--gpus``, a searcher process per GPU sharing one study. What a search is asked to do is
``autotune.options``. Optuna is used here and by ``autotune.reporting``, which reads a stored study; the code that
measures (``autotune.trial``, ``autotune.loop``) never imports it. How the search spends its time, and the
measurements behind each of its rules: docs/search.md.
"""

from autotune.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "SearchError": "context",
        "SearchResult": "profile",
        "search": "run",
        "search_parallel": "gpus.parallel",
        "SpaceError": "space.domains",
        "parse_fix": "space.domains",
    },
)
