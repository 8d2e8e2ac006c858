"""Probe: where a loader-bound hand loop's time goes, batch by batch, over a long run.

Why: on one 16-core H200 host the workload's own ImageNet settings (4 workers, pinned, fp32) ran 819/s
by hand for the first 15 s, then up to 1,178/s per 5 s, while autotune's shorter measurement read 792-830/s.
This loop records, for every batch, in the worker that made it: when it began and ended the batch (wall clock
shared by all processes) and the CPU seconds it spent; in the loop: when the batch arrived. From those:
each worker's CPU per sample over time (a core that speeds up), its idle time between batches (a worker
waiting on the loop, the pin thread or its queue), and how long a made batch took to reach the loop. The host's
busy cores are sampled each second from /proc/stat.

    python3 lab/probes/loader_probe.py --seconds 45 --workers 4 [--no-pin] --out probe.json
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from autotune.workloads import load, resolve
from autotune.workloads.locate import data_root

_BATCH: dict[str, float] = {}  # in a worker process: the batch being made


class Timed(Dataset):
    """The data set, noting when each worker began a batch and the CPU it spent on it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int) -> Any:
        if "begin" not in _BATCH:
            _BATCH["begin"], _BATCH["cpu"] = time.time(), time.thread_time()
        return self.inner[i]


def collate(samples: list[Any]) -> Any:
    x, y = default_collate(samples)
    info = torch.utils.data.get_worker_info()
    stats = torch.tensor([info.id if info else -1, _BATCH.pop("begin", time.time()), time.time(),
                          time.thread_time() - _BATCH.pop("cpu", time.thread_time())], dtype=torch.float64)
    return x, y, stats


def host_busy(stop: threading.Event, out: list[tuple[float, float]]) -> None:
    """Busy cores of the whole host, once a second, from /proc/stat."""
    def read() -> tuple[int, int]:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        return sum(fields) - fields[3] - fields[4], sum(fields)

    busy0, total0 = read()
    while not stop.wait(1.0):
        busy1, total1 = read()
        out.append((time.time(), os.cpu_count() * (busy1 - busy0) / max(1, total1 - total0)))
        busy0, total0 = busy1, total1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="imagenet_resnet50")
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--prefetch", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--no-pin", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("probe.json"))
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args()
    device = torch.device(args.device)
    workload = load(resolve(args.recipe))
    model = workload.build_model().to(device).train()
    optimizer = workload.build_optimizer(model.parameters(), float(workload.defaults["lr"]))
    criterion = workload.build_loss()
    pin = not args.no_pin
    loader = DataLoader(Timed(workload.build_dataset(data_root())), batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers, pin_memory=pin, prefetch_factor=args.prefetch, collate_fn=collate)
    stop, busy = threading.Event(), []
    threading.Thread(target=host_busy, args=(stop, busy), daemon=True).start()
    rows = []
    t0 = time.time()
    for x, y, stats in loader:
        arrived = time.time()
        x, y = x.to(device, non_blocking=pin), y.to(device, non_blocking=pin)
        loss = criterion(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        rows.append([*stats.tolist(), arrived])
        if arrived - t0 > args.seconds:
            break
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    stop.set()
    args.out.write_text(json.dumps({"t0": t0, "rows": rows, "busy": busy, "workers": args.workers, "pin": pin,
                                    "batch_size": args.batch_size}))
    summarize(t0, rows, busy, args.workers, args.batch_size)


def summarize(t0: float, rows: list[list[float]], busy: list[tuple[float, float]], workers: int, bs: int) -> None:
    """Per 5 s of the run: batches arrived, samples/s, each worker's ms of CPU per sample and share of time busy,
    the median delay from a batch made to its arrival, and the host's busy cores."""
    print(f"{len(rows)} batches in {rows[-1][4] - t0:.1f} s, {workers} workers, batch {bs}")
    print(" from   arrived  samples/s  cpu ms/sample (per worker)      busy share (per worker)   made->loop s"
          "  host cores")
    for lo in range(0, int(rows[-1][4] - t0) + 1, 5):
        hi = lo + 5
        here = [r for r in rows if lo <= r[4] - t0 < hi]
        cpu = []
        share = []
        for w in range(workers):
            mine = [r for r in rows if int(r[0]) == w and lo <= r[2] - t0 < hi]
            cpu.append(f"{1000 * sum(r[3] for r in mine) / max(1, bs * len(mine)):5.2f}" if mine else "  -  ")
            making = sum(max(0.0, min(r[2], t0 + hi) - max(r[1], t0 + lo)) for r in rows if int(r[0]) == w)
            share.append(f"{making / 5:4.2f}")
        delays = sorted(r[4] - r[2] for r in here)
        cores = [c for t, c in busy if lo <= t - t0 < hi]
        print(f"{lo:4d}s  {len(here):6d}  {len(here) * bs / 5:9,.0f}  {' '.join(cpu):<32} {' '.join(share):<26}"
              f"{delays[len(delays) // 2] if delays else float('nan'):10.2f}  "
              f"{sum(cores) / max(1, len(cores)):6.1f}")


if __name__ == "__main__":
    main()
