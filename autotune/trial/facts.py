"""What a workload's data allows, read from a few small batches made the workload's way.

The search space depends on it (``autotune.knobs.DataFacts``): a CUDA
graph needs batches of one signature, channels_last a 4-D image batch, device
placement rows that can be kept as tensors and a transform that gives the same
sample twice. All of it is read from batches collated by the workload's own
``collate_fn``, so a dict of padded tokens or a list of detection targets is
judged as it really arrives, not guessed from its type.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch.utils.data import default_collate

from autotune import batch as batches
from autotune.knobs import BUSY_SHARE, DataFacts
from autotune.loop.buckets import pad_refusal
from autotune.streams.facts import read_stream_facts
from autotune.streams.ranks import world_size
from autotune.streams.sources import is_stream
from autotune.workloads import Workload
from autotune.workloads.locate import WorkloadError

PROBE_BATCHES = 4  # small batches read; their shapes decide whether a graph can replay them
PROBE_SAMPLES = 8  # samples in each


def read_facts(dataset: Any, workload: Workload) -> DataFacts:
    """The facts of `dataset` as `workload` batches it; a wrong sample count is a WorkloadError."""
    if is_stream(dataset):
        return read_stream_facts(dataset, workload, world_size())
    n = len(dataset)
    if n < 1:
        raise WorkloadError(f"workload {workload.path}: build_dataset() returned an empty data set")
    collate = workload.collate_fn or default_collate
    k = min(PROBE_SAMPLES, n)
    probes = [collate([dataset[(j * k + i) % n] for i in range(k)]) for j in range(PROBE_BATCHES)]
    for probe in probes:
        counted = workload.count(probe)
        if counted != k:
            hook = "samples_in(batch)" if workload.samples_in is not None else "the first tensor's leading dimension"
            raise WorkloadError(
                f"workload {workload.path}: a batch of {k} samples counts {counted} by {hook}; "
                "declare samples_in(batch) to count a batch's samples"
            )
    first = probes[0]
    deterministic = workload.deterministic_transform
    if deterministic is None:  # not declared: prove it by transforming one sample twice
        deterministic = _equal(collate([dataset[0]]), collate([dataset[0]]))
    unstackable = batches.why_not_stackable(first, k)
    varying = batches.varying(probes)
    if unstackable is None and varying is not None and _rows_vary(probes):
        unstackable = f"rows differ in shape from batch to batch ({varying})"
    if unstackable is None and workload.build_sampler is not None:
        unstackable = "the workload's build_sampler() orders the samples, and the device slices its own order"
    return DataFacts(
        load_cpu_share=load_cpu_share(dataset),
        size=n,
        sample_bytes=max(1, sum(t.element_size() * t.numel() for t in batches.leaves(first)) // k),
        image_4d=any(t.dim() == 4 and t.is_floating_point() for t in batches.leaves(first)),
        static_shapes=varying is None,
        deterministic=bool(deterministic),
        device_dataset=workload.build_device_dataset is not None,
        varying=varying or "",
        unstackable=unstackable or "",
        load_cpu_s=load_cpu_s(dataset, collate),
        pad_refused=pad_refusal(workload.collate_fn),
        bucket_refused=bucket_refusal(dataset, workload),
        sample_shapes=batches.sample_shapes(first),
    )


def bucket_refusal(dataset: Any, workload: Workload) -> str:
    """Why the bucketing knob cannot apply to `workload`; "" when it can. A wrong sample_lengths fails here."""
    if workload.sample_lengths is None:
        return "the workload gives no sample_lengths(dataset)"
    if workload.build_sampler is not None:
        return "the workload's build_sampler() orders the samples, and bucketing would replace its order"
    if not workload.default("shuffle"):
        return "the workload does not shuffle (DEFAULTS shuffle=False), and bucketing draws a random order"
    workload.lengths(dataset)  # a wrong count is a WorkloadError before the search, not a failed trial in it
    return ""


def _equal(a: Any, b: Any) -> bool:
    if batches.signature(a) != batches.signature(b):
        return False
    return all(torch.equal(x, y) for x, y in zip(batches.leaves(a), batches.leaves(b)))


def _rows_vary(probes: list[Any]) -> bool:
    """Rows of the probe batches differ in shape beyond the sample dimension."""
    shapes = {tuple(tuple(t.shape[1:]) for t in batches.leaves(p)) for p in probes}
    return len(shapes) > 1


def load_cpu_s(dataset: Any, collate: Any, samples: int = 16) -> float:
    """CPU seconds one process spends to make one sample, read warm and collated, on one thread.

    One thread, as in a DataLoader worker (it sets torch's threads to 1): a transform
    that spreads over several threads here would cost more CPU per sample than there.
    The samples are read once untimed first, so a cold file cache does not count.
    """
    indices = [(i * 7919) % len(dataset) for i in range(min(samples, len(dataset)))]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        collate([dataset[i] for i in indices])
        start = time.thread_time()  # this thread's CPU only: a search's other threads run meanwhile
        collate([dataset[i] for i in indices])
        return (time.thread_time() - start) / len(indices)
    finally:
        torch.set_num_threads(threads)


def load_cpu_share(dataset: Any, samples: int = 8, min_wall_s: float = 0.005, tries: int = 3) -> float:
    """CPU time over wall time while loading a few samples in this process: 1.0 when it cannot be told.

    A share well below 1 means loading waits (on a disk, a network): more workers than cores can help.
    Loads too quick to time (under `min_wall_s` together) count as CPU-bound. Up to `tries` other
    samples are timed and the highest share kept, stopping at the first that shows a busy core: being
    descheduled (a busy host, a search's trial processes starting) only adds wall time. Timed once, a
    search's num_workers range for a CPU-bound data set came out 4x too wide in 2 of 60 runs.
    """
    n, best = min(samples, len(dataset)), 0.0
    for t in range(tries):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for i in range(n):
            dataset[(i * 7919 + t * 104729) % len(dataset)]  # spread over the data set; new samples each try
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        best = max(best, 1.0 if wall < min_wall_s else min(1.0, cpu / wall))
        if best >= BUSY_SHARE:
            break
    return best
