"""A parity check's state as plain data: what a search stopped and run again takes up instead of checking again.

A check's verdicts rest on its baseline run, and that run's length on what the
check was sized for: a check made afresh after a stop would train the baseline
for another length (sized for the contenders left, not the space's largest batch;
its budget spent anew) and may judge otherwise (docs/parity.md, "A stopped search
keeps its check", has the run that showed it).

``state`` is everything the check has reached: the verdicts, the baseline's run
and the length it was made at, what the runs cost, the checks made without a run
(images, gradients), and what a verdict rules out for others. ``take_up`` makes a
new check of the same search go on from it, so a verdict once reached stands.
The search keeps it in the study (``autotune.study.checks.kept_check``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from autotune.config import Config
from autotune.parity.inputs import InputsVerdict
from autotune.parity.numerics import NumericsVerdict
from autotune.parity.run import PROBE_SAMPLES, ParityRun
from autotune.parity.verdict import CANDIDATE_STEPS, ParityVerdict

if TYPE_CHECKING:
    from autotune.parity.check import ParityCheck

VERSION = 1  # a state of another layout is not taken up: the check starts afresh


def state(check: ParityCheck) -> dict[str, Any]:
    """Everything `check` has reached, as JSON-ready data."""
    budget = check.budget
    return {
        "version": VERSION,
        "samples": check.samples,
        "window": check.window,
        "probe_samples": check.probe_samples,
        "conclusive": check.base.conclusive,
        "extended": check.base.extended,
        "runs": check.runs,
        "budget": {"seconds": budget.seconds, "baseline_seconds": budget.baseline_seconds,
                   "last_base_s": budget.last_base_s},
        "baseline_run": None if check.base.run is None else check.base.run.as_dict(),
        "baseline_from": check.base.where,
        "baseline_needed": check.base.needed,
        "baseline_failed": check.base.failed,
        "baseline_out_of_time": check.base.out_of_time,
        "baseline_stopped_short": check.base.stopped_short,
        "verdicts": [[c.as_dict(), dataclasses.asdict(v)] for c, v in check.verdicts.items()],
        # The verdicts that stand for every config with their numerics, and the (batch, rate) pairs a run rejected by a
        # margin, each with the run's verdict at that rate (a config tried at several has one verdict in `verdicts`).
        "by_numerics": [[c.as_dict(), dataclasses.asdict(v)] for c, v in check._by_numerics.values()],
        "batch_rejected": [[batch, lr, c.as_dict(), dataclasses.asdict(v)]
                           for (batch, lr), (c, v) in check.rejected.by_rate.items()],
        "inputs": None if check.inputs.verdict is None else dataclasses.asdict(check.inputs.verdict),
        "numerics": [[list(key), dataclasses.asdict(v)] for key, v in check.amp.verdicts.items()],
    }


def take_up(check: ParityCheck, kept: dict[str, Any]) -> bool:
    """Make `check`, new and unused, go on from `kept` (``state`` of a check of the same search); False, and `check`
    untouched, when `kept` is of another layout."""
    if kept.get("version") != VERSION:
        return False
    # Read all of it before changing the check: a state that does not read leaves the check as it was.
    verdicts = {Config.from_dict(c): ParityVerdict(**v) for c, v in kept["verdicts"]}
    by_numerics = [(Config.from_dict(c), ParityVerdict(**v)) for c, v in kept["by_numerics"]]
    batch_rejected = {(batch, lr): (Config.from_dict(c), ParityVerdict(**v))
                      for batch, lr, c, v in kept["batch_rejected"]}
    base = None if kept["baseline_run"] is None else ParityRun.from_dict(kept["baseline_run"])
    inputs = None if kept["inputs"] is None else InputsVerdict(**kept["inputs"])
    amp = {(k[0], k[1], k[2]): NumericsVerdict(**v) for k, v in kept["numerics"]}
    budget = kept["budget"]

    check.samples, check.window = kept["samples"], kept["window"]
    check.probe_samples = int(kept.get("probe_samples", PROBE_SAMPLES))  # absent from a state kept before it was
    check.base.conclusive, check.base.extended, check.runs = kept["conclusive"], kept["extended"], kept["runs"]
    check.budget.seconds, check.budget.baseline_seconds = budget["seconds"], budget["baseline_seconds"]
    check.budget.carried_s = budget["seconds"]  # an earlier run's: not this run's cost (its budget line)
    check.budget.last_base_s = budget["last_base_s"]
    check.base.run, check.base.where = base, kept["baseline_from"]
    check.base.needed, check.base.failed = kept["baseline_needed"], kept["baseline_failed"]
    check.base.out_of_time = kept.get("baseline_out_of_time")  # absent from a state kept before it was
    check.base.stopped_short = bool(kept.get("baseline_stopped_short"))  # likewise
    if check.base.stopped_short:  # every run is as long as the baseline's short one: no batch whose 8 steps are longer
        check.batch_limit = min(check.batch_limit, max(check.baseline.batch_size, check.samples // CANDIDATE_STEPS))
    check.verdicts = verdicts
    check._by_numerics = {check.key(c): (c, v) for c, v in by_numerics}
    check.rejected.by_rate = batch_rejected
    check.inputs.verdict = inputs
    check.amp.verdicts = amp
    return True
