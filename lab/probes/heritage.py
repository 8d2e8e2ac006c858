"""Probe: does a process forked from autotune's fork server load slower than one started afresh?

    python3 lab/probes/heritage.py --workers 4 --prefetch 2 --rounds 3 --seconds 15

Why: the truth benchmark's row for the workload's own ImageNet settings (4 workers,
pinned, fp32) read 0.84-0.95 of its hand loop in 9 of 11 runs on H200 hosts, within
epochs too; a loop of 4 workers is bound by its workers' CPU, so either the trial
process's workers decode slower, or its measurement reads low. Three arms, in turn,
each round:

- ``spawned``: truth.py's hand loop in a process started afresh (as truth.py runs it);
- ``forked``: the same hand loop in a process forked from autotune's fork server,
  as a trial process is (torch and the trial modules imported before the fork);
- ``trial``: autotune's measurement in a trial process (``TrialPool``), as a search makes it.

The two hand arms give their workers' and their own CPU milliseconds per sample over the
timed part. For every arm, a thread here reads the CPU of the arm's whole process tree each
second; its median cores busy over the middle of the run, over the arm's rate, gives CPU
per sample by the same rule for all three (a worker that exits between two readings takes
its CPU with it: that second is dropped). ``spawned`` against ``forked`` is the process's
heritage alone; ``forked`` against ``trial`` is the measurement alone.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import loader_args
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # truth.py's package, truthbench
from truthbench import report  # noqa: E402
from truthbench.processes import SEARCH_WINDOWS, hand_loop_process, in_a_fresh_process  # noqa: E402

from autotune.config import Config  # noqa: E402
from autotune.procs import lifecycle  # noqa: E402
from autotune.procs.pool import TrialPool  # noqa: E402
from autotune.trial.cputime import _process_cpu_s  # noqa: E402
from autotune.workloads import load, resolve  # noqa: E402


def _tree(root: int) -> list[int]:
    """`root` and every process under it, read from /proc."""
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(f"/proc/{entry.name}/stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
    found, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, ppid in parents.items() if ppid in frontier]
        found += frontier
    return found


class TreeCpu:
    """Cores busy in a process tree, read each second in a thread: the median over the middle of the run."""

    def __init__(self) -> None:
        self.root: int | None = None
        self.readings: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            if self.root is not None:
                total = sum(_process_cpu_s(str(pid)) or 0.0 for pid in _tree(self.root))
                self.readings.append((time.perf_counter(), total))

    def cores(self) -> float | None:
        self._stop.set()
        self._thread.join()
        # Per-second deltas; a worker that exits takes its CPU with it (a negative delta): dropped.
        deltas = [(c1 - c0) / (t1 - t0) for (t0, c0), (t1, c1) in zip(self.readings, self.readings[1:]) if c1 >= c0]
        middle = deltas[len(deltas) // 3: -max(1, len(deltas) // 6)] or deltas
        return statistics.median(middle) if middle else None


def forked_hand_loop(workload_path: Path, config: Config, lr: float, seconds: float, device: torch.device,
                     watch: TreeCpu) -> dict[str, Any]:
    """truth.py's hand loop in a process forked from autotune's fork server, as a trial process is."""
    results, sender = multiprocessing.get_context("forkserver").Pipe(duplex=False)
    forked = lifecycle.fork(hand_loop_process, (str(workload_path), config, lr, seconds, str(device), sender),
                            workload_path)
    watch.root = forked.pid
    sender.close()
    try:
        return results.recv()
    except EOFError:  # the child died before it could say anything
        return RuntimeError(f"the forked hand loop ended without a result, with exit status {forked.poll()}")
    finally:
        forked.wait()


def spawned_hand_loop(workload_path: Path, config: Config, lr: float, seconds: float, device: torch.device,
                      watch: TreeCpu) -> dict[str, Any]:
    """truth.py's hand loop in a process started afresh; the tree is read from this process's children."""
    watch.root = os.getpid()  # this process idles meanwhile: its own CPU adds next to nothing
    return in_a_fresh_process(workload_path, config, lr, seconds, device)


def trial(workload_path: Path, config: Config, lr: float, device: torch.device, watch: TreeCpu) -> dict[str, Any]:
    pool = TrialPool(workload_path, str(device), len(os.sched_getaffinity(0)), Path(tempfile.mkdtemp()), 600.0)
    watch.root = multiprocessing.forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined]
    try:
        outcome = pool.run(config, lr, SEARCH_WINDOWS)
    finally:
        pool.stop()
    if outcome.state != "complete" or outcome.result is None:
        raise SystemExit(f"the trial ended {outcome.state}: {outcome.reason}")
    return outcome.result


def main() -> None:
    parser = loader_args.parser(__doc__, workers=4, prefetch=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    ref = resolve(args.recipe)
    workload = load(ref)
    # The workload's own settings by default (no cudnn.benchmark, fp32), not loader_args.config's.
    fast = dict(channels_last=True, amp="bf16") if args.bf16 else {}
    config = Config(args.batch_size, num_workers=args.workers, pin_memory=True, prefetch_factor=args.prefetch,
                    persistent_workers=args.persistent, **fast)
    lr, device = float(workload.defaults["lr"]), torch.device(args.device)
    lifecycle.start_fork_server(ref.workload_path)
    print(f"{config.describe()} on {os.cpu_count()} cores; hand loops {args.seconds:.0f} s", flush=True)
    for r in range(args.rounds):
        for arm in ("spawned", "forked", "trial"):
            watch = TreeCpu()
            if arm == "trial":
                result = trial(ref.workload_path, config, lr, device, watch)
                rate, extra = result["samples_per_s"], (f"steady {result['steady_samples_per_s']:,.0f}/s, windows "
                                                        + ", ".join(f"{w:,.0f}" for w in result["window_rates"]))
            else:
                run = spawned_hand_loop if arm == "spawned" else forked_hand_loop
                result = run(ref.workload_path, config, lr, args.seconds, device, watch)
                if isinstance(result, Exception):
                    raise SystemExit(f"{arm}: {result}")
                rate = result["samples_per_s"]
                extra = (f"workers {result['workers_cpu_ms']:.2f} ms CPU/sample, loop's process "
                         f"{result['main_cpu_ms']:.2f}; within epochs {report.rate(result['steady_samples_per_s'])}")
            cores = watch.cores()
            tree = "-" if cores is None else f"{cores:.2f} cores busy, {cores / rate * 1e3:.2f} ms/sample"
            print(f"round {r} {arm:>8}: {rate:,.0f}/s; tree {tree}; {extra}", flush=True)
    lifecycle.end_fork_server()


if __name__ == "__main__":
    main()
