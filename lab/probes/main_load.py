"""Probe: what one batch costs to load in the loop's own process (0 workers), with torch's threads at their
default and at 1, alternated so that a host that drifts shows in both.

Why: with 0 workers autotune's trial measured the ImageNet loop 10% faster than the hand loop twice (255/s
against 230/s, 288/s against 263/s), though its windows also wait for the device. Loading is the loop's
time there; this says whether that time depends on torch's intra-op threads (ToTensor and Normalize run
per sample, each op spread over every core) or on the process.

    python3 lab/probes/main_load.py --batches 6 --rounds 2
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.data import DataLoader

from autotune.workloads import load, resolve
from autotune.workloads.locate import data_root


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--recipe", default="imagenet_resnet50")
    args = parser.parse_args()
    dataset = load(resolve(args.recipe)).build_dataset(data_root())
    default = torch.get_num_threads()
    torch.manual_seed(0)
    batches = iter(DataLoader(dataset, batch_size=256, shuffle=True))
    next(batches)
    for r in range(args.rounds):
        for threads in (default, 1):
            torch.set_num_threads(threads)
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(args.batches):
                next(batches)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            print(f"round {r} threads {threads:>2}: {wall / args.batches * 1e3:.0f} ms a batch, "
                  f"{256 * args.batches / wall:.0f} samples/s, CPU {cpu / wall:.2f} cores", flush=True)
    torch.set_num_threads(default)


if __name__ == "__main__":
    main()
