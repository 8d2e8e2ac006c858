"""Probe: each timed window of one measurement, with the backlog readings it was corrected by.

    python lab/probes/window_trace.py --workers 8 --prefetch 8 --persistent --bf16

One ``Runner.run`` in this process, with autotune's timing functions wrapped to print,
per window: its steps, seconds, the batches ready at its start and end, whether the
loop ran dry, and the rate it states; and for the backlog skip, what was ready before
and after it. Why: on an H200 host, the 8-worker, prefetch-8 row's windows read
2,200-2,800/s in a trial's first epoch and 1,600-1,900/s in its second, while a plain
loop's epochs ran 1,816-1,938/s within (``epoch_rates.py``); a sleep-based data set on
a CPU shows no such difference. Its output, on the code before the skip went on through
the drain: lab/results/h200_one_gpu/runs.log, call 44.
"""

from __future__ import annotations

import os
import time

import loader_args
import torch

from autotune.trial import steady, timing
from autotune.trial.runner import Runner
from autotune.workloads import load, resolve


def _traced() -> None:
    timed, skip = steady.timed, timing._skip_backlog

    def traced_timed(feed, step, n, clock, sync, restart=False, cpu=None):  # noqa: ANN001, ANN202
        before = feed.ready()
        window = timed(feed, step, n, clock, sync, restart, cpu)
        print(f"  window {'restart ' if restart else ''}steps {n:3d} at {feed.position:3d}: {window.seconds:6.3f} s, "
              f"ready {before} -> {feed.ready()}, drained {window.drained}, dry {window.ran_dry}, "
              f"{window.samples / window.seconds:7,.0f}/s taken, {window.rate:7,.0f}/s stated", flush=True)
        return window

    def traced_skip(feed, step, capacity, workers):  # noqa: ANN001, ANN202
        before, start = feed.ready(), time.perf_counter()
        taken = skip(feed, step, capacity, workers)
        print(f"  skipped {taken} in {time.perf_counter() - start:.2f} s: ready {before} -> {feed.ready()}, "
              f"last wait {feed.last_wait * 1e3:.2f} ms", flush=True)
        return taken

    # Steady looks `timed` up in its own module; the backlog skip is measure's, in timing's
    steady.timed, timing._skip_backlog = traced_timed, traced_skip


def main() -> None:
    parser = loader_args.parser(__doc__, workers=8, prefetch=8)
    parser.add_argument("--windows", type=int, default=15)
    args = parser.parse_args()
    config = loader_args.config(args)
    workload = load(resolve(args.recipe))
    runner = Runner(workload, torch.device(args.device), cpu_share=len(os.sched_getaffinity(0)))
    _traced()
    print(config.describe(), flush=True)
    windows = timing.Windows(window_s=0.2, min_windows=args.windows, max_windows=args.windows)
    result = runner.run(config, workload.defaults["lr"], windows)
    print(f"{result['samples_per_s']:,.0f}/s end to end, steady {result['steady_samples_per_s']:,.0f}/s, "
          f"epoch start {result['epoch_overhead_s']:.2f} s, {result['steps_per_epoch']} batches an epoch", flush=True)


if __name__ == "__main__":
    main()
