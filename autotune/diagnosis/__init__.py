"""`autotune diagnose`: why the GPU waits: a health check of the loop, then bottleneck attribution from it fed
three ways.

- ``run``: measure the feeds of one loop in this process (``diagnose``), each through
  ``autotune.trial.probe``, which the search's valuation uses too;
- ``bottleneck``: the verdict, a pure function of the measured ceilings;
- ``tables``: the tables the command prints.
"""

from autotune.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "DiagnoseError": "run",
        "Diagnosis": "run",
        "diagnose": "run",
        "Bottleneck": "bottleneck",
        "Measured": "bottleneck",
        "decide": "bottleneck",
        "render": "tables",
    },
)
