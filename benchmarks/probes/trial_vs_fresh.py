"""Probe: does a trial process measure a config slower than a fresh process does?

    python benchmarks/probes/trial_vs_fresh.py --workers 15 --prefetch 2 --bf16 --windows 15

The same measurement (``Runner.run``, the search's windows, `--windows` of them so
that they span two epochs) is made twice, alternately: in a trial process, as a
search makes it (``TrialPool``), and in this process, started afresh with no trial
machinery around it. Each prints its windows in order. Why: on an H200 host the
15-worker row of the truth benchmark read 0.90-0.96 of its hand loop in three of
four calls, with a trial's later windows 14% below its first ones, while a plain
loop's epochs ran alike (``epoch_rates.py``).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import torch

from autotune.config import Config
from autotune.procs.pool import TrialPool
from autotune.trial.runner import Runner
from autotune.trial.timing import Windows
from autotune.workloads import load, resolve


def _line(where: str, result: dict) -> str:
    windows = ", ".join(f"{r:,.0f}" for r in result["window_rates"])
    return (f"{where:>14}: {result['samples_per_s']:,.0f}/s end to end, "
            f"steady {result['steady_samples_per_s']:,.0f}/s, backlog {result['backlog_steps']}, "
            f"epoch start {result['epoch_overhead_s']:.2f} s; windows {windows}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="imagenet_resnet50")
    parser.add_argument("--workers", type=int, default=15)
    parser.add_argument("--prefetch", type=int, default=2)
    parser.add_argument("--persistent", action="store_true")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast and channels_last")
    parser.add_argument("--windows", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args()
    fast = dict(channels_last=True, amp="bf16") if args.bf16 else {}
    config = Config(args.batch_size, num_workers=args.workers, prefetch_factor=args.prefetch, pin_memory=True,
                    persistent_workers=args.persistent, cudnn_benchmark=True, **fast)
    windows = Windows(window_s=0.2, min_windows=args.windows, max_windows=args.windows)
    ref = resolve(args.recipe)
    workload = load(ref)
    lr = workload.defaults["lr"]
    device = torch.device(args.device)
    runner = Runner(workload, device, cpu_share=len(os.sched_getaffinity(0)))
    print(config.describe(), flush=True)
    for i in range(args.rounds):
        cores, logs = len(os.sched_getaffinity(0)), Path(tempfile.mkdtemp())
        pool = TrialPool(ref.workload_path, args.device, cores, logs, timeout_s=600.0)
        try:
            outcome = pool.run(config, lr, windows)
        finally:
            pool.stop()
        said = _line(f"trial process {i}", outcome.result) if outcome.result else f"failed: {outcome.reason}"
        print(said, flush=True)
        print(_line(f"this process {i}", runner.run(config, lr, windows)), flush=True)


if __name__ == "__main__":
    main()
