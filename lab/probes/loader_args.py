"""The options of the loader probe heritage.py (once shared with probes now retired): one config of a workload.

The probes run as scripts, so this folder is on their import path.
"""

from __future__ import annotations

import argparse

from autotune.config import Config


def parser(description: str | None, workers: int, prefetch: int) -> argparse.ArgumentParser:
    """A parser with the recipe, the loader's knobs, bf16 and the device; a probe adds its own options."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="imagenet_resnet50")
    parser.add_argument("--workers", type=int, default=workers)
    parser.add_argument("--prefetch", type=int, default=prefetch)
    parser.add_argument("--persistent", action="store_true")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast and channels_last")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--device", default="cuda:0")
    return parser


def config(args: argparse.Namespace) -> Config:
    """The config the options name: pinned, cudnn.benchmark on, as the truth benchmark's streaming rows are."""
    fast = dict(channels_last=True, amp="bf16") if args.bf16 else {}
    return Config(args.batch_size, num_workers=args.workers, prefetch_factor=args.prefetch, pin_memory=True,
                  persistent_workers=args.persistent, cudnn_benchmark=True, **fast)
