"""Probe: where a device-resident CUDA-graph loop spends its step, in the process it runs in.

What it probes: for one config, already measured by a `Runner`, the host's time to enqueue a step,
the wall time of a step, CUDA events around an epoch and around one graph replay, and a
`torch.profiler` pass (kernels per step and their time), plus the process's facts (threads, CPU
affinity, cudnn.benchmark, environment). Each call appends one JSON line to KPROBE_OUT. It is
called by `sitecustomize.py` (inside a search's trial processes) and by `kstand.py` (fresh
processes).

Its output: lab/results/h200/scaleout_c/kernel_probe/one.jsonl, two.jsonl and stand.jsonl;
lab/results/h200/scaleout_c/README.md tabulates them. Written against the code before commit
8e0457a (a `Runner` with `build(config, lr)` and `step.graph`); it does not run on the current layout
as is.
"""

import json
import os
import time

import torch

OUT = os.environ.get("KPROBE_OUT", "/tmp/kprobe.jsonl")


def _facts():
    stat = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
    try:
        parent = open(f"/proc/{os.getppid()}/cmdline", "rb").read().replace(b"\0", b" ").decode()[:160]
    except OSError:
        parent = "?"
    return {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "parent": parent,
        "cpu_now": int(stat[36]),
        "affinity": len(os.sched_getaffinity(0)),
        "threads": torch.get_num_threads(),
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_tf32": torch.backends.cudnn.allow_tf32,
        "matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
        "reserved_mb": torch.cuda.memory_reserved() // 2**20,
        "env": {
            k: v
            for k, v in os.environ.items()
            if k.startswith(("CUDA", "OMP", "MKL", "NCCL", "TORCH", "PYTORCH", "AUTOTUNE_CPU"))
        },
    }


def probe(runner, config, lr, tag, history, result=None, sampler=False):
    dev = runner.device
    loader, step, _ = runner.build(config, lr)
    bs = config.batch_size

    def epoch(limit=None):
        k = 0
        for x, y in loader:
            if x.shape[0] != bs:
                continue
            step(x, y)
            k += 1
            if limit and k >= limit:
                break
        return k

    epoch()
    torch.cuda.synchronize(dev)
    rows = []
    for _ in range(6):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        s.record()
        k = epoch()
        e.record()
        t1 = time.perf_counter()
        torch.cuda.synchronize(dev)
        t2 = time.perf_counter()
        rows.append(((t1 - t0) / k * 1e6, (t2 - t0) / k * 1e6, s.elapsed_time(e) * 1e3 / k))
    rows.sort(key=lambda r: r[1])
    host, wall, gpu = rows[len(rows) // 2]
    # One graph replay alone, timed by events: the graph's own GPU time, nothing queued around it.
    g = step.graph
    replay = None
    if g is not None:
        times = []
        for _ in range(20):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(dev)
            s.record()
            g.replay()
            e.record()
            torch.cuda.synchronize(dev)
            times.append(s.elapsed_time(e) * 1e3)
        times.sort()
        replay = times[len(times) // 2]
    kernels = {}
    busy = None
    try:
        from torch.profiler import ProfilerActivity, profile

        torch.cuda.synchronize(dev)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            k = epoch(limit=20)
            torch.cuda.synchronize(dev)
        spans = []
        for ev in prof.events():
            if ev.device_type == torch.autograd.DeviceType.CUDA:
                d = ev.time_range.elapsed_us()
                name = ev.name[:90]
                c, t = kernels.get(name, (0, 0.0))
                kernels[name] = (c + 1, t + d)
                spans.append((ev.time_range.start, ev.time_range.end))
        if spans:
            spans.sort()
            total, cur_s, cur_e = 0.0, *spans[0]
            for a, b in spans[1:]:
                if a > cur_e:
                    total += cur_e - cur_s
                    cur_s, cur_e = a, b
                else:
                    cur_e = max(cur_e, b)
            total += cur_e - cur_s
            busy = {
                "kernel_us_per_step": sum(t for _, t in kernels.values()) / k,
                "busy_us_per_step": total / k,
                "span_us_per_step": (spans[-1][1] - spans[0][0]) / k,
                "kernels_per_step": sum(c for c, _ in kernels.values()) / k,
            }
    except Exception as exc:  # noqa: BLE001
        busy = {"error": repr(exc)[:300]}
    top = sorted(kernels.items(), key=lambda kv: -kv[1][1])[:25]
    rec = {
        "tag": tag,
        "config": config.describe(),
        "history": list(history),
        "trial_rate": result and result.get("samples_per_s"),
        "trial_step_us": result and result.get("step_s", 0) * 1e6,
        "host_us": round(host, 1),
        "wall_us": round(wall, 1),
        "gpu_event_us": round(gpu, 1),
        "replay_us": replay and round(replay, 1),
        "profile": busy,
        "top": [[n, c, round(t / max(1, c), 1)] for n, (c, t) in top],
        **_facts(),
    }
    with open(OUT, "a") as f:
        f.write(json.dumps(rec) + "\n")
    return rec
