"""The search's clock: when no trial may start and when one is given up (``deadline``), what a finalists' round costs
(``round_cost``), and when trials that stopped finding end the search early (``patience``). Why each rule is as it is:
docs/search.md#the-clock."""
