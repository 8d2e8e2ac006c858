"""Probe: does a plain loop run its first epoch at the speed of its later ones?

    python lab/probes/epoch_rates.py --workers 15 --prefetch 2 --bf16 --epochs 4

A hand-written loop (truth.py's, by hand, no autotune code in the loop) runs `--epochs`
whole epochs of `--recipe` and states, per epoch, its rate within the epoch (from the
epoch's second batch, in the first epoch from past twice the backlog its warm-up
let the workers make, to `capacity` batches before its end, where the workers still
have the epoch's work) and its whole wall time, the device synchronised at epoch ends
only. Why: on an H200 host, autotune's windows in a trial's second epoch read 14-35%
below those in its first, for 15 fresh workers and for 8 persistent ones; whether a
real loop's epochs differ so decides which of the two a measurement must read.
"""

from __future__ import annotations

import time

import loader_args
import torch
from torch.utils.data import DataLoader

from autotune.workloads import load, resolve
from autotune.workloads.locate import data_root


def main() -> None:
    parser = loader_args.parser(__doc__, workers=15, prefetch=2)
    parser.add_argument("--epochs", type=int, default=4)
    args = parser.parse_args()
    device = torch.device(args.device)
    workload = load(resolve(args.recipe))
    torch.backends.cudnn.benchmark = True
    fmt = torch.channels_last if args.bf16 else torch.contiguous_format
    model = workload.build_model().to(device, memory_format=fmt).train()
    optimizer = workload.build_optimizer(model.parameters(), workload.defaults["lr"])
    criterion = workload.build_loss()
    loader = DataLoader(workload.build_dataset(data_root()), batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers, pin_memory=True, prefetch_factor=args.prefetch,
                        persistent_workers=args.persistent)
    capacity = args.workers * args.prefetch
    print(f"{args.workers} workers, prefetch {args.prefetch}, persistent {args.persistent}, bf16+CL {args.bf16}; "
          f"{len(loader)} batches an epoch", flush=True)
    for epoch in range(args.epochs):
        start = time.perf_counter()
        arrived = []
        for i, (x, y) in enumerate(loader):
            arrived.append(time.perf_counter())
            x = x.to(device, non_blocking=True).contiguous(memory_format=fmt)
            y = y.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16):
                loss = criterion(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        wall = time.perf_counter() - start
        # The first epoch's first batches drain what the workers made during the warm-up: left out.
        first, last = 1 + (2 * capacity if epoch == 0 else 0), len(arrived) - 1 - capacity
        within = (last - first) * args.batch_size / (arrived[last] - arrived[first])
        print(f"epoch {epoch}: within {within:,.0f}/s (batches {first}..{last}), "
              f"whole {len(loader.dataset) / wall:,.0f}/s in {wall:.1f} s, "
              f"first batch after {arrived[0] - start:.2f} s", flush=True)


if __name__ == "__main__":
    main()
