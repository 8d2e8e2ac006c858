"""The search: an Optuna study over the knobs, measured in trial processes.

``search()`` (``run``) is four steps, each in a module of its own:

- ``setup``: the workload, the machine, the ``space`` of knobs, the study and its ``seeds``;
- ``trials``: after the baseline, value a grid of configs from their parts and queue the fastest
  (``plan``); take tickets (``tickets``, ``sharing``) one at a time while the clock allows (``deadline``),
  measure each config unless it need not run (``skip``: memory, the loader's ceiling, its value from its
  parts, ``valuation``, ``predict``), judge each new contender's math family
  (``families``), learn hopeless values (``failures``) and retry seeds without them (``seed_retry``),
  stop clearly worse trials early (``pruner``), and end once many in a row found nothing faster
  (``patience``);
- ``finalists``: the parity check (``autotune.parity``; ``kept_check``: its verdicts kept in the study as they
  are reached, taken up by a rerun after a stop) and the rounds measured again;
- ``profile``: the winner and its profile, written to the tuned file (``answer``: the workload's own
  settings when nothing faster may win; ``ending``: what a rerun reuses when only the write failed).

Around them: ``storage`` (SQLite or PostgreSQL), ``claim`` (which searcher
writes), ``pools`` (the search's trial processes), ``baseline_run``,
``memory`` (batch sizes too large for the device), ``predict`` (configs that
cannot win), ``content`` (what a trial measured), ``sharing`` (tickets and
heartbeats of one study), and ``parallel``/``searcher``/``searcher_main``
(``--gpus``: a searcher process per GPU). What a search is asked to do is
``autotune.options``.

Optuna is used here and by ``autotune.reporting``, which reads a stored study;
the code that measures (``autotune.trial``, ``autotune.loop``) never imports it.
"""

from autotune.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
                "SearchError": "setup",
        "SearchResult": "profile",
        "search": "run",
        "search_parallel": "parallel",
        "SpaceError": "space",
        "parse_fix": "space",
    },
)
