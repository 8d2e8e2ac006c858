"""Probe: does a trial process measure a config slower than a fresh process does?

    python lab/probes/trial_vs_fresh.py --workers 15 --prefetch 2 --bf16 --windows 15

The same measurement (``Runner.run``, the search's windows, `--windows` of them so
that they span two epochs) is made twice, alternately: in a trial process, as a
search makes it (``TrialPool``), and in this process, started afresh with no trial
machinery around it. Each prints its windows in order. Why: on an H200 host the
15-worker row of the truth benchmark read 0.90-0.96 of its hand loop in three of
four calls, with a trial's later windows 14% below its first ones, while a plain
loop's epochs ran alike (``epoch_rates.py``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import loader_args
import torch

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
    parser = loader_args.parser(__doc__, workers=15, prefetch=2)
    parser.add_argument("--windows", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    config = loader_args.config(args)
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
