"""Knob values that cannot work on this workload, found from the trials that failed.

mnist_cnn, the MNIST CNN of the Stack Exchange question the project began
from, calls ``out.view(out.size(0), 400)``, which no channels_last tensor
satisfies: every trial with channels_last on fails with the same error.
Once a value has failed with a code error (not an OOM, a timeout or a crash,
which depend on the rest of the config) in every trial that used it, and often
enough, the search stops spending trials on it. Blame goes to the value that
explains the most failures first, so a value that only ever appeared beside a
broken one is not blamed with it. Where values explain as many, the error's
origin narrows them: one raised in a DataLoader worker blames loader knobs, any
other knobs of the step. Values still tied are blamed together: only a config
that sets every one of them is skipped, until a failure without one of them (or
a trial that ran one) tells them apart; meanwhile the sampler may still propose
them together, and each such proposal is skipped as a failed trial. Blaming one
of them by its name, or the step's knobs first, blamed a value that was not
broken: the broken one failed on, or good seeds were skipped
(docs/search.md#failure-learning). A trial skipped by prediction never ran its
config, so its values are not cleared by it.

One failure is enough for a CUDA graph that a host sync in the step broke
(``autotune.trial.capture``): the sync is in the workload's code, so every
config with cuda_graph on fails the same way, whatever else it sets. So for
compile (``autotune.loop.compiled``): a graph break is in the workload's code,
whatever the mode; recompilations follow the batches' shapes, which only
pad_multiple and bucketing change; a compiler error is its mode's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from autotune.config import COMPILE_CHOICES, LOADER_KNOBS
from autotune.loop.compiled import COMPILER_ERROR, GRAPH_BREAK, RECOMPILED
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
    values: tuple[tuple[str, Any], ...]  # (knob, value) pairs: a config that sets all of them is not tried again
    trials: tuple[int, ...]  # the failed trials these values explain
    reason: str  # the error they share (the first one's)
    rule: str = ""  # why the values are not tried again, where it is not that they failed every time

    def short(self) -> str:
        together = len(self.values) > 1
        rule = self.rule or ("failed together in every trial that used them all" if together
                             else "failed in every trial that used it")
        return f"{' with '.join(_shown(k, v) for k, v in self.values)} {rule} ({', '.join(map(str, self.trials))})"

    def describe(self) -> str:
        return f"{self.short()}: {self.reason}"


def hopeless_values(trials: Iterable[Finished], min_failures: int = MIN_FAILURES) -> list[Hopeless]:
    """The knob values to stop trying: cuda_graph=on after a host sync broke its capture, the compile values a
    failed compile rules out (``compile_failed``), then the values that explain the most code errors."""
    trials = list(trials)
    ran_pairs = {(k, _key(v)) for t in trials if t.ran for k, v in t.config.items()}
    failed = [t for t in trials if not t.ran and (t.reason or "").startswith("error:")]
    found: list[Hopeless] = graph_broken_by_a_sync(trials) + compile_failed(trials)
    uncovered = {t.number: t for t in failed}
    while uncovered:
        counts: dict[tuple[str, Any], list[Finished]] = {}
        for t in uncovered.values():
            for k, v in t.config.items():
                if (k, _key(v)) not in ran_pairs:
                    counts.setdefault((k, _key(v)), []).append(t)
        if not counts:
            break
        rank = {pair: (len(ts), _plausible(pair, ts)) for pair, ts in counts.items()}
        first = max(counts, key=lambda pair: (*rank[pair], pair[0]))
        blamed = counts[first]
        if len(blamed) < min_failures:
            break
        numbers = tuple(sorted(t.number for t in blamed))
        # Values that explain exactly these failures, as plausibly: nothing here tells them apart.
        tied = sorted(pair for pair, ts in counts.items()
                      if rank[pair] == rank[first] and tuple(sorted(t.number for t in ts)) == numbers)
        values = tuple((knob, blamed[0].config[knob]) for knob, _ in tied)
        found.append(Hopeless(values, numbers, blamed[0].reason or ""))
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
    rule = "cannot capture this workload's step"
    return [Hopeless((("cuda_graph", True),), (first.number,), first.reason or "", rule)]


# What a Dynamo trace of the step sees of the batch besides its shape: where it comes from, its memory format and
# its dtype. A graph break can come from one of them, so a break rules out compile in that layout only, and
# everywhere once a second layout breaks too (docs/compile.md).
BATCH_LAYOUT = ("placement", "channels_last", "device_normalize")


def compile_failed(trials: Iterable[Finished]) -> list[Hopeless]:
    """The compile values a failed compile rules out, from the first failure of each kind; none before one.

    A graph break rules out every mode with that batch layout (BATCH_LAYOUT), and every mode at all once a
    second layout broke too; recompilations every mode at the failed trial's pad_multiple and bucketing; a
    compiler error its own mode.
    """
    found: list[Hopeless] = []
    modes = COMPILE_CHOICES[1:]
    for kind, rule in ((GRAPH_BREAK, "cannot compile this workload's step as one graph"),
                       (RECOMPILED, "recompiles past Dynamo's limit at these shapes"),
                       (COMPILER_ERROR, "failed to compile")):
        failed = sorted((t for t in trials if not t.ran and (t.reason or "").startswith(kind)), key=lambda t: t.number)
        if not failed:
            continue
        first = failed[0]
        scope: tuple[tuple[str, Any], ...] = ()
        if kind == RECOMPILED:
            scope = tuple((k, first.config[k]) for k in ("pad_multiple", "bucketing") if k in first.config)
        if kind == GRAPH_BREAK:
            layouts = {tuple((k, _key(t.config.get(k))) for k in BATCH_LAYOUT): t for t in reversed(failed)}
            if len(layouts) == 1:  # one layout broke: others may not (a view of a channels_last batch)
                scope = tuple((k, first.config[k]) for k in BATCH_LAYOUT if k in first.config)
            # else two layouts broke: the break is the model's, and every mode goes
        for mode in (first.config.get("compile"),) if kind == COMPILER_ERROR else modes:
            found.append(Hopeless((("compile", mode), *scope), (first.number,), first.reason or "", rule))
    return found


def _key(value: Any) -> Any:
    # bool is an int to Python: keep True and 1 apart.
    return (type(value).__name__, value)


def _shown(knob: str, value: Any) -> str:
    return f"{knob}={({True: 'on', False: 'off'}[value] if isinstance(value, bool) else value)}"


def blocks(config: Mapping[str, Any], hopeless: Iterable[Hopeless]) -> Hopeless | None:
    """The hopeless values this config sets, all of them, if any."""
    for h in hopeless:
        if all(knob in config and _key(config[knob]) == _key(value) for knob, value in h.values):
            return h
    return None
