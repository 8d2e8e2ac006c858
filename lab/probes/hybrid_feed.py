"""Probe: where the loop's own thread spends a hybrid-decode loader's time, batch by batch.

Why: on an H200 host with 16 cores (lab/results/h200_plan_2026-12-04), ResNet-50's loader parts ran 4,422/s with
15 workers decoding on the host and 3,111/s with the device decoding, but 2,992-3,228/s with half of each batch
each way: below either half, where both making images at once should approach their sum. torchvision's
`decode_jpeg(..., device="cuda")` waits on the host for its own stream (it ends in `cudaStreamSynchronize`), so
the device half's decode holds the loop's thread; with 15 workers busy on 16 cores that thread may also wait for
a core. This loop times, in the loop's thread, per batch: waiting for the workers' batch, nvJPEG's decode, the
augmentation after it (queued work), the rest; and the thread's CPU seconds; with the host's busy cores.

    python3 lab/probes/hybrid_feed.py --configs "share=1,workers=8;share=0.5,workers=15;share=1.0,workers=15,cpu"
        [--seconds 20] [--step-ms 38] [--out hybrid.json]

Each config: `share` (decode_share; `cpu` in it: decode=cpu with device_normalize; `thread` in it: the device
decode in a thread of its own, see `threaded`; `real` in it: the workload's own step, compiled, in a CUDA graph, bf16,
channels_last, cudnn.benchmark, as the search's compiled seeds run it), `workers`, `prefetch`
(4 by default), batch 256, pinned, persistent. `--step-ms` queues a GPU sleep of that long per batch on the main
stream, a stand-in for a compiled step (ResNet-50 at 256 in bf16 compiled: about 38 ms on an H200). A sleep takes
no SMs from the decode; the real step does: beside SMs kept busy, torchvision's device decode of 256 ImageNet JPEGs
took 41 ms where it took 11 ms idle (an H100, lab/results/h100_2026-12-06), and a `real` row shows what that costs
the loop. Its step's host time (launching the replay) is the `step` phase.
`trace=N` in a config: after its timed window, N more batches run under the profiler, and the row adds where the
device's time went in them (`device_time`): the step's stream busy, how much of that beside a side stream's work,
the time no stream ran, and each stream's time by kind of work.
"""

from __future__ import annotations

import argparse
import json
import queue
import re
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torchvision.io
from loader_probe import host_busy  # this folder's: the host's busy cores once a second

from autotune.config import Config
from autotune.loop import device_decode
from autotune.trial.runner import Runner
from autotune.workloads import load, resolve
from autotune.workloads.decode import unpack

PHASES = ("wait_workers", "decode", "augment", "step", "rest")


