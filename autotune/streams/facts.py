"""What a stream allows, read from its first samples in one process, as ``autotune.trial.facts`` reads a data set.

A stream is read in order, so its facts come from the first samples it yields: the shape of a batch made the
workload's way, its bytes, whether batches repeat one shape, and what a sample costs to make (timed once the first
samples are out: opening a shard and filling a shuffle buffer are the time to the first batch, not a sample's cost).
Its length is one pass: the workload's ``samples_per_epoch``, else its own ``len()``, else unknown (0).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from typing import Any

import torch
from torch.utils.data import default_collate

from autotune import batch as batches
from autotune.knobs import DataFacts
from autotune.loop.buckets import pad_refusal
from autotune.streams import passes, sources
from autotune.workloads import Workload
from autotune.workloads.locate import WorkloadError

PROBE_BATCHES, PROBE_SAMPLES = 4, 8  # as autotune.trial.facts reads a data set by index
TIMED_SAMPLES = 16  # samples timed for a sample's cost, after the probes
BUCKET_REFUSAL = "a stream has no index to group samples by length; its order is its own"
ORDER_PROBLEM = ("DEFAULTS['shuffle'] is True, but build_dataset() returns a stream (an IterableDataset), whose order "
                 "is its own (its shard order, its shuffle buffer) and which the DataLoader cannot shuffle: set "
                 "shuffle=False or leave it out")


def read_stream_facts(dataset: Any, workload: Workload, world_size: int = 1) -> DataFacts:
    """The facts of the stream `dataset` as `workload` batches it; a stream the workload misuses is a WorkloadError."""
    if workload.defaults.get("shuffle") is True:
        raise WorkloadError(f"workload {workload.path}: {ORDER_PROBLEM}")
    if workload.build_sampler is not None:
        raise WorkloadError(f"workload {workload.path}: build_sampler() orders samples by index, but build_dataset() "
                            f"returns a stream (an IterableDataset), which has none")
    collate = workload.collate_fn or default_collate
    try:
        samples = list(itertools.islice(iter(dataset), PROBE_BATCHES * PROBE_SAMPLES))
    except Exception as exc:
        raise WorkloadError(f"workload {workload.path}: reading its stream's first samples failed: "
                            f"{sources.failure(exc)}") from exc
    if not samples:
        raise WorkloadError(f"workload {workload.path}: build_dataset() returned a stream that yields no sample")
    k = min(PROBE_SAMPLES, len(samples))
    probes = [collate(samples[j * k:(j + 1) * k]) for j in range(len(samples) // k)]
    for probe in probes:
        if workload.count(probe) != k:
            raise WorkloadError(f"workload {workload.path}: a batch of {k} samples counts {workload.count(probe)}; "
                                f"declare samples_in(batch) to count a batch's samples")
    first = probes[0]
    cpu_s, share = _sample_cost(dataset, collate)
    declared = int(workload.defaults.get("samples_per_epoch") or sources.length(dataset) or 0)
    return DataFacts(
        size=declared,
        stream_declared=declared,
        sample_bytes=max(1, sum(t.element_size() * t.numel() for t in batches.leaves(first)) // k),
        image_4d=any(t.dim() == 4 and t.is_floating_point() for t in batches.leaves(first)),
        static_shapes=batches.varying(probes) is None,
        deterministic=False,  # never kept on the device: whether a sample repeats itself does not matter
        device_dataset=False,
        load_cpu_share=share,
        varying=batches.varying(probes) or "",
        unstackable="a stream is read as it comes",
        load_cpu_s=cpu_s,
        pad_refused=pad_refusal(workload.collate_fn),
        bucket_refused=BUCKET_REFUSAL,
        sample_shapes=batches.sample_shapes(first),
        stream=sources.describe(dataset),
        shards=sources.shards(dataset),
        world_size=world_size,
    )


def _sample_cost(dataset: Any, collate: Any) -> tuple[float, float]:
    """(CPU seconds one process spends on a sample, its CPU over wall time), timed on one thread past the first
    samples: a worker's steady cost, not the time to the first batch."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        it = iter(dataset)
        warm = list(itertools.islice(it, PROBE_SAMPLES))
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        timed = list(itertools.islice(it, TIMED_SAMPLES))
        if timed:
            collate(timed)
        cpu, wall = time.thread_time() - cpu0, time.perf_counter() - wall0
    finally:
        torch.set_num_threads(threads)
    n = len(timed) or len(warm) or 1
    return cpu / n, 1.0 if wall < 0.005 else min(1.0, cpu / max(wall, 1e-9))


