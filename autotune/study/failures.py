"""Knob values that cannot work on this workload, found from the trials that failed.

The seed's model calls ``out.view(out.size(0), 400)``, which no channels_last
tensor satisfies: every trial with channels_last on fails with the same error.
Once a value has failed with a code error (not an OOM, a timeout or a crash,
which depend on the rest of the config) in every trial that used it, and often
enough, the search stops spending trials on it. Blame goes to the value that
explains the most failures first, so a value that only ever appeared beside a
broken one is not blamed with it. Where values explain as many, the error's
origin decides: one raised in a DataLoader worker blames a loader knob, any
other a knob of the step. Seen on an H200: mnist_cnn's first two failures had
both channels_last=on and prefetch_factor=4, and blaming the second (first by
name) let channels_last fail 10 more of a 30-trial search. A trial skipped by
prediction never ran its config, so its values are not cleared by it.

One failure is enough for a CUDA graph that a host sync in the step broke
(``autotune.trial.capture``): the sync is in the workload's code, so every
config with cuda_graph on fails the same way, whatever else it sets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from autotune.config import LOADER_KNOBS
from autotune.trial.capture import HOST_SYNC

MIN_FAILURES = 2  # one failure could be the rest of the config; two with the value always present is a pattern
WORKER_ERROR = "in DataLoader worker process"  # how torch words an exception re-raised from a worker


@dataclasses.dataclass(frozen=True)
class Finished:
    """What this module needs of a finished trial."""

    number: int
    config: Mapping[str, Any]
    ran: bool  # complete or pruned: the config trained
    reason: str | None  # the failure reason, if it failed


@dataclasses.dataclass(frozen=True)
class Hopeless:
    knob: str
    value: Any
    trials: tuple[int, ...]  # the failed trials this value explains
    reason: str  # the error they share (the first one's)
    rule: str = "failed in every trial that used it"  # why the value is not tried again

    def short(self) -> str:
        shown = {True: "on", False: "off"}[self.value] if isinstance(self.value, bool) else self.value
        return f"{self.knob}={shown} {self.rule} ({', '.join(map(str, self.trials))})"

    def describe(self) -> str:
        return f"{self.short()}: {self.reason}"


def hopeless_values(trials: Iterable[Finished], min_failures: int = MIN_FAILURES) -> list[Hopeless]:
    """The knob values to stop trying: cuda_graph=on after a host sync broke its capture, then the values that
    explain the most code errors."""
    trials = list(trials)
    ran_pairs = {(k, _key(v)) for t in trials if t.ran for k, v in t.config.items()}
    failed = [t for t in trials if not t.ran and (t.reason or "").startswith("error:")]
    found: list[Hopeless] = graph_broken_by_a_sync(trials)
    uncovered = {t.number: t for t in failed}
    while uncovered:
        counts: dict[tuple[str, Any], list[Finished]] = {}
        for t in uncovered.values():
            for k, v in t.config.items():
                if (k, _key(v)) not in ran_pairs:
                    counts.setdefault((k, _key(v)), []).append(t)
        if not counts:
            break
        (knob, key), blamed = max(counts.items(), key=lambda item: (len(item[1]), _plausible(*item), item[0][0]))
        if len(blamed) < min_failures:
            break
        value = blamed[0].config[knob]
        found.append(Hopeless(knob, value, tuple(sorted(t.number for t in blamed)), blamed[0].reason or ""))
        for t in blamed:
            uncovered.pop(t.number)
    return found


def _plausible(value: tuple[str, Any], failed: list[Finished]) -> bool:
    """Could `value`'s knob raise these errors where they were raised: a loader knob in a DataLoader worker, a knob
    of the step in the loop's own process."""
    in_a_worker = any(WORKER_ERROR in (t.reason or "") for t in failed)
    return (value[0] in LOADER_KNOBS) == in_a_worker


def graph_broken_by_a_sync(trials: Iterable[Finished]) -> list[Hopeless]:
    """cuda_graph=on, from the first trial whose capture a host sync in the step broke; none before that."""
    synced = sorted((t for t in trials if not t.ran and (t.reason or "").startswith(HOST_SYNC)), key=lambda t: t.number)
    if not synced:
        return []
    first = synced[0]
    return [Hopeless("cuda_graph", True, (first.number,), first.reason or "", "cannot capture this workload's step")]


def _key(value: Any) -> Any:
    # bool is an int to Python: keep True and 1 apart.
    return (type(value).__name__, value)


def blocks(config: Mapping[str, Any], hopeless: Iterable[Hopeless]) -> Hopeless | None:
    """The hopeless value this config uses, if any."""
    for h in hopeless:
        if h.knob in config and _key(config[h.knob]) == _key(h.value):
            return h
    return None
