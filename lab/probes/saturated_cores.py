"""The truth benchmark's rows where the DataLoader's workers and the loop fill every core of a CPU host.

    AUTOTUNE_SYNTHETIC_IMAGENET_IMAGES=4096 python lab/probes/saturated_cores.py --seconds 30

On an H200 host, truth.py's 15-worker row (16 cores, non-persistent workers, prefetch 2) reads a few
percent below its hand loop more often than above (docs/measuring.md). Here the same regime on a CPU
host of 2 cores, no GPU needed: imagenet_resnet50's data (the synthetic JPEGs of about 500x375,
RandomResizedCrop(224), a flip, ToTensor, Normalize) fed to a model so small that the loop waits for
its loader, batch 32: as many workers as cores (fresh each epoch with 2 batches ahead, and
persistent with 4), then one fewer. Each row is truth.py's own (`truthbench.rows.compared`): autotune's
two trial-process measurements between three hand-timed slices, each in a fresh process.

This file is also the workload it measures (DEFAULTS and the build functions below): a trial process
loads it by path, as it loads any recipe.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
from torch import nn, optim
from torchvision import transforms

from autotune.config import Config
from autotune.workloads.imagenet import imagenet_folder

DEFAULTS = dict(batch_size=32, lr=0.1, epochs=1, shuffle=True, num_workers=2)


def build_dataset(root):
    augment = transforms.Compose([
        transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(), transforms.ToTensor(),
        transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    ])
    return imagenet_folder(root, transform=augment)


def build_model():
    # One strided convolution: about 20 ms a step of 32 on 2 cores, where a worker takes 130 ms or more to decode them.
    return nn.Sequential(nn.Conv2d(3, 16, 16, stride=16), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(16, 1000))


def build_loss():
    return nn.CrossEntropyLoss()


def build_optimizer(params, lr):
    return optim.SGD(params, lr=lr, momentum=0.9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30.0, help="how long each row's hand loop is timed")
    parser.add_argument("--match", default="", help="only the rows whose name holds this")
    parser.add_argument("--out", type=Path, default=Path("saturated_cores"))
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from truthbench.rows import compared  # truth.py's rows

    cores = len(os.sched_getaffinity(0))
    rows = {
        f"{cores} workers, prefetch 2, fresh each epoch": Config(32, num_workers=cores, prefetch_factor=2),
        f"{cores} workers, prefetch 4, persistent": Config(32, num_workers=cores, prefetch_factor=4,
                                                           persistent_workers=True),
        f"{max(1, cores - 1)} workers, prefetch 2": Config(32, num_workers=max(1, cores - 1), prefetch_factor=2),
    }
    options = argparse.Namespace(rounds=2, seconds=args.seconds, no_bracket=False, out=args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"saturated_cores on {cores} CPU cores, torch {torch.__version__}; hand-timed loops at least "
          f"{args.seconds:.0f} s a row", flush=True)
    results = []
    for name, config in rows.items():
        if args.match in name:
            results.append(compared(name, config, DEFAULTS["lr"], Path(__file__).resolve(), options,
                                    torch.device("cpu")))
            (args.out / "rows.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
