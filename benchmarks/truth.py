"""Does autotune's number survive ground truth? Its measurement of a config beside a loop timed by hand.

    python benchmarks/truth.py --recipe imagenet_resnet50 --out /tmp/truth
    python benchmarks/truth.py --recipe imagenet_resnet50 --configs sweep --seconds 30
    python benchmarks/truth.py --recipe imagenet_resnet50 --configs tuned
    taskset -c 0-4 python benchmarks/truth.py --configs decode   # both decode paths on 5 cores

For each config, autotune measures it as a search states a finalist's number: in
`--rounds` trial processes (``autotune.procs.pool.TrialPool``), each started afresh,
with the search's windows, the median of their rates (a search's default is 2 rounds,
``SearchOptions.rounds``). In processes of their own, started afresh as a user's
training script is (not this one, which ran the rows before), a plain PyTorch loop
written out below (no autotune code in it: a DataLoader, autocast, channels_last, SGD)
warms up, skips twice the batches its workers can prefetch, and is timed, epochs and
their start-up included, the device synchronised only at the ends: for `--seconds` (at
least 30 by default) in `--rounds` + 1 slices, one before each of autotune's
measurements and one after the last, each warmed up and past its backlog anew, and
each stretched to whole epochs' worth of batches where the first can reach it within
three times the row's `--seconds` (so it crosses epoch boundaries as often as a training
run does in as many batches; ``more_batches``, ``slice_limit``). Why
slices in fresh processes, interleaved: on H200 hosts one config's rate moved by a
third between processes started a minute apart (a loader's CPU per sample from 3.3 to
4.4 ms, ``lab/probes/heritage.py``), so a single process on either side is one
draw of the host's state, not the config's rate. Slices that disagree by more than the
tolerance show a host that moved, and such a row says so instead of passing for a
measurement error; ``--no-bracket`` times the hand loop in one piece, after.
The table gives both numbers and their ratio; every number is from this run.
Under each row, both are split the same way: the rate within epochs, and what an
epoch boundary costs beyond it (the hand loop's from when it received each batch),
so a ratio off 1 shows which of the two parts autotune has wrong; and the hand
loop's rate per 5 s, which shows a host whose cores slow under sustained load.

A ``decode = gpu`` config's hand loop is written out the same way: workers read each
file's bytes, and batch k+1 is decoded and augmented on a side stream while batch
k trains. The one autotune function it calls is the per-batch decode itself
(``autotune.loop.device_decode.decode_batch``): what is checked is the measurement
of a loop, not the arithmetic of a crop, which the CPU tests compare with
torchvision's. A ``device_normalize`` config's hand loop gives its workers the pipeline up to
ToTensor, then PILToTensor, and divides by 255 and normalises on the device itself. A
hybrid decode config's (``decode_share`` below 1) gives its workers the same split by
sample index as autotune's loader, each batch's host half made by the pipeline (up to
uint8 pixels, finished on the device, where it ends in ToTensor and Normalize, as
autotune's does) and its device half decoded on the side stream.
A hand loop does not capture CUDA graphs; a config that asks for one is run eager,
and its row says so.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import multiprocessing
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from autotune.config import Config, scaled_lr
from autotune.loop.device_decode import decode_batch
from autotune.options import SearchOptions
from autotune.procs.pool import TrialPool
from autotune.trial.cputime import cpu_times
from autotune.trial.timing import Windows
from autotune.tuned import file as tuned_file
from autotune.workloads import load, resolve
from autotune.workloads.decode import pack, translate, unpack
from autotune.workloads.locate import data_root

SEARCH_WINDOWS = Windows(window_s=0.2)  # what a search times a trial with on a GPU (autotune.study.setup)
TOLERANCE = 0.07  # autotune's number within this of the hand-timed one
TIMELINE_S = 5.0  # the hand loop's rate is also given per this many seconds
LONGEST = 3.0  # a hand loop times on to whole epochs' worth unless that takes over this x its seconds (`compared`)


def _configs(cores: int, bs: int) -> dict[str, dict[str, Config]]:
    fast = dict(cudnn_benchmark=True, channels_last=True, amp="bf16", pin_memory=True)
    return {
        # From 0 workers to all cores, prefetch 2 to 8, fp32 and bf16 with channels_last.
        "default": {
            "workload's own (4 workers, pinned, fp32)": Config(bs, num_workers=4, pin_memory=True, prefetch_factor=2),
            "0 workers, fp32": Config(bs),
            "8 workers, prefetch 8, persistent, bf16+CL": Config(bs, num_workers=8, prefetch_factor=8,
                                                                 persistent_workers=True, **fast),
            f"{cores - 1} workers, prefetch 2, bf16+CL": Config(bs, num_workers=cores - 1, prefetch_factor=2, **fast),
            f"{cores} workers, prefetch 4, persistent, fp32": Config(bs, num_workers=cores, prefetch_factor=4,
                                                                     persistent_workers=True, pin_memory=True,
                                                                     cudnn_benchmark=True),
        },
        # The hand-tuned sweep a winner is held against: workers 8, 12, cores-1 and cores, fp32 and bf16+CL.
        "sweep": {
            f"{w} workers, {'bf16+CL' if bf16 else 'fp32'}": Config(
                bs, num_workers=w, prefetch_factor=2, persistent_workers=True, pin_memory=True, cudnn_benchmark=True,
                **({"channels_last": True, "amp": "bf16"} if bf16 else {}))
            for w in (8, 12, cores - 1, cores) for bf16 in (False, True)
        },
        # The hand sweep a search's winner is held against (issue 44): workers 8 to all cores, each with six loops
        # across device_normalize, decode (host, device, half and half), amp, channels_last and compile. 24 rows.
        "wide": {
            f"{w} workers, {name}": Config(bs, num_workers=w, prefetch_factor=4, persistent_workers=True,
                                           pin_memory=True, cudnn_benchmark=True, **knobs)
            for w in sorted({8, 12, cores - 1, cores})
            for name, knobs in (
                ("fp32", {}),
                ("fp32+CL, uint8 normalized on the device", dict(channels_last=True, device_normalize=True)),
                ("bf16+CL, uint8 normalized on the device", dict(channels_last=True, amp="bf16",
                                                                 device_normalize=True)),
                ("bf16+CL, uint8, compiled", dict(channels_last=True, amp="bf16", device_normalize=True,
                                                  compile="default")),
                ("bf16+CL, gpu decode, compiled", dict(channels_last=True, amp="bf16", decode="gpu",
                                                       compile="default")),
                ("bf16+CL, half gpu decode, compiled", dict(channels_last=True, amp="bf16", decode="gpu",
                                                            decode_share=0.5, compile="default")),
            )
        },
        # The two decode paths side by side, with as many workers as the cores leave one for the loop.
        "decode": {
            f"{cores - 1} workers, {where} decode, bf16+CL": Config(
                bs, num_workers=cores - 1, prefetch_factor=2, persistent_workers=True, decode=where, **fast)
            for where in ("gpu", "cpu")
        },
        # Hybrid decode: a share of each batch decoded on the device, the rest by the workers (loop.hybrid_decode),
        # beside both paths alone; compiled, so the step is not what limits them.
        "hybrid": {
            f"{cores - 1} workers, {share:.0%} decoded on the device, bf16+CL, compiled": Config(
                bs, num_workers=cores - 1, prefetch_factor=4, persistent_workers=True, compile="default",
                decode="cpu" if share == 0 else "gpu", decode_share=share or 1.0, **fast)
            for share in (0.0, 0.25, 0.5, 0.75, 1.0)
        },
        # Workers that hand over uint8 images (ToTensor and Normalize on the device) against workers that make floats.
        "pixels": {
            f"{w} workers, prefetch 4, {'uint8, normalized on the device' if on else 'float32 from the workers'}, "
            f"bf16+CL": Config(bs, num_workers=w, prefetch_factor=4, persistent_workers=True, device_normalize=on,
                               **fast)
            for w in (cores - 1, cores) for on in (True, False)
        },
        # The device decode path by its workers, who only read bytes: how many it needs on a host with many cores.
        "gpu_workers": {
            f"{w} workers, gpu decode, bf16+CL": Config(
                bs, num_workers=w, prefetch_factor=4, persistent_workers=True, decode="gpu", **fast)
            for w in sorted({2, 4, 8, cores - 1})
        },
    }


def by_hand(workload: Any, config: Config, lr: float, seconds: float, device: torch.device,
            longest: float | None = None) -> dict[str, float]:
    """The ground truth: a plain training loop, timed for at least `seconds` after warm-up and twice the backlog,
    on to whole epochs' worth of batches where that takes at most `longest` seconds in all (by default LONGEST
    times `seconds`; `more_batches`)."""
    longest = LONGEST * seconds if longest is None else longest
    torch.backends.cudnn.benchmark = config.cudnn_benchmark
    torch.manual_seed(0)
    fmt = torch.channels_last if config.channels_last else torch.contiguous_format
    model = workload.build_model().to(device, memory_format=fmt).train()
    optimizer = workload.build_optimizer(model.parameters(), lr)
    if config.compile != "off":  # as a user compiles: the model; its warm-up below compiles it
        model = torch.compile(model, mode=config.compile)
    criterion = workload.build_loss()
    extra = {"persistent_workers": config.persistent_workers, "prefetch_factor": config.prefetch_factor or 2}
    dataset = workload.build_dataset(data_root())
    finish = None  # device_normalize's tail, run on the device
    if config.decode == "gpu":
        files, collate = JpegFiles([path for path, _ in dataset.samples], [t for _, t in dataset.samples]), by_list
        if config.decode_share < 1:  # hybrid: the workers decode the rest through the data set's own pipeline
            host, finish = hybrid_host(dataset, device)
            files, collate = HybridFiles(host, files, config.decode_share), by_halves
    elif config.device_normalize:
        files, collate, finish = uint8_pixels(dataset, device)
    else:
        files, collate = dataset, None
    loader = DataLoader(files, batch_size=config.batch_size, shuffle=True, num_workers=config.num_workers,
                        pin_memory=config.pin_memory, collate_fn=collate, **(extra if config.num_workers else {}))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(config.amp)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        x = x.to(device, non_blocking=config.pin_memory)
        if config.device_normalize and config.decode == "cpu":
            x = finish(x)
        x = x.contiguous(memory_format=fmt)
        y = y.to(device, non_blocking=config.pin_memory)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = criterion(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    def batches():
        while True:  # epochs, each a fresh pass as a training run makes it
            yield from loader

    feed = batches()
    if config.decode == "gpu":
        feed = decoded_ahead(feed, translate(dataset.transform), device, fmt, finish)
    capacity = config.num_workers * (config.prefetch_factor or 2) if config.num_workers else 0
    taken = 10 + 2 * capacity
    for _ in range(taken):  # warm-up (cuDNN autotuning), then twice what the workers can hold ready
        step(*next(feed))
    sync(device)
    cpu0 = cpu_times()
    start, first = time.perf_counter(), taken  # `first`: the first timed batch's place, counted from the start
    arrived: list[tuple[float, int, int]] = []  # each batch: when the loop had it, its place in its epoch, its size

    def timed_step() -> int:
        x, y = next(feed)
        arrived.append((time.perf_counter() - start, (first + len(arrived)) % len(loader), len(x)))
        step(x, y)
        return len(x)

    samples = 0
    while time.perf_counter() - start < seconds:
        samples += timed_step()
    for _ in range(more_batches(time.perf_counter() - start, len(arrived), len(loader), longest)):
        samples += timed_step()
    sync(device)
    wall = time.perf_counter() - start
    cpu1 = cpu_times()
    # CPU per sample over the timed part: the loop's process (its pinning thread included) and its workers.
    workers_ms = None if cpu0.children_s is None else (cpu1.children_s - cpu0.children_s) / samples * 1e3
    epochs = len(arrived) / len(loader)
    return {"samples_per_s": samples / wall, "seconds": wall, "samples": samples,
            "epochs_worth": epochs if epochs == int(epochs) else None,
            "main_cpu_ms": (cpu1.main_s - cpu0.main_s) / samples * 1e3, "workers_cpu_ms": workers_ms,
            **epoch_parts(arrived, samples, wall, len(loader), capacity)}


def more_batches(elapsed: float, timed: int, per_epoch: int, longest: float) -> int:
    """How many batches a hand loop that has timed `timed` in `elapsed` (its seconds are up) times on.

    Up to a whole number of epochs' worth of batches (from its first timed batch's place in its epoch to
    that place an epoch later), so that it crosses as many epoch boundaries as a training run does in as
    many batches; unless that would take it past `longest` seconds in all at its rate so far: then none,
    and it may cross one boundary more or one fewer than a training run would in as many batches. Decided
    once, when its seconds are up: decided again at each batch, it would stop right after a boundary it
    had just paid for. Why, both ways: each slice starts at the same place of an epoch (after the same
    warm-up), so whether a slice stopped on the clock crosses a boundary hangs on the same few batches
    each time, not on the share of them that a training run crosses. On an H200, 15 workers that start
    afresh each epoch paid 1.6-2.1 s at each boundary of a 17 s epoch (call 42), and 10 s slices that
    crossed one boundary in three read 12% above a training run (call 50); 8 workers with a 30 s epoch
    paid 1.4 s at each, which puts 10 s slices that each cross one 9-10% below an epoch's worth (they
    read 15-19% below the one slice that timed an epoch's worth, call 56).
    """
    short = timed % per_epoch
    if timed == 0 or short == 0:
        return 0
    more = per_epoch - short
    return more if elapsed + more * elapsed / timed <= longest else 0


def epoch_parts(arrived: list[tuple[float, int, int]], samples: int, wall: float, per_epoch: int,
                capacity: int) -> dict[str, float | int | None]:
    """The hand loop split as autotune splits a measurement: its rate within epochs (from each epoch's second batch
    to `capacity` batches before its end, where the workers still have the epoch's work), and what each epoch
    boundary it crossed cost beyond that. Read where the loop received each batch: the device is not synchronised
    per step, so each time may run ahead of the device by the few steps its queue holds."""
    seconds, batches, within = 0.0, 0, 0
    for (t0, place0, _), (t1, place1, size) in zip(arrived, arrived[1:]):
        if place1 == place0 + 1 and 1 <= place0 and place1 < per_epoch - capacity:
            seconds, batches, within = seconds + t1 - t0, batches + 1, within + size
    boundaries = sum(place == 0 for _, place, _ in arrived)
    steady = within / seconds if batches >= 2 and seconds > 0 else None
    cost = _boundary_cost(wall, samples, steady, boundaries)
    # Samples/s in each TIMELINE_S of the loop: a rate that falls as the loop goes on (a host's cores leaving their
    # boost clock under sustained load) shows here, and would make any short measurement read high.
    # A last bin shorter than half of TIMELINE_S joins the one before it: a few batches over a fraction of a
    # second would read as a rate far off the loop's.
    bins = [0] * max(1, math.ceil(wall / TIMELINE_S - 0.5))
    for t, _, size in arrived:
        bins[min(int(t // TIMELINE_S), len(bins) - 1)] += size
    timeline = [round(n / (TIMELINE_S if i < len(bins) - 1 else wall - i * TIMELINE_S), 1)
                for i, n in enumerate(bins)]
    counted = steady is not None  # the parts within epochs, for `joined`
    return {"steady_samples_per_s": steady, "boundaries": boundaries, "boundary_s": cost, "timeline": timeline,
            "within_samples": within if counted else 0, "within_seconds": seconds if counted else 0.0}


def boundary_as_by_hand(result: dict[str, Any]) -> float | None:
    """What an epoch costs a trial beyond its steps at its rate within epochs, as `epoch_parts` reads a hand loop's.

    The trial's `epoch_overhead_s` is an epoch's start alone; its epoch also takes its last `capacity` batches
    (what the workers hold when the sampler runs out) at the step's speed, which a loader-bound loop passes
    faster than its steady rate. The hand loop's boundary is all of that at once: its epoch's time less its
    samples at the rate within epochs (`_boundary_cost`). None for whole-epoch windows, which have no rate
    within epochs. One difference stays: a trial's rate within epochs leaves out the steps from an epoch's
    start to its first steady window, the hand loop's only the epoch's first batch.
    """
    if result.get("whole_epochs") or not result.get("epoch_s") or not result.get("steady_samples_per_s"):
        return None
    return result["epoch_s"] * (1 - result["samples_per_s"] / result["steady_samples_per_s"])


def _boundary_cost(wall: float, samples: int, steady: float | None, boundaries: int) -> float | None:
    """What each epoch boundary cost beyond the rate within epochs; None where that cannot be told."""
    return (wall - samples / steady) / boundaries if steady is not None and boundaries else None


def joined(slices: list[dict[str, Any]]) -> dict[str, Any]:
    """Slices of a hand loop, timed between autotune's measurements, as one loop over all of their times."""
    samples, seconds = sum(h["samples"] for h in slices), sum(h["seconds"] for h in slices)
    within, within_s = sum(h["within_samples"] for h in slices), sum(h["within_seconds"] for h in slices)
    steady = within / within_s if within_s > 0 else None
    boundaries = sum(h["boundaries"] for h in slices)
    cost = _boundary_cost(seconds, samples, steady, boundaries)
    rates = [h["samples_per_s"] for h in slices]
    return {"samples_per_s": samples / seconds, "seconds": seconds, "samples": samples,
            "steady_samples_per_s": steady, "boundaries": boundaries, "boundary_s": cost,
            "timeline": [r for h in slices for r in h["timeline"]], "within_samples": within,
            "within_seconds": within_s, "slices": rates,
            "drift": max(rates) / min(rates) - 1 if len(rates) > 1 else None,
            "whole_epochs": all(h["epochs_worth"] is not None for h in slices),
            "workers_cpu_ms": [h["workers_cpu_ms"] for h in slices if h["workers_cpu_ms"] is not None],
            "main_cpu_ms": [h["main_cpu_ms"] for h in slices]}


def hand_fields(hand: dict[str, Any]) -> dict[str, Any]:
    """A `joined` hand loop's numbers as a truth.json row keeps them."""
    return {"hand": hand["samples_per_s"], "hand_seconds": hand["seconds"],
            "hand_steady": hand["steady_samples_per_s"], "hand_boundaries": hand["boundaries"],
            "hand_boundary_s": hand["boundary_s"], "hand_timeline": hand["timeline"], "hand_slices": hand["slices"],
            "hand_whole_epochs": hand["whole_epochs"], "hand_workers_cpu_ms": hand["workers_cpu_ms"],
            "hand_main_cpu_ms": hand["main_cpu_ms"]}


def uint8_pixels(dataset: Any, device: torch.device) -> tuple[Any, None, Any]:
    """A device_normalize loop by hand: the workers run the pipeline up to ToTensor, then PILToTensor; the device
    divides by 255 and normalises as ToTensor and Normalize would. Written for a [..., ToTensor, Normalize] pipeline."""
    from torchvision import transforms

    *head, to_tensor, normalize = dataset.transform.transforms
    assert type(to_tensor).__name__ == "ToTensor" and type(normalize).__name__ == "Normalize", dataset.transform
    pixels = copy.copy(dataset)
    pixels.transform = transforms.Compose([*head, transforms.PILToTensor()])
    mean = torch.tensor(normalize.mean, device=device).view(1, -1, 1, 1)
    std = torch.tensor(normalize.std, device=device).view(1, -1, 1, 1)
    return pixels, None, lambda x: x.float().div(255).sub_(mean).div_(std)


class JpegFiles(torch.utils.data.Dataset):
    """What a worker does on the gpu path: read a file's bytes, nothing more."""

    def __init__(self, paths: list[str], targets: list[int]) -> None:
        self.paths, self.targets = paths, targets

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.frombuffer(bytearray(Path(self.paths[i]).read_bytes()), dtype=torch.uint8), self.targets[i]


def by_list(batch: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # The files end to end in one tensor, and their lengths (``pack``): a list of tensors crosses from a worker as
    # one shared-memory handle each, and is pinned tensor by tensor.
    return (*pack([data for data, _ in batch]), torch.tensor([target for _, target in batch]))


class HybridFiles(torch.utils.data.Dataset):
    """Hybrid decode's workers: a sample the device decodes is read as bytes, any other made by the pipeline. Which
    is which follows the sample's index through Knuth's multiplicative hash, as the hybrid loader splits them."""

    def __init__(self, dataset: Any, files: JpegFiles, share: float) -> None:
        self.dataset, self.files, self.share = dataset, files, share

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int, bool]:
        if (i * 2654435761) % 2**32 < self.share * 2**32:
            return (*self.files[i], True)
        return (*self.dataset[i], False)


def by_halves(batch: list[tuple[torch.Tensor, int, bool]]) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
    host = [(x, t) for x, t, device in batch if not device]
    device = [(x, t) for x, t, flag in batch if flag]
    images = torch.stack([x for x, _ in host]) if host else None
    return (images, *pack([x for x, _ in device]), torch.tensor([t for _, t in host] + [t for _, t in device]))


def hybrid_host(dataset: Any, device: torch.device) -> tuple[Any, Any]:
    """What a hybrid's workers make of their half, and what the device then does to it: uint8 pixels, finished on the
    device, where the pipeline ends in ToTensor and Normalize (autotune's hybrid loader does the same there); else
    the whole pipeline, and nothing. A hand loop written with the float tail on the workers ran 3,046/s where
    autotune's ran 4,483/s (an H100, lab/results/h100_balance_2026-12-06): not the same loop."""
    tail = [type(t).__name__ for t in getattr(dataset.transform, "transforms", [])[-2:]]
    if tail != ["ToTensor", "Normalize"]:
        return dataset, None
    pixels, _, finish = uint8_pixels(dataset, device)
    return pixels, finish


def decoded_ahead(feed: Any, pipeline: Any, device: torch.device, fmt: torch.memory_format,
                  finish: Any = None) -> Any:
    """Batches of bytes in, decoded batches out: batch k+1 decodes on a side stream while batch k trains. `finish`:
    what the device does to a hybrid's host half (uint8 pixels to the pipeline's floats), if anything."""
    side = torch.cuda.Stream(device) if device.type == "cuda" else None
    pending = None
    for batch in feed:
        host, packed, lengths, y = batch if len(batch) == 4 else (None, *batch)  # hybrid decode's come in halves
        data = unpack(packed, lengths)
        with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
            host = None if host is None else host.to(device, non_blocking=True)
            parts = [] if host is None else [host if finish is None else finish(host)]
            parts += [decode_batch(pipeline, data, device, None, fmt)] if data else []
            x = torch.cat(parts).contiguous(memory_format=fmt)
            y = y.to(device, non_blocking=True)
            done = torch.cuda.Event() if side is not None else None
            if done is not None:
                done.record(side)
        if pending is not None:
            yield take(*pending, device)
        pending = (x, y, done)


def take(x: torch.Tensor, y: torch.Tensor, done: Any, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    if done is not None:  # made on the side stream: the step waits for it, and the allocator keeps it till then
        main = torch.cuda.current_stream(device)
        main.wait_event(done)
        x.record_stream(main)
        y.record_stream(main)
    return x, y


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}/s"


def _span(hand: dict[str, Any]) -> str:
    """What a `joined` hand loop's time spans: whole epochs' worth of batches, or not (see `more_batches`)."""
    return " (whole epochs' worth)" if hand["whole_epochs"] else " (not whole epochs)"


def _cpu(rounds: list[dict[str, Any]], field: str) -> str:
    """Each round's CPU milliseconds a sample (`Measurement.main_cpu_ms` or `workers_cpu_ms`), "-" where unread."""
    return ", ".join("-" if r.get(field) is None else f"{r[field]:.2f}" for r in rounds)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def in_a_fresh_process(workload_path: Path, config: Config, lr: float, seconds: float,
                       device: torch.device, longest: float | None = None) -> dict[str, Any]:
    """`by_hand` in a process of its own, started afresh, as a user's training script runs.

    Not in this one, which has run the rows before (their heaps, pinned buffers and CUDA caches), while
    autotune measures each config in a trial process started for the search.
    """
    context = multiprocessing.get_context("spawn")
    results, sender = context.Pipe(duplex=False)
    process = context.Process(target=_hand_loop_process, args=(str(workload_path), config, lr, seconds, str(device),
                                                               sender, longest))
    process.start()
    sender.close()  # ours: the pipe ends (EOFError) when the child's end closes, with or without a result
    try:
        result = results.recv()
    except EOFError:
        result = RuntimeError(f"its process ended without a result, with exit status {process.exitcode}")
    finally:
        process.join()
    if isinstance(result, Exception):
        raise SystemExit(f"the hand loop of {config.describe()} failed: {result}")
    return result


def _hand_loop_process(workload_path: str, config: Config, lr: float, seconds: float, device: str,
                       sender: Any, longest: float | None = None) -> None:
    # A spawned child inherits the spawn start method; the loop's DataLoader workers must start the way a
    # training script's do on Linux, by fork (spawned, they could not even unpickle the workload's data set).
    multiprocessing.set_start_method("fork", force=True)
    try:
        result: Any = by_hand(load(resolve(workload_path)), config, lr, seconds, torch.device(device), longest)
    except Exception as exc:  # said by the parent; an exception need not pickle, its text does
        result = RuntimeError(f"{type(exc).__name__}: {exc}")
    sender.send(result)
    sender.close()


def by_autotune(workload_path: Path, config: Config, lr: float, cores: int, logs: Path,
                device: torch.device) -> dict[str, Any]:
    """autotune's measurement, made as a search makes it: a trial process, the search's windows."""
    pool = TrialPool(workload_path, str(device), cores, logs, timeout_s=600.0)
    try:
        outcome = pool.run(config, lr, SEARCH_WINDOWS)
    finally:
        pool.stop()
    if outcome.state != "complete" or outcome.result is None:
        raise SystemExit(f"autotune could not measure {config.describe()}: {outcome.reason}")
    return outcome.result


def slice_limit(before: list[dict[str, Any]], longest: float) -> float:
    """How long a row's next hand slice may run to reach whole epochs' worth (`by_hand`'s `longest`).

    The first slice: up to LONGEST times the row's seconds (`longest`), not its own share's. Each slice
    starts after the same warm-up, so at the same place of its epoch: where an epoch's worth takes about
    the row's seconds, slices cut at 3x their share would each cross a boundary there, or none. The
    others do as the first did, however long that takes them (or not at all): decided slice by slice,
    a fast process would run on and a slow one stop on the clock, and joined by time the fast ones
    would weigh the most.
    """
    if not before:
        return longest
    return math.inf if before[0]["epochs_worth"] is not None else 0.0


def compared(name: str, config: Config, lr: float, workload_path: Path, args: argparse.Namespace,
             device: torch.device) -> dict[str, Any]:
    """One row: autotune's `args.rounds` measurements, interleaved with the hand loop's slices; printed, returned."""
    cores, logs = len(os.sched_getaffinity(0)), args.out.resolve() / "logs"
    slices = 1 if args.no_bracket else args.rounds + 1
    share, longest = args.seconds / slices, LONGEST * args.seconds
    hands: list[dict[str, Any]] = []

    began = time.monotonic()

    def said(what: str) -> None:  # each measurement as it ends, to stderr: a row cut short still shows what it had
        print(f"  {name}: {what} ({time.monotonic() - began:.0f} s into the row)", file=sys.stderr, flush=True)

    def hand_slice() -> None:
        hands.append(in_a_fresh_process(workload_path, config, lr, share, device, slice_limit(hands, longest)))
        said(f"hand slice {len(hands)}: {hands[-1]['samples_per_s']:,.0f}/s over {hands[-1]['seconds']:.0f} s")

    if not args.no_bracket:
        hand_slice()
    rounds = []
    for _ in range(args.rounds):
        rounds.append(by_autotune(workload_path, config, lr, cores, logs, device))
        said(f"autotune round {len(rounds)}: {rounds[-1]['samples_per_s']:,.0f}/s")
        if not args.no_bracket or len(rounds) == args.rounds:
            hand_slice()
    hand = joined(hands)
    rates = [r["samples_per_s"] for r in rounds]
    ours = statistics.median(rates)  # what a search states of a finalist: the median over its rounds
    steady = statistics.median(r["steady_samples_per_s"] for r in rounds)
    overhead = statistics.median(r.get("epoch_overhead_s") or 0.0 for r in rounds)
    costs = [c for c in (boundary_as_by_hand(r) for r in rounds) if c is not None]
    boundary = statistics.median(costs) if costs else None
    ratio = ours / hand["samples_per_s"]
    # Slices that disagree: the host moved, and a ratio off 1 may be the host's, not the measurement's.
    drifted = hand["drift"] is not None and hand["drift"] > TOLERANCE
    unreliable = sum(not r.get("reliable", True) for r in rounds)
    noise = ", ".join(f"±{r['spread']:.1%}" for r in rounds)
    print(f"  {name:<46} autotune {ours:>8,.0f}/s (rounds {', '.join(f'{r:,.0f}' for r in rates)}; noise "
          f"{noise}{f'; {unreliable} unreliable' if unreliable else ''})  "
          f"by hand {hand['samples_per_s']:>8,.0f}/s over {hand['seconds']:.0f} s{_span(hand)}  "
          f"ratio {ratio:.3f}{'' if abs(ratio - 1) <= TOLERANCE else '  OUTSIDE ±7%'}"
          f"{'  HOST MOVED: hand slices ' + ', '.join(f'{r:,.0f}/s' for r in hand['slices']) if drifted else ''}"
          f"{'  (the hand loop runs it eager, not in a CUDA graph)' if config.cuda_graph else ''}", flush=True)
    print(f"  {'':<46} within epochs: autotune {steady:,.0f}/s, by hand {_rate(hand['steady_samples_per_s'])}; "
          f"an epoch boundary (its start and its last batches): autotune {_seconds(boundary)} (its start alone "
          f"{overhead:.2f} s), by hand {_seconds(hand['boundary_s'])} ({hand['boundaries']} crossed); "
          f"by hand per {TIMELINE_S:.0f} s: "
          f"{', '.join(f'{r:,.0f}' for r in hand['timeline'])}; autotune's windows: "
          + "; ".join(", ".join(f"{w:,.0f}" for w in r.get("window_rates") or ()) for r in rounds), flush=True)
    workers = ", ".join(f"{c:.2f}" for c in hand["workers_cpu_ms"]) if config.num_workers else ""
    # Backlog growth autotune's windows left out (every batch was ready): credited, would a round read as the hand loop?
    uncredited = [r.get("uncredited_share", 0.0) for r in rounds]
    # The same in autotune's rounds: where a row's rates differ, did the host's cost of a sample differ with them?
    ours_workers = _cpu(rounds, "workers_cpu_ms") if config.num_workers else ""
    print(f"  {'':<46} CPU a sample in the hand slices: the loop's process "
          f"{', '.join(f'{c:.2f}' for c in hand['main_cpu_ms'])} ms{f'; its workers {workers} ms' if workers else ''}"
          f"; in autotune's windows: the loop's process {_cpu(rounds, 'main_cpu_ms')} ms"
          f"{f'; its workers {ours_workers} ms' if ours_workers else ''}", flush=True)
    print(f"  {'':<46} backlog growth autotune's windows left out: "
          f"{', '.join(f'{u:.1%}' for u in uncredited)} of their samples", flush=True)
    return {"config": name, "knobs": config.describe(), "autotune": ours, "autotune_rounds": rates,
            "autotune_steady": steady, "autotune_spreads": [r["spread"] for r in rounds],
            "autotune_epoch_overhead_s": overhead, "autotune_boundary_s": boundary,
            "backlog_steps": [r.get("backlog_steps") for r in rounds],
            "autotune_windows": [r.get("window_rates") for r in rounds], "autotune_unreliable": unreliable,
            "autotune_uncredited": uncredited, "autotune_main_cpu_ms": [r.get("main_cpu_ms") for r in rounds],
            "autotune_workers_cpu_ms": [r.get("workers_cpu_ms") for r in rounds],
            **hand_fields(hand), "ratio": ratio, "host_drift": hand["drift"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="imagenet_resnet50")
    parser.add_argument("--configs", default="default",
                        help="default, sweep, wide, decode, hybrid, pixels, gpu_workers, or tuned "
                             "(the tuned file's profile)")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the hand-written loop is timed")
    parser.add_argument("--only", type=int, help="the first N configs of the set only")
    parser.add_argument("--match", default="", help="only the configs whose name this regular expression finds")
    parser.add_argument("--out", type=Path, default=Path("truth"))
    parser.add_argument("--batch-size", type=int, default=256, help="of the default, sweep and decode sets")
    parser.add_argument("--device", default="cuda:0", help="cpu runs it end to end on a machine without a GPU")
    parser.add_argument("--rounds", type=int, default=SearchOptions.rounds,
                        help="autotune's measurements of each config, each in a fresh trial process, the median "
                             "stated, as a search states a finalist's (default: a search's own)")
    parser.add_argument("--no-bracket", action="store_true",
                        help="time the hand loop in one piece after autotune's measurements, not in slices between")
    parser.add_argument("--hand-only", action="store_true",
                        help="the hand-timed loops alone: a sweep that a winner is held against")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1 (autotune's measurements of each config), but got {args.rounds}")
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    hardware = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    cores = len(os.sched_getaffinity(0))
    ref = resolve(args.recipe)
    workload = load(ref)
    d = workload.defaults
    if args.configs == "tuned":
        profile = tuned_file.match(tuned_file.read(ref.tuned_path), hardware)
        if profile is None:
            raise SystemExit(f"{ref.tuned_path} has no profile for {hardware}")
        configs = {f"tuned: {tuned_file.knobs_to_config(profile['knobs']).describe()}":
                   tuned_file.knobs_to_config(profile["knobs"])}
    else:
        configs = _configs(cores, args.batch_size)[args.configs]
    configs = dict([item for item in configs.items() if re.search(args.match, item[0])][: args.only])
    print(f"{args.recipe} on {hardware}, {cores} CPU cores, torch {torch.__version__}; "
          f"hand-timed loops at least {args.seconds:.0f} s a config", flush=True)
    rows = []
    for name, config in configs.items():
        lr = scaled_lr(float(d["lr"]), d["batch_size"], config.batch_size, "linear", workload.lr_max)
        if args.hand_only:
            hand = joined([in_a_fresh_process(ref.workload_path, config, lr, args.seconds, device)])
            rows.append({"config": name, "knobs": config.describe(), **hand_fields(hand)})
            print(f"  {name:<46} by hand {hand['samples_per_s']:>8,.0f}/s over {hand['seconds']:.0f} s{_span(hand)} "
                  f"(within epochs {_rate(hand['steady_samples_per_s'])}, an epoch boundary "
                  f"{_seconds(hand['boundary_s'])})", flush=True)
        else:
            rows.append(compared(name, config, lr, ref.workload_path, args, device))
        # After each row: a run cut short by its time limit keeps the rows it finished.
        (args.out / "truth.json").write_text(json.dumps(rows, indent=1))
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if args.hand_only:
        return
    inside = sum(abs(r["ratio"] - 1) <= TOLERANCE for r in rows)
    drifted = sum(abs(r["host_drift"] or 0) > TOLERANCE for r in rows)
    print(f"{inside} of {len(rows)} configs within ±{TOLERANCE:.0%} of the hand-timed rate"
          f"{f'; on {drifted}, the hand loop itself moved by more than that between its slices' if drifted else ''}")


if __name__ == "__main__":
    main()
