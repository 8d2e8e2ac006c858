"""One row of the truth benchmark: autotune's rounds of a config, interleaved with slices of its hand-timed loop.

Why slices in fresh processes, interleaved: one config's rate can move between processes started a minute apart
(``lab/probes/heritage.py``), so a single process on either side is one draw of the host's state, not the config's rate.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from autotune.config import Config

from .loop import LONGEST
from .processes import by_autotune, in_a_fresh_process
from .report import print_row
from .timings import boundary_as_by_hand, hand_fields, joined


def slice_limit(before: list[dict[str, Any]], longest: float) -> float:
    """How long a row's next hand slice may run to reach whole epochs' worth (`by_hand`'s `longest`).

    The first slice: up to LONGEST times the row's seconds (`longest`), not its own share's. Each slice
    starts after the same warm-up, so at the same place of its epoch: where an epoch's worth takes about
    the row's seconds, slices cut at 3x their share would each cross a boundary there, or none. The
    others do as the first did, however long that takes them (or not at all): decided slice by slice,
    a fast process would run on and a slow one stop on the clock, and joined by time the fast ones
    would weigh the most.
    """
    if not before:
        return longest
    return math.inf if before[0]["epochs_worth"] is not None else 0.0


def compared(name: str, config: Config, lr: float, workload_path: Path, args: argparse.Namespace,
             device: torch.device) -> dict[str, Any]:
    """One row: autotune's `args.rounds` measurements, interleaved with the hand loop's slices; printed, returned."""
    cores, logs = len(os.sched_getaffinity(0)), args.out.resolve() / "logs"
    slices = 1 if args.no_bracket else args.rounds + 1
    share, longest = args.seconds / slices, LONGEST * args.seconds
    hands: list[dict[str, Any]] = []

    began = time.monotonic()

    def said(what: str) -> None:  # each measurement as it ends, to stderr: a row cut short still shows what it had
        print(f"  {name}: {what} ({time.monotonic() - began:.0f} s into the row)", file=sys.stderr, flush=True)

    def hand_slice() -> None:
        hands.append(in_a_fresh_process(workload_path, config, lr, share, device, slice_limit(hands, longest)))
        said(f"hand slice {len(hands)}: {hands[-1]['samples_per_s']:,.0f}/s over {hands[-1]['seconds']:.0f} s")

    if not args.no_bracket:
        hand_slice()
    rounds = []
    for _ in range(args.rounds):
        rounds.append(by_autotune(workload_path, config, lr, cores, logs, device))
        said(f"autotune round {len(rounds)}: {rounds[-1]['samples_per_s']:,.0f}/s")
        if not args.no_bracket or len(rounds) == args.rounds:
            hand_slice()
    hand = joined(hands)
    rates = [r["samples_per_s"] for r in rounds]
    ours = statistics.median(rates)  # what a search states of a finalist: the median over its rounds
    steady = statistics.median(r["steady_samples_per_s"] for r in rounds)
    overhead = statistics.median(r.get("epoch_overhead_s") or 0.0 for r in rounds)
    costs = [c for c in (boundary_as_by_hand(r) for r in rounds) if c is not None]
    boundary = statistics.median(costs) if costs else None
    ratio = ours / hand["samples_per_s"]
    unreliable = sum(not r.get("reliable", True) for r in rounds)
    # Backlog growth autotune's windows left out (every batch was ready): credited, would a round read as the hand loop?
    uncredited = [r.get("uncredited_share", 0.0) for r in rounds]
    row = {"config": name, "knobs": config.describe(), "autotune": ours, "autotune_rounds": rates,
           "autotune_steady": steady, "autotune_spreads": [r["spread"] for r in rounds],
           "autotune_epoch_overhead_s": overhead, "autotune_boundary_s": boundary,
           "backlog_steps": [r.get("backlog_steps") for r in rounds],
           "autotune_windows": [r.get("window_rates") for r in rounds], "autotune_unreliable": unreliable,
           "autotune_uncredited": uncredited, "autotune_main_cpu_ms": [r.get("main_cpu_ms") for r in rounds],
           "autotune_workers_cpu_ms": [r.get("workers_cpu_ms") for r in rounds],
           "autotune_first_batch_s": [r.get("first_batch_s") for r in rounds],  # a stream's; None for a data set
           # a stream's: its short batches' one-off work at the pass end it crossed, left out of its boundary
           "autotune_short_once_s": [r.get("short_batches_once_s") for r in rounds],
           **hand_fields(hand), "ratio": ratio, "host_drift": hand["drift"]}
    print_row(row, config)
    return row
