"""The parity check inside the search: made once per search (``parity``), kept in the study as it goes
(``kept_check``), its baseline run made early under ``--gpus`` (``baseline_run``), and math families judged as soon as
one of their configs is a contender (``families``); why: docs/search.md#the-parity-check-inside-the-search."""
