"""The study's trials ranked: by the time each config takes to finish the workload's declared run.

The declared run is the workload's `epochs` over its data set, one-time costs included (a data set materialised on the
device, a graph captured, a step compiled): a config ranks by how soon it finishes that run, not by its steady
samples/s alone. The clock, the checks and the finalists all rank the same way, from these helpers.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from autotune.config import Config
from autotune.parity.check import ParityCheck
from autotune.streams.passes import DUPLICATED
from autotune.study.context import Setup

Results = dict[Config, list[dict[str, Any]]]  # each config's measurements, one per round


def declared_run_s(result: Mapping[str, Any], epochs: int, size: int) -> float:
    """Seconds the workload's declared run (`epochs` epochs of `size` samples) takes at a measurement, one-time costs
    included: the data set materialised on the device, and the set-up before the first timed step (the first
    iterator, warm-up, graph capture, cuDNN's autotuning). A measurement without `epoch_s` is timed by its rate.

    >>> declared_run_s({"samples_per_s": 1000.0, "epoch_s": 2.0, "setup_s": 0.5, "materialize_s": 20.0}, 3, 2000)
    26.5
    """
    epoch_s = result.get("epoch_s") or size / result["samples_per_s"]
    return (result.get("setup_s") or 0.0) + (result.get("materialize_s") or 0.0) + epochs * epoch_s


def run_s(setup: Setup, results: Results, config: Config) -> float:
    """The median over the rounds of `config`'s declared run, one-time costs included (`declared_run_s`)."""
    epochs = setup.workload.defaults["epochs"]
    return statistics.median(declared_run_s(r, epochs, setup.facts.size) for r in results[config])


def trial_run_s(setup: Setup, trial: FrozenTrial) -> float:
    """A complete trial's `declared_run_s`."""
    result = trial.user_attrs.get("result") or {"samples_per_s": trial.value}
    return declared_run_s(result, setup.workload.defaults["epochs"], setup.facts.size)


def ranked(setup: Setup) -> dict[Config, int]:
    """Distinct complete configs, shortest declared run first, each with that trial's number; not the baseline.

    The workload's declared run decides, not steady samples/s: one-time costs (a data set materialised on the
    device, a graph captured) count as often as the run pays them.
    """
    complete = sorted(setup.study.get_trials(states=(TrialState.COMPLETE,)), key=lambda t: trial_run_s(setup, t))
    chosen: dict[Config, int] = {}
    for t in complete:
        config = setup.config_of(t)
        if config not in chosen and config != setup.baseline:
            chosen[config] = t.number
    return chosen


def contenders(setup: Setup) -> dict[Config, int]:
    """The ranked configs whose trial beat the baseline's declared run or its samples/s: a config slower on both is
    never recommended; one faster only in samples/s is measured beside the winner, to state what it would cost.
    Every ranked config, where the baseline's workers repeat its stream's samples (it cannot be the answer)."""
    complete = setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    own = [t for t in complete if setup.config_of(t) == setup.baseline]
    floor_rate = max((t.value or 0.0 for t in own), default=0.0)
    floor_run_s = min((trial_run_s(setup, t) for t in own), default=math.inf)
    if stream_refusal(setup, setup.baseline) is not None:  # its workers repeat its stream's samples: it cannot win
        floor_rate, floor_run_s = 0.0, math.inf
    faster = {
        setup.config_of(t) for t in complete if (t.value or 0.0) > floor_rate or trial_run_s(setup, t) < floor_run_s
    }
    return {c: n for c, n in ranked(setup).items() if c in faster}


def rate_leader(setup: Setup, found: Mapping[Config, int]) -> Config | None:
    """The config among `found` whose trial had the highest steady samples/s: what ranking by rate would pick."""
    best: dict[Config, float] = {}
    for t in setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        config = setup.config_of(t)
        if config in found:
            best[config] = max(best.get(config, 0.0), t.value or 0.0)
    return max(best, key=lambda c: best[c], default=None)


def with_rate_leader(setup: Setup, found: Mapping[Config, int], chosen: list[Config],
                     check: ParityCheck | None = None) -> list[Config]:
    """`chosen`, and the rate leader among `found` when it is not in it (and trains like the baseline, when checked).

    Measured in the same rounds as the winner, it lets the profile state both picks from numbers of one run.
    """
    leader = rate_leader(setup, found)
    if not chosen or leader is None or leader in chosen:
        return chosen
    if check is None:
        return [*chosen, leader]
    return [*chosen, *check.select([leader], want=1, max_runs=1)]


def baseline_rate(setup: Setup) -> float | None:
    """The baseline's samples/s in its trials (the median), which bounds the parity runs' length."""
    values = [t.value for t in setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
              if t.value is not None and "config" in t.user_attrs and setup.config_of(t) == setup.baseline]
    return statistics.median(values) if values else None


def learning_rate(setup: Setup, best: Config, parity_record: dict[str, Any] | None) -> dict[str, Any]:
    """The profile's `lr`, `lr_rule` and `lr_reason`: the rate the parity check passed `best` at, and why that one."""
    if best.batch_size == setup.baseline.batch_size:
        why = "the workload's own batch size keeps its own learning rate"
        return {"lr": setup.lr(best), "lr_rule": setup.lr_rule.name, "lr_reason": why}
    if parity_record is not None and "lr_rule" in parity_record:
        return {k: parity_record[k] for k in ("lr", "lr_rule", "lr_reason")}
    why = setup.lr_rule.why if setup.options.parity_check else f"{setup.lr_rule.why}; not checked (--no-parity-check)"
    return {"lr": setup.lr(best), "lr_rule": setup.lr_rule.name, "lr_reason": why}


RULED_OUT = "ruled out, its workers lose or repeat the stream's samples"  # how such a trial's reason begins


def stream_refusal(setup: Setup, config: Config) -> str | None:
    """Why `config`'s worker count loses or repeats its stream's samples (``autotune.streams.passes``); None else."""
    if config.placement != "stream" or not setup.facts.stream_refused:
        return None
    return dict(setup.facts.stream_refused).get(config.num_workers)


def counted_once(setup: Setup, config: Config, result: dict[str, Any]) -> dict[str, Any]:
    """`result` as samples/s of distinct samples: a config whose every worker yields the whole stream (only the
    baseline is measured so: every speed-up is stated against it) makes each sample `num_workers` times."""
    if stream_refusal(setup, config) != DUPLICATED:
        return result
    copies = config.num_workers
    counted = {**result, "repeated": copies}
    for key in ("samples_per_s", "steady_samples_per_s"):
        if counted.get(key) is not None:
            counted[key] = counted[key] / copies
    if counted.get("epoch_s") is not None:
        counted["epoch_s"] = counted["epoch_s"] * copies  # a pass of distinct samples takes that many passes
    return counted
