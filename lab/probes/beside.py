"""A loader-bound measurement on one GPU while another worker measures on the other, on one host.

    python lab/probes/beside.py --recipe mnist_cnn

Under `--gpus 0,1` two workers measure side by side, each with half the host's
cores as its share. The workload's own settings (the baseline: one process
decoding every sample) depend on the host's CPU more than any other config, so
they show first what the other worker costs. This measures the baseline in a
trial process on cuda:0 (`--devices`), `--repeats` times each, with cuda:1's trial process
idle, running the device-resident CUDA-graph loop, or running a loader with
`share` DataLoader workers; once with both processes free to use every core, and
once with each pinned to its own half of the cores (sched_setaffinity, which
DataLoader workers inherit).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
from pathlib import Path

from autotune.config import Config
from autotune.procs.pool import TrialPool
from autotune.trial.timing import Windows
from autotune.workloads import load, resolve
from autotune.workloads.settings import baseline_config

WINDOWS = Windows(window_s=0.2)
LOAD_WINDOWS = Windows(window_s=0.2, min_windows=10, max_windows=10)


def started_on(cores: set[int], path: Path, device: str, share: int, logs: Path) -> TrialPool:
    """A pool whose trial process starts now with `cores` as its CPU affinity (inherited at spawn)."""
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        pool = TrialPool(path, device, share, logs, 120.0)
        pool.prestart(1)
    finally:
        os.sched_setaffinity(0, mine)
    return pool


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="mnist_cnn")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--devices", default="cuda:0,cuda:1", help="where the baseline runs, and where the other worker does"
    )
    args = parser.parse_args()
    ref = resolve(args.recipe)
    workload = load(ref)
    bs, lr = workload.defaults["batch_size"], float(workload.defaults["lr"])
    cores = sorted(os.sched_getaffinity(0))
    share = len(cores) // 2
    halves = (set(cores[:share]), set(cores[share:]))
    here, there = args.devices.split(",")
    base = baseline_config(workload, here.startswith("cuda"))
    loads = {
        "idle": None,
        "graph loop": Config(batch_size=bs * 8, placement="device", cuda_graph=True, cudnn_benchmark=True),
        f"{share} loader workers": Config(
            batch_size=bs * 8,
            num_workers=share,
            pin_memory=True,
            persistent_workers=True,
            prefetch_factor=2,
            cudnn_benchmark=True,
        ),
    }
    print(f"baseline {base.describe()} on {here}, {len(cores)} cores, share {share}", flush=True)
    with tempfile.TemporaryDirectory() as logs:
        for pinned in (False, True):
            every = set(cores)
            a = started_on(halves[0] if pinned else every, ref.workload_path, here, share, Path(logs))
            b = started_on(halves[1] if pinned else every, ref.workload_path, there, share, Path(logs))
            try:
                for name, other in loads.items():
                    stop = threading.Event()

                    def keep_busy(config: Config | None = other) -> None:
                        while config is not None and not stop.is_set():
                            outcome = b.run(config, lr * config.batch_size / bs, LOAD_WINDOWS)
                            assert outcome.state == "complete", outcome.reason

                    busy = threading.Thread(target=keep_busy)
                    busy.start()
                    rates = []
                    for _ in range(args.repeats):
                        outcome = a.run(base, lr, WINDOWS)
                        assert outcome.result is not None, outcome.reason
                        rates.append(outcome.result["samples_per_s"])
                    stop.set()
                    busy.join()
                    where = "pinned to half the cores" if pinned else "free on all cores"
                    print(
                        f"{where:<26} {there} {name:<18} baseline median {statistics.median(rates):8,.0f}/s  "
                        f"({', '.join(f'{r:,.0f}' for r in rates)})",
                        flush=True,
                    )
            finally:
                a.stop()
                b.stop()


if __name__ == "__main__":
    main()
