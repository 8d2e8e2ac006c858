"""A stream's pass end: autotune's measurement of it beside a loop over whole passes, with no device.

    python lab/probes/stream_pass_end.py --work-ms 3.0 --step-s 0.066
    python lab/probes/stream_pass_end.py --work-ms 3.8 --step-s 0.066 --windows 15

webdataset_resnet50's shape on an H100, made with sleeps: 64 shards of 800 samples over 15 workers (4 of them read
5 shards, 11 read 4), batches of 256, each worker's last one partial, so a pass yields 207 batches where its 51,200
samples declare 200. A worker sleeps `--work-ms` a sample (a decode; sleeping, 15 of them run side by side on two
cores), the step sleeps `--step-s` a batch (a device's step: the loop waits, its CPU idle). `--windows` sets the
fewest windows before the measurement may stop: at 15 its windows reach the pass's last batches, as a noisy
trial's do. Then a plain loop over the same loader, in a process of its own: one pass untimed, then three timed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from autotune.trial.timing import Windows, measure

SHARDS, PER_SHARD, BATCH, WORKERS = 64, 800, 256, 15


class Shards(IterableDataset):
    def __init__(self, work_s: float) -> None:
        self.work_s = work_s

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        for _ in range(worker, SHARDS, workers):
            for _ in range(PER_SHARD):
                time.sleep(self.work_s)
                yield torch.zeros(8)


def loader(work_ms: float) -> DataLoader:
    return DataLoader(Shards(work_ms / 1e3), batch_size=BATCH, num_workers=WORKERS, persistent_workers=True,
                      prefetch_factor=4)


def by_hand(work_ms: float, step_s: float) -> None:
    batches = loader(work_ms)
    for _ in batches:  # the first pass: workers start, the loop settles
        time.sleep(step_s)
    for _ in range(3):
        start, samples, steps = time.perf_counter(), 0, 0
        for batch in batches:
            time.sleep(step_s)
            samples, steps = samples + len(batch), steps + 1
        took = time.perf_counter() - start
        print(f"by hand: a pass of {samples:,} samples in {steps} batches, {took:.2f} s: {samples / took:,.0f}/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-ms", type=float, default=3.0)
    parser.add_argument("--step-s", type=float, default=0.066)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--hand", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hand:
        by_hand(args.work_ms, args.step_s)
        return
    windows = Windows(min_windows=args.windows, max_windows=max(10, args.windows))
    m = measure(lambda batch: time.sleep(args.step_s), loader(args.work_ms), windows, pass_samples=SHARDS * PER_SHARD)
    print(f"autotune: {m.samples_per_s:,.0f}/s (steady {m.steady_samples_per_s:,.0f}/s), a pass of "
          f"{m.steps_per_epoch} batches in {m.epoch_s:.2f} s, its end {m.epoch_overhead_s:.2f} s beyond its steps, "
          f"{len(m.window_rates)} windows")
    subprocess.run([sys.executable, __file__, "--hand", "--work-ms", str(args.work_ms), "--step-s", str(args.step_s)],
                   check=True)


if __name__ == "__main__":
    main()
