"""The space a study searches: the knobs and their domains (``domains``, the only place that calls ``suggest_*``),
the configs measured first (``seeds``), and the pruner that stops a clearly worse trial (``pruner``)."""
