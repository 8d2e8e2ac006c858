"""The space a study searches: the knobs and their domains (``domains``, the only place that calls ``suggest_*``),
the configs measured first (``seeds``, docs/search.md#seeds), and the pruner that stops a clearly worse trial
(``pruner``, docs/search.md#pruning)."""
