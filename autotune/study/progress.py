"""The line a search prints per trial: its place in the study, what it measured or why it did not run, the best so far.

    [  2/40] 0:35  trial 9      1,261,696/s ±0.2% bs=1024 device-resident graph    best 1,261,696/s; predicted ...
"""

from __future__ import annotations

import statistics

from optuna.trial import FrozenTrial

from autotune.config import Config
from autotune.procs.trial_process import GAVE_UP, Outcome
from autotune.study import standing
from autotune.study.checks.families import SKIPPED
from autotune.study.clock.deadline import OUT_OF_TIME
from autotune.study.context import Setup
from autotune.study.planning.compile_cost import CANNOT_PAY
from autotune.study.planning.predict import PREDICTED
from autotune.study.planning.valuation import VALUED
from autotune.study.ranking import RULED_OUT
from autotune.study.shared import tickets
from autotune.text import elapsed, rate

# Pruned without a measurement: said as what was done, then why.
SAID_AS_THEY_ARE = (PREDICTED, GAVE_UP, SKIPPED, VALUED, OUT_OF_TIME, CANNOT_PAY, RULED_OUT)
ONCE_SAID_S = 0.1  # a stream's one-off work at its pass end (its short batches' new sizes) said from this many seconds


def say(setup: Setup, number: int, config: Config, outcome: Outcome, same: FrozenTrial | None,
              predicted: float | None = None) -> None:
    trials = setup.study.get_trials(deepcopy=False)
    done = len([t for t in tickets.started(trials) if t.state.is_finished()]) + 1
    total = max(done, tickets.target(setup.study, setup.options.trials))
    head = f"[{done:>3}/{total}] {elapsed(setup.elapsed())}"
    if outcome.state == "complete":
        assert outcome.result is not None
        value = outcome.result["samples_per_s"]
        # The best that can still be the answer: a config the parity check rejected holds none (standing).
        rejected = standing.rejected_families(setup.study)
        counts = not standing.in_rejected(config.as_dict(), rejected)
        best = max(value if counts else 0.0, standing.best_of(trials, rejected) or 0.0)
        if same is not None:
            what = f"{rate(value):>12}/s = trial {same.number}"
        else:
            flag = ("" if outcome.result.get("reliable", True) else " unreliable") + (
                " time-limited" if outcome.result.get("time_limited") else "")
            what = f"{rate(value):>12}/s ±{outcome.result['spread']:.1%}{flag}"
        tail = f"best {rate(best)}/s" if best else "no config that can win measured yet"
        if predicted and same is None:
            tail += f"; predicted {rate(predicted)}/s"
        if outcome.result.get("repeated"):
            tail += f"; each sample counted once: its {outcome.result['repeated']} workers each yield the whole stream"
        if outcome.result.get("first_batch_s") is not None:
            tail += f"; first batch {outcome.result['first_batch_s']:.1f} s"
        if (outcome.result.get("short_batches_once_s") or 0.0) >= ONCE_SAID_S:
            tail += f"; its pass end's new short batch sizes {outcome.result['short_batches_once_s']:.1f} s, once"
    elif outcome.state == "pruned" and (outcome.reason or "").startswith(SAID_AS_THEY_ARE):
        what, _, tail = (outcome.reason or "").partition(": ")  # what was done, then why it cannot win
    elif outcome.state == "pruned":
        windows = outcome.windows
        what = f"pruned at window {len(windows)}: {rate(statistics.median(windows)) + '/s' if windows else '-'}"
        tail = "clearly worse than the best"
    else:
        reason = outcome.reason or "unknown"
        what, tail = f"failed: {reason if len(reason) <= 110 else reason[:107] + '...'}", ""
    if same is not None and outcome.state != "complete":
        tail = f"(as trial {same.number}, the same config; not measured again)"
    setup.echo(f"{head}  trial {number:<3} {what:<28} {config.describe():<58} {tail}".rstrip())

