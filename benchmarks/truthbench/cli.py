"""The command line of `python benchmarks/truth.py`: the configs chosen, each row in turn, truth.json after each."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

from autotune.config import scaled_lr
from autotune.options import SearchOptions
from autotune.workloads import load, resolve
from autotune.workloads.settings import baseline_config

from .configs import chosen, config_sets, tuned
from .processes import in_a_fresh_process
from .report import header, print_hand_row, summary
from .rows import compared
from .timings import hand_fields, joined


def argument_parser(description: str) -> argparse.ArgumentParser:
    """truth.py's options; `description` is its docstring, which says what the benchmark measures and how."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="imagenet_resnet50")
    parser.add_argument("--configs", default="default",
                        help="default, sweep, wide, decode, hybrid, pixels, gpu_workers, or tuned "
                             "(the tuned file's profile, then the workload's own settings)")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the hand-written loop is timed")
    parser.add_argument("--only", type=int, help="the first N configs of the set only")
    parser.add_argument("--match", default="", help="only the configs whose name this regular expression finds")
    parser.add_argument("--out", type=Path, default=Path("truth"))
    parser.add_argument("--batch-size", type=int, default=256, help="of the default, sweep and decode sets")
    parser.add_argument("--device", default="cuda:0", help="cpu runs it end to end on a machine without a GPU")
    parser.add_argument("--rounds", type=int, default=SearchOptions.rounds,
                        help="autotune's measurements of each config, each in a fresh trial process, the median "
                             "stated, as a search states a finalist's (default: a search's own)")
    parser.add_argument("--no-bracket", action="store_true",
                        help="time the hand loop in one piece after autotune's measurements, not in slices between")
    parser.add_argument("--hand-only", action="store_true",
                        help="the hand-timed loops alone: a sweep that a winner is held against")
    return parser


def main(description: str) -> None:
    """Parse truth.py's command line, time each chosen config, print each row and write truth.json after each."""
    options = argument_parser(description)
    args = options.parse_args()
    if args.rounds < 1:
        options.error(f"--rounds must be at least 1 (autotune's measurements of each config), but got {args.rounds}")
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    hardware = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    cores = len(os.sched_getaffinity(0))
    ref = resolve(args.recipe)
    workload = load(ref)
    d = workload.defaults
    if args.configs == "tuned":
        configs = tuned(ref.tuned_path, hardware, baseline_config(workload, device.type == "cuda"))
    else:
        configs = config_sets(cores, args.batch_size)[args.configs]
    configs = chosen(configs, args.match, args.only)
    header(args.recipe, hardware, cores, args.seconds)
    rows = []
    for name, config in configs.items():
        lr = scaled_lr(float(d["lr"]), d["batch_size"], config.batch_size, "linear", workload.lr_max)
        if args.hand_only:
            hand = joined([in_a_fresh_process(ref.workload_path, config, lr, args.seconds, device)])
            rows.append({"config": name, "knobs": config.describe(), **hand_fields(hand)})
            print_hand_row(rows[-1])
        else:
            rows.append(compared(name, config, lr, ref.workload_path, args, device))
        # After each row: a run cut short by its time limit keeps the rows it finished.
        (args.out / "truth.json").write_text(json.dumps(rows, indent=1))
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if not args.hand_only:
        summary(rows)
