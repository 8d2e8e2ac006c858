"""The plan: configs valued from their parts before any is measured end to end.

``valuation`` predicts a config's rate from its step and loader rates, measured apart; ``plan`` values a grid and
queues its best; ``balance`` solves the share of a hybrid decode; ``skip`` says why a config need not run end to end,
from ``memory`` (it would run out of device memory), ``predict`` (its loader cannot feed the best so far) or its
valuation (its predicted rate is clearly worse); ``compile_cost`` says when its compile alone outlasts the best
declared run. Why: docs/search.md#the-plan-and-valuation."""