def most_workers(facts: DataFacts, most: int) -> int:
    """The most DataLoader workers worth trying on a stream: `most`, within its shards shared by the ranks (a worker
    beyond them reads nothing), and 1 when every count above it failed the pass check; `most` for a data set read by
    index."""
    if not facts.stream:
        return most
    if facts.shards is not None:
        most = min(most, max(1, facts.shards // max(1, facts.world_size)))
    refused = {w for w, _ in facts.stream_refused}
    if refused and all(w in refused for w in range(2, most + 1)):
        most = 1  # none of them keeps the stream's samples: one worker, or the loop's own process, reads it
    return most


def with_pass_check(dataset: Any, workload: Workload, facts: DataFacts, most: int,
                    budget_s: float | None = None, fixed: tuple[int, ...] | None = None) -> DataFacts:
    """`facts` with the worker counts (0 to the most worth trying, those in `fixed` where --fix names them) that lose
    or repeat the stream's samples over a pass (``autotune.streams.passes``), and what the check read. A whole pass
    shorter than the one declared is the pass: `size` becomes it. A stream that fails in one process is a
    WorkloadError."""
    # 0 always: the one-process read is the reference, and its length is the pass.
    counts = [c for c in range(0, most_workers(facts, most) + 1) if c == 0 or fixed is None or c in fixed]
    try:
        verdicts, what = passes.check(dataset, counts, workload.sample_key, budget_s)
    except Exception as exc:
        raise WorkloadError(f"workload {workload.path}: reading one pass of its stream in one process failed: "
                            f"{sources.failure(exc)}") from exc
    unjudged = len(counts) - len(verdicts)
    if what == passes.UNKEYED:
        return dataclasses.replace(facts, stream_checked=what)
    if unjudged:
        what += f"; {unjudged} larger count(s) left unchecked: the check's time ran out"
    refused = tuple((v.workers, v.reason) for v in verdicts if not v.passed)
    # Only where every count was read: a count left unchecked is not known to keep the samples it would reorder.
    reordered = not unjudged and passes.reorders(dataset, workload.sample_key)
    facts = dataclasses.replace(facts, stream_refused=refused, stream_checked=what, stream_reorders=reordered)
    read = next((v.samples for v in verdicts if v.workers == 0), 0) if what == passes.WHOLE_PASS else 0
    if read and (not facts.size or read < facts.size):  # a trial times the pass the stream yields, as a run would
        facts = dataclasses.replace(facts, size=read)
    return facts


def describe(facts: DataFacts, cores_most: int) -> list[str]:
    """What a search says of a stream before its trials: its kind and pass, its workers' bound where its shards set
    it (rather than the `cores_most` workers the cores allow), the pass check."""
    if not facts.stream:
        return []
    lines = [f"stream: {facts.stream}; its order is its own (autotune never shuffles it)"]
    if facts.size and facts.stream_declared > facts.size:
        lines.append(f"stream: one pass yields {facts.size:,} samples, fewer than the {facts.stream_declared:,} its "
                     f"workload declares: each trial times the pass the stream yields; declare "
                     f"samples_per_epoch={facts.size} to say so")
    elif facts.size and not facts.stream_declared:
        lines.append(f"stream: one pass, read whole by the pass check, yields {facts.size:,} samples: the declared "
                     f"run's epoch; declare samples_per_epoch={facts.size} in DEFAULTS to say so")
    if not facts.size:
        lines.append("stream: its pass is unknown (no len(), no DEFAULTS['samples_per_epoch']): configs are ranked by "
                     "steady samples/s; declare samples_per_epoch in DEFAULTS to rank them by the whole declared run")
    if facts.shards is not None and facts.shards // max(1, facts.world_size) < cores_most:
        lines.append(f"num_workers: at most {max(1, facts.shards // max(1, facts.world_size))}: the stream's "
                     f"{facts.shards} shard(s) over {facts.world_size} rank(s), a worker beyond them reads nothing")
    by_reason: dict[str, list[int]] = {}
    for workers, reason in facts.stream_refused:
        by_reason.setdefault(reason, []).append(workers)
    for reason, counts in by_reason.items():
        lines.append(f"num_workers {_spans(counts)} ruled out: {reason}")
    if facts.stream_checked == passes.UNKEYED:
        lines.append(f"pass check: {facts.stream_checked}")
    elif facts.stream_checked and not facts.stream_refused:
        lines.append(f"pass check ({facts.stream_checked}): every worker count keeps the stream's samples")
    elif facts.stream_checked:
        lines.append(f"pass check ({facts.stream_checked}): the other worker counts keep the stream's samples")
    if facts.stream_reorders:
        lines.append(f"stream order: {REORDERS}")
    elif facts.stream_checked and facts.stream_checked != passes.UNKEYED:
        lines.append(f"stream order: {FIXED_ORDER}")
    return lines


REORDERS = ("it changes from pass to pass (its shuffle is unseeded), so each epoch of its own run sees another; a "
            "worker count that keeps its samples reorders them as an epoch does and is judged as a loader knob")
FIXED_ORDER = ("the same every pass: another worker count interleaves it otherwise, so a config that changes it "
               "passes the parity check's training run")


def _spans(counts: list[int]) -> str:
    """`[2, 3, 4, 7]` as "2..4, 7"."""
    spans: list[list[int]] = []
    for c in sorted(counts):
        if spans and c == spans[-1][-1] + 1:
            spans[-1].append(c)
        else:
            spans.append([c])
    return ", ".join(f"{s[0]}..{s[-1]}" if len(s) > 2 else ", ".join(map(str, s)) for s in spans)
