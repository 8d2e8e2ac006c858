"""Probe: how short a parity run still tells a correct learning-rate rule from a wrong one, on a slow learner.

Each config trains once from the check's seed over the check's data order
(``autotune.parity.run``), its every step's loss kept, and the probe set evaluated
batch by batch, plain and with its targets shuffled, at each of --at samples. A
check of any of those lengths is then read off the same runs: the baseline's
progress and its noise (``autotune.parity.signal``), and each candidate's deviation
and probe deviation (``autotune.parity.verdict.compare``). Prints one JSON line
per (length, candidate). Deterministic on a CPU: the numbers repeat.

    python3 lab/probes/short_parity.py --recipe mnist_cnn --at 8192 16384 26624 37888 65536 \
        --candidates 256:0.02 1024:0.08 2048:0.08 8192:0.08 1024:0.028 8192:0.01
"""

from __future__ import annotations

import argparse
import json
import math

import torch

from autotune.config import Config
from autotune.parity import verdict
from autotune.parity.run import ORDER_SEED, ParityRun, own_order, probe
from autotune.trial.runner import Runner
from autotune.workloads import load, resolve


def per_batch(step, probe_set, batch: int) -> list[float]:
    """The probe's loss batch by batch, as ``autotune.parity.run.probe_loss`` computes its mean."""
    model = step.model
    saved = [b.detach().clone() for b in model.buffers()]
    made = []
    with torch.no_grad():
        for host, _ in probe_set.batches(batch):
            made.append(float(step.loss(step.to_device(host))))
    for buffer, value in zip(model.buffers(), saved):
        buffer.copy_(value)
    return made


def trained(runner: Runner, config: Config, lr: float, at: list[int], probe_set, probe_batch: int) -> dict:
    loader, step, _ = runner.build(config, lr)
    shuffled = probe_set.shuffled()
    checkpoints = {0: (per_batch(step, probe_set, probe_batch), per_batch(step, shuffled, probe_batch))}
    ends, losses = [], []
    seen = epoch = 0
    todo = sorted(at)
    while todo:
        own_order(loader, ORDER_SEED + epoch)
        epoch += 1
        for batch in loader:
            losses.append(float(step(batch)))
            seen += runner.workload.count(batch)
            ends.append(seen)
            while todo and seen >= todo[0]:
                checkpoints[todo.pop(0)] = (per_batch(step, probe_set, probe_batch),
                                            per_batch(step, shuffled, probe_batch))
            if not todo:
                break
    return {"ends": ends, "losses": losses, "checkpoints": checkpoints}


def run_at(made: dict, config: Config, lr: float, samples: int) -> ParityRun:
    """The ParityRun a check of `samples` would have got: the steps up to it, the probe after it."""
    n = next(i for i, e in enumerate(made["ends"]) if e >= samples) + 1
    initial, _ = made["checkpoints"][0]
    final, shuffled = made["checkpoints"][samples]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return ParityRun(config.batch_size, lr, mean(initial), mean(final), tuple(made["ends"][:n]),
                     tuple(made["losses"][:n]), True, 0.0, mean(shuffled))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipe", required=True)
    parser.add_argument("--at", type=int, nargs="+", default=[8192, 16384, 26624, 37888, 65536])
    parser.add_argument("--candidates", nargs="+", default=["1024:0.08"], help="batch:lr")
    args = parser.parse_args()
    workload = load(resolve(args.recipe))
    runner = Runner(workload, torch.device("cpu"))
    bs, lr0 = int(workload.defaults["batch_size"]), float(workload.defaults["lr"])
    probe_set = probe(runner.dataset, workload.collate_fn)
    base_config = Config(batch_size=bs)
    base = trained(runner, base_config, lr0, args.at, probe_set, bs)
    for spec in args.candidates:
        batch, lr = spec.split(":")
        config = Config(batch_size=int(batch))
        made = trained(runner, config, float(lr), args.at, probe_set, bs)
        for samples in args.at:
            window = samples // verdict.WINDOW_PARTS
            b, c = run_at(base, base_config, lr0, samples), run_at(made, config, float(lr), samples)
            v = verdict.compare(b, c, "batch_size", samples, window)
            print(json.dumps({
                "samples": samples, "candidate": spec, "progress": round(verdict.progress(b, samples, window), 5),
                **terms(base, b, samples, window),
                "initial": round(b.initial_loss, 6), "loss": round(v.loss, 6),
                "baseline_loss": round(v.baseline_loss, 6),
                "probe_loss": round(v.probe_loss, 6), "baseline_probe_loss": round(v.baseline_probe_loss, 6),
                "deviation": round(v.deviation, 3), "probe_deviation": round(v.probe_deviation, 3),
                "passed": v.passed,
            }), flush=True)


def se(xs: list[float]) -> float:
    mean = sum(xs) / len(xs)
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1) / len(xs))


def terms(made: dict, run: ParityRun, samples: int, window: int) -> dict:
    """The baseline's three measures of what it learned, each with its standard error, in nats."""
    initial, _ = made["checkpoints"][0]
    final, shuffled = made["checkpoints"][samples]
    steps = [loss for end, loss in zip(run.ends, run.losses) if end > samples - window]
    diffs = [b - a for a, b in zip(run.losses, run.losses[1:])]
    step_sd = math.sqrt(sum(d * d for d in diffs) / len(diffs) / 2)
    return {
        "window_drop": round(run.initial_loss - run.window_loss(samples - window, samples), 5),
        "window_se": round(math.sqrt(se(initial) ** 2 + step_sd ** 2 / len(steps)), 5),
        "probe_drop": round(run.initial_loss - run.final_loss, 5),
        "probe_se": round(se([a - b for a, b in zip(initial, final)]), 5),
        "shuffled_gap": round(run.shuffled_loss - run.final_loss, 5),
        "shuffled_se": round(se([a - b for a, b in zip(shuffled, final)]), 5),
    }

if __name__ == "__main__":
    main()