class Clock:
    """Seconds each phase took in the loop's thread, summed while `on`."""

    def __init__(self) -> None:
        self.spent = dict.fromkeys(PHASES, 0.0)
        self.on = False

    def timed(self, phase: str, fn: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            begin = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                if self.on:
                    self.spent[phase] += time.perf_counter() - begin
        return wrapped


class TimedLoader:
    """The inner DataLoader, its `next` timed: how long the loop waited for the workers' batch."""

    def __init__(self, loader: Any, clock: Clock) -> None:
        self.loader, self.clock = loader, clock

    def __iter__(self) -> Any:
        source = iter(self.loader)
        while True:
            begin = time.perf_counter()
            try:
                batch = next(source)
            except StopIteration:
                return
            if self.clock.on:
                self.clock.spent["wait_workers"] += time.perf_counter() - begin
            yield batch

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


def threaded(loader: Any, depth: int = 2) -> None:
    """Make `loader` (a DecodingLoader) decode in a thread of its own, `depth` batches ahead of the loop.

    torchvision's device decode waits on the host for its stream; in a thread of its own that wait overlaps the
    loop's wait for the workers' next batch and the step's launch. Only the launch (decode and augmentation, queued
    on the side stream) runs in the thread; the main stream's wait for a batch is queued by the loop's thread, in
    step order.
    """
    work = loader._split if loader.split else loader._decode

    def made_from(batches: Any) -> Any:
        seed = getattr(batches, "_base_seed", None)
        generator = torch.Generator(device=loader.device)
        generator.manual_seed(seed if seed is not None else int(torch.initial_seed()))
        lane = device_decode._lane(loader.device)
        ready: queue.Queue[Any] = queue.Queue(maxsize=depth)
        end = object()

        def fill() -> None:
            try:
                for batch in batches:
                    if loader.split:  # (host images, packed bytes, lengths, targets), as DecodingLoader.made_from
                        args = (batch[0], unpack(batch[1], batch[2]), batch[3])
                    else:
                        args = (unpack(batch[0], batch[1]), batch[2])
                    ready.put(lane.launch(work, *args, generator))
                ready.put(end)
            except BaseException as exc:  # noqa: BLE001 - handed to the loop's thread
                ready.put(exc)

        threading.Thread(target=fill, daemon=True).start()
        while True:
            item = ready.get()
            if item is end:
                return
            if isinstance(item, BaseException):
                raise item
            yield lane.take(item)

    loader.made_from = made_from


def epochs(loader: Any, most: int = 100) -> Any:
    """`loader`'s batches, epoch after epoch (a window may outlast one: ImageNet's 200 batches of 256 pass in 12 s)."""
    for _ in range(most):
        yield from loader


def trace_activities(cuda: bool) -> list[torch.profiler.ProfilerActivity]:
    activities = [torch.profiler.ProfilerActivity.CPU]
    return activities + [torch.profiler.ProfilerActivity.CUDA] if cuda else activities


# What a device event is, by its name: the step's kernels are every other one on the busiest stream.
KINDS = (("copy", re.compile(r"^Memcpy|^Memset|copy_kernel|CatArrayBatched", re.I)),
         ("crop and resize", re.compile(r"roi_align|upsample|interpolat", re.I)),
         ("jpeg", re.compile(r"jpeg|huffman|idct|dct|colou?r|yuv|ycbcr", re.I)))


def union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`spans` (start, end) merged where they overlap, in order."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def covered(spans: list[tuple[int, int]]) -> int:
    return sum(end - start for start, end in spans)


def overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """How long two merged span lists are both busy."""
    total, i, j = 0, 0, 0
    while i < len(a) and j < len(b):
        total += max(0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def device_time(events: Any, batches: int, wall_s: float) -> dict[str, Any]:
    """Where the device's time went in `batches` traced batches, in ms a batch: each stream's busy time, how much of
    the step's stream's was spent while another stream ran too, the time no stream ran at all, and each stream's
    device time by kind of work (the step's stream: the step; a side stream: decode, crop and resize, copies, the
    rest). The question it answers: does a device-decoded share cost the step SMs (overlapped time on the step's
    stream grows), or does it leave the device idle (a gap no stream fills)?"""
    per_stream: dict[int, list[tuple[int, int]]] = {}
    kinds: dict[int, dict[str, int]] = {}
    names: dict[tuple[int, str], int] = {}
    for e in events:
        if e.device_type() != torch.autograd.DeviceType.CUDA or e.duration_ns() <= 0:
            continue
        stream, name = int(e.device_resource_id()), e.name()
        per_stream.setdefault(stream, []).append((e.start_ns(), e.start_ns() + e.duration_ns()))
        kind = next((k for k, pattern in KINDS if pattern.search(name)), "other")
        kinds.setdefault(stream, {}).setdefault(kind, 0)
        kinds[stream][kind] += e.duration_ns()
        names[(stream, name[:60])] = names.get((stream, name[:60]), 0) + e.duration_ns()
    if not per_stream:
        return {"batches": batches, "wall_ms_per_batch": 1e3 * wall_s / max(1, batches), "streams": []}
    merged = {s: union(spans) for s, spans in per_stream.items()}
    step = max(merged, key=lambda s: covered(merged[s]))
    others = union([span for s, spans in merged.items() if s != step for span in spans])
    everything = union([span for spans in merged.values() for span in spans])
    first, last = everything[0][0], everything[-1][1]
    per = 1e-6 / max(1, batches)  # ns to ms a batch
    streams = []
    for s in sorted(merged, key=lambda s: -covered(merged[s])):
        top = sorted(((n, t) for (st, n), t in names.items() if st == s), key=lambda nt: -nt[1])[:6]
        streams.append({"stream": s, "role": "step" if s == step else "side", "busy_ms": covered(merged[s]) * per,
                        "by_kind_ms": {k: t * per for k, t in sorted(kinds[s].items())},
                        "top_ms": {n: t * per for n, t in top}})
    return {"batches": batches, "wall_ms_per_batch": 1e3 * wall_s / max(1, batches),
            "traced_span_ms_per_batch": (last - first) * per,
            "step_stream_busy_ms": covered(merged[step]) * per,
            "step_stream_shared_ms": overlap(merged[step], others) * per,
            "no_stream_busy_ms": ((last - first) - covered(everything)) * per,
            "streams": streams}


def parse(spec: str) -> list[tuple[Config, bool, int]]:
    configs = []
    for part in filter(None, spec.split(";")):
        fields = dict(kv.split("=") if "=" in kv else (kv, "1") for kv in part.split(","))
        share = float(fields.get("share", "1"))
        common = dict(batch_size=int(fields.get("bs", "256")), num_workers=int(fields.get("workers", "15")),
                      pin_memory=True, persistent_workers=True, prefetch_factor=int(fields.get("prefetch", "4")),
                      channels_last=True)
        thread = "thread" in fields  # the device decode in a thread of its own (`threaded`)
        if "real" in fields:  # the workload's step as the compiled seeds run it
            common.update(cudnn_benchmark=True, amp="bf16", cuda_graph=True, compile="default")
        if "cpu" in fields:
            config = Config(**common, device_normalize=True)
        else:
            config = Config(**common, decode="gpu", decode_share=share)
        # trace=N: after the timed window, N more batches under the profiler (`device_time`)
        configs.append((config, thread and "cpu" not in fields, int(fields.get("trace", "0"))))
    return configs


def run(runner: Runner, config: Config, seconds: float, step_ms: float, warmup: int,
        thread: bool = False, trace: int = 0) -> dict[str, Any]:
    clock = Clock()
    decode, augment = torchvision.io.decode_jpeg, device_decode.augment
    torchvision.io.decode_jpeg = clock.timed("decode", decode)  # device_decode imports it at each call
    device_decode.augment = clock.timed("augment", augment)
    try:
        loader, step, _ = runner.build(config, 0.1)
        real = config.compile != "off"  # the config's own step runs; no stand-in
        step = clock.timed("step", step)
        # The compile and the graph's capture happen in the real step's first calls: all before the timing.
        warmup = max(warmup, 30) if real else warmup
        if thread:
            threaded(loader)
        inner = getattr(loader, "loader", None)
        if inner is not None:
            loader.loader = TimedLoader(inner, clock)
        device, cuda = runner.device, runner.device.type == "cuda"
        stop, cores = threading.Event(), []
        batches = samples = 0
        begin = cpu0 = 0.0
        watcher = threading.Thread(target=host_busy, args=(stop, cores), daemon=True)
        tracer: Any = None  # after the timed window, `trace` batches under the profiler (the timing never sees it)
        traced_from, tracing_to = 0.0, 0
        for n, batch in enumerate(epochs(loader)):
            x = batch[0].to(device, non_blocking=True)
            if real:
                step(*batch)
            elif cuda and step_ms > 0:
                torch.cuda._sleep(int(step_ms * 1.98e6))  # about 1.98 GHz: the sleep's cycles, a stand-in step
            if n == warmup:
                if cuda:
                    torch.cuda.synchronize()
                begin, cpu0 = time.perf_counter(), time.thread_time()
                clock.on = True
                watcher.start()
            elif tracer is not None:
                if n >= tracing_to:
                    if cuda:
                        torch.cuda.synchronize()
                    traced_wall = time.perf_counter() - traced_from
                    tracer.__exit__(None, None, None)
                    break
            elif n > warmup:
                batches, samples = batches + 1, samples + len(x)
                if time.perf_counter() - begin > seconds:
                    if cuda:
                        torch.cuda.synchronize()
                    wall, cpu = time.perf_counter() - begin, time.thread_time() - cpu0
                    stop.set()
                    clock.on = False
                    if not trace:
                        break
                    tracer, tracing_to = torch.profiler.profile(activities=trace_activities(cuda)), n + trace
                    tracer.__enter__()
                    traced_from = time.perf_counter()
        else:  # the loader ran out first
            if cuda:
                torch.cuda.synchronize()
            if tracer is None:
                wall, cpu = time.perf_counter() - begin, time.thread_time() - cpu0
                stop.set()
            else:
                traced_wall = time.perf_counter() - traced_from
                tracer.__exit__(None, None, None)
                trace = n - tracing_to + trace  # the batches it did trace
    finally:
        torchvision.io.decode_jpeg, device_decode.augment = decode, augment
    spent = {k: 1000 * v / max(1, batches) for k, v in clock.spent.items()}
    spent["rest"] = 1000 * wall / max(1, batches) - sum(spent.values())
    row = {"config": config.describe() + (" decode-thread" if thread else ""), "samples_per_s": samples / wall,
           "batches": batches,
           "ms_per_batch": spent, "loop_thread_cpu_share": cpu / wall,
           "host_busy_cores": sum(c for _, c in cores) / max(1, len(cores))}
    if tracer is not None:
        row["trace"] = device_time(tracer.profiler.kineto_results.events(), trace, traced_wall)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="imagenet_resnet50")
    parser.add_argument("--configs", default="share=1,workers=8;share=0.5,workers=15;share=0.5,workers=12;cpu;"
                        "cpu,real,workers=15;share=0.5,workers=15,real;share=0.25,workers=15,real;"
                        "share=0.25,workers=13,real,thread")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=int, default=10, help="batches before timing (the workers' backlog)")
    parser.add_argument("--step-ms", type=float, default=0.0)
    parser.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=Path("hybrid_feed.json"))
    args = parser.parse_args()
    runner = Runner(load(resolve(args.recipe)), torch.device(args.device))
    rows = []
    heading = "ms a batch: " + " / ".join(PHASES)
    print(f"{'samples/s':>10}  {heading:<44} {'loop thread':>11} {'host cores':>10}  config")
    for config, thread, trace in parse(args.configs):
        try:
            row = run(runner, config, args.seconds, args.step_ms, args.warmup, thread, trace)
        except Exception as exc:  # noqa: BLE001 - one config's failure is its row; the next configs still run
            print(f"{'failed':>10}  {config.describe()}{' decode-thread' if thread else ''}: "
                  f"{type(exc).__name__}: {str(exc)[:300]}", flush=True)
            rows.append({"config": config.describe(), "thread": thread, "error": f"{type(exc).__name__}: {exc}"})
            continue
        rows.append(row)
        ms = " / ".join(f"{row['ms_per_batch'][p]:.1f}" for p in PHASES)
        print(f"{row['samples_per_s']:10,.0f}  {ms:<44} {row['loop_thread_cpu_share']:11.2f} "
              f"{row['host_busy_cores']:10.1f}  {row['config']}", flush=True)
        if "trace" in row:
            print("           device, ms a batch:", json.dumps(row["trace"]), flush=True)
    args.out.write_text(json.dumps({"step_ms": args.step_ms, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
