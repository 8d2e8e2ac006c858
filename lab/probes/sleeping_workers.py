"""autotune's measurement against a hand loop on workers that sleep instead of decoding, alternately, in one process.

    python lab/probes/sleeping_workers.py --sample-ms 4 --workers 4 --rounds 3

Each sample costs its worker `--sample-ms` of sleep, not of CPU, so the host's drift (the cores' clocks, other
load) cannot move the rate: what differs between the two numbers is how each is timed. The hand loop is
`benchmarks/truth.py`'s: warm-up and twice the backlog untimed, then `--seconds` timed.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from autotune.trial.timing import Windows, measure

BATCH = 16
BATCHES_PER_EPOCH = 200


class Sleeping(Dataset):
    def __init__(self, sample_s: float) -> None:
        self.sample_s = sample_s

    def __len__(self) -> int:
        return BATCH * BATCHES_PER_EPOCH

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.sample_s)
        return torch.zeros(8), 0


def step(batch: Any) -> None:
    time.sleep(0.002)  # what launching an asynchronous step costs the host


def by_hand(loader: DataLoader, capacity: int, seconds: float) -> float:
    def batches() -> Iterator[Any]:
        while True:
            yield from loader

    feed = batches()
    for _ in range(10 + 2 * capacity):
        step(next(feed))
    samples, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        batch = next(feed)
        step(batch)
        samples += len(batch[0])
    return samples / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sample-ms", type=float, default=4.0)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--prefetch", type=int, default=2)
    parser.add_argument("--persistent", action="store_true")
    parser.add_argument("--seconds", type=float, default=15.0, help="the hand loop's timed part")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    def loader() -> DataLoader:
        return DataLoader(Sleeping(args.sample_ms / 1000), batch_size=BATCH, shuffle=True, num_workers=args.workers,
                          prefetch_factor=args.prefetch, persistent_workers=args.persistent)

    most = args.workers * 1000 / args.sample_ms
    print(f"at most {most:,.0f}/s: {args.workers} workers, {args.sample_ms} ms a sample")
    for i in range(args.rounds):
        hand = by_hand(loader(), args.workers * args.prefetch, args.seconds)
        m = measure(step, loader(), Windows())
        print(f"round {i}: by hand {hand:,.0f}/s, autotune {m.samples_per_s:,.0f}/s (steady "
              f"{m.steady_samples_per_s:,.0f}/s, {len(m.window_rates)} windows, backlog {m.backlog_steps}), "
              f"ratio {m.samples_per_s / hand:.3f}", flush=True)


if __name__ == "__main__":
    main()
