"""Probe: how far amp's gradients are from fp32's, by parameter, and by two measures, for one workload.

For each batch size and numerics given, the gradients of BATCHES batches from the same
initial weights (``autotune.parity.gradients``'s procedure), then per parameter tensor
the error |g_amp - g_fp32|^2 and the batch-to-batch noise, the ten tensors with the most
error, and the error and noise projected on the mean gradient (the direction a step
descends). Prints one JSON line per (batch size, numerics).

    python3 lab/probes/numerics.py --recipe imagenet_resnet50 --batch-sizes 256 64 --amp bf16:cl fp16:cl
"""

from __future__ import annotations

import argparse
import itertools
import json
import time

import torch

from autotune.config import Config
from autotune.parity.gradients import numerics_of, train_steps
from autotune.parity.run import ORDER_SEED, own_order
from autotune.trial.runner import Runner
from autotune.workloads import load, resolve


def grads(step, batch, seed):
    torch.manual_seed(seed)
    return [g.float().reshape(-1) for g in step.gradient(step.to_device(batch))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipe", required=True)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[256])
    parser.add_argument("--amp", nargs="+", default=["bf16:cl"])
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--trained", type=int, nargs="+", default=[0],
                        help="measure after the baseline has trained this many steps (fp32, the workload's lr)")
    args = parser.parse_args()
    workload = load(resolve(args.recipe))
    runner = Runner(workload, torch.device(args.device))
    lr = float(workload.defaults["lr"])
    for bs in args.batch_sizes:
        base = Config(batch_size=bs, num_workers=args.workers)
        loader, base_step, _ = runner.build(base, lr)
        names = [n for n, _ in base_step.model.named_parameters()]
        trained = 0
        for target in args.trained:
            started = time.perf_counter()
            trained += train_steps(base_step, loader, target - trained)
            train_s = time.perf_counter() - started
            own_order(loader, ORDER_SEED)
            host = list(itertools.islice(iter(loader), args.batches))
            refs = [grads(base_step, b, i) for i, b in enumerate(host)]
            for spec in args.amp:
                measure(args, runner, base, base_step, spec, host, refs, names, lr, bs, trained, train_s)


def measure(args, runner, base, base_step, spec, host, refs, names, lr, bs, trained, train_s) -> None:
    amp, _, cl = spec.partition(":")
    start = time.perf_counter()
    _, step, _ = runner.build(numerics_of(base, Config(batch_size=bs, amp=amp, channels_last=cl == "cl")), lr)
    step.model.load_state_dict(base_step.model.state_dict())
    k = len(host)
    err = torch.zeros(len(names), dtype=torch.float64)
    noise = torch.zeros(len(names), dtype=torch.float64)
    mean = [sum(r[j] for r in refs) / k for j in range(len(names))]
    unit = torch.cat(mean)
    unit = unit / unit.norm()
    proj_err, proj_ref = [], []
    for i, batch in enumerate(host):
        mine = grads(step, batch, i)
        for j in range(len(names)):
            err[j] += float((mine[j].double() - refs[i][j].double()).square().sum()) / k
            noise[j] += float((refs[i][j].double() - mean[j].double()).square().sum()) / (k - 1)
        proj_err.append(float((torch.cat(mine) - torch.cat(refs[i])) @ unit))
        proj_ref.append(float(torch.cat(refs[i]) @ unit))
    top = sorted(range(len(names)), key=lambda j: -err[j])[:5]
    pr = torch.tensor(proj_ref, dtype=torch.float64)
    print(json.dumps({
        "recipe": args.recipe, "batch_size": bs, "numerics": spec, "batches": k, "trained_steps": trained,
        "train_s": round(train_s, 1),
        "ratio": float(err.sum() / noise.sum()), "error": float(err.sum()), "noise": float(noise.sum()),
        "signal": float(sum(m.double().square().sum() for m in mean)),
        "projected_ratio": float(torch.tensor(proj_err, dtype=torch.float64).square().mean() / pr.var()),
        "top": [[names[j], round(float(err[j] / err.sum()), 4), round(float(err[j] / noise[j]), 4)]
                for j in top],
        "seconds": round(time.perf_counter() - start, 1),
    }), flush=True)


if __name__ == "__main__":
    main()
