"""`autotune diagnose`: why the GPU waits, from the loop fed three ways (the second seed's stages 1 and 2).

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
