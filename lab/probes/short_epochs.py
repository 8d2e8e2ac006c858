"""autotune's measurement in short epochs, where it times windows in later epochs, against the truth.

    python lab/probes/short_epochs.py fake [--json OUT]   # 1,680 configs on a fake clock, in seconds
    python lab/probes/short_epochs.py real --runs 2       # real DataLoaders whose workers sleep

`fake` measures a fake-clock DataLoader that hands out its tasks as torch's does (the test suite's `_InTurn`:
workers given `prefetch` tasks each, in turn, 1 s a batch of 32, an epoch's workers starting in 2 s) over
workers 2-12, prefetch 1-4, 14-100 batches an epoch, a step of 0.02-0.3 s and windows of 0.2-1.0 s. The truth
is exact there: a hand loop over 30 epochs on the same clock (end to end), and the lesser of the workers' and
the step's rate (within epochs). It prints how many configs are more than 5% off either way, how many of
those the measurement calls reliable, and how many it marks unreliable.

`real` measures DataLoaders of 4 workers that sleep 4 ms a sample (batch 16, 1 ms a step), 40-60 batches an
epoch, 1 or 2 batches ahead: sleeping, not computing, so the host's load moves them little. Each is held
against plain loops timed by hand (`--seconds`, 10 by default): within each epoch past twice the backlog and
before its last capacity batches for the rate within epochs, over whole epochs for the rate end to end.

Short epochs are where a measurement goes on into later epochs, each started outside the clock: the branch
whose first window is still open (docs/measuring.md). Any change to it is held against both.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests' fake loader, as the tests read it
from autotune.trial.timing import Windows, measure  # noqa: E402
from tests.trial.test_timing import Clock, SleepySamples, _by_hand_over_epochs, _InTurn, _step  # noqa: E402

WORKERS, PREFETCH, STEPS = (2, 4, 6, 8, 12), (1, 2, 3, 4), (14, 20, 24, 32, 40, 64, 100)
STEP_S, WINDOW_S = (0.02, 0.1, 0.2, 0.3), (0.2, 0.6, 1.0)
OFF = 0.05


def _by_hand(workers: int, prefetch: int, steps: int, step_s: float, epochs: int = 30) -> float:
    """Samples/s of a plain loop over `epochs` whole epochs, after one, on the fake clock."""
    clock = Clock()
    loader, step = _InTurn(clock, steps=steps, workers=workers, prefetch=prefetch), _step(clock, step_s)
    for batch in loader:
        step(batch)
    start = clock.now
    for _ in range(epochs):
        for batch in loader:
            step(batch)
    return epochs * steps * 32 / (clock.now - start)


def fake() -> dict[str, dict[str, Any]]:
    rows = {}
    for workers, prefetch, steps, step_s, window_s in itertools.product(WORKERS, PREFETCH, STEPS, STEP_S, WINDOW_S):
        clock = Clock()
        m = measure(_step(clock, step_s), _InTurn(clock, steps=steps, workers=workers, prefetch=prefetch),
                    Windows(window_s=window_s), clock=clock)
        within = 32 * min(workers, 1 / step_s)  # a worker makes a batch a second; the step takes step_s
        rows[f"workers={workers} prefetch={prefetch} steps={steps} step_s={step_s} window_s={window_s}"] = {
            "end_to_end": m.samples_per_s / _by_hand(workers, prefetch, steps, step_s) - 1,
            # Whole epochs, each timed from its start, state no rate within epochs apart from the end-to-end one.
            "steady": None if m.whole_epochs else m.steady_samples_per_s / within - 1,
            "reliable": m.reliable, "windows": [round(r) for r in m.window_rates]}
    return rows


def summary(rows: dict[str, dict[str, Any]]) -> str:
    e2e = [r for r in rows.values() if abs(r["end_to_end"]) > OFF]
    steady = [r for r in rows.values() if r["steady"] is not None and abs(r["steady"]) > OFF]
    high = sum(r["end_to_end"] > 0 and r["reliable"] for r in e2e)
    mean = sum(abs(r["end_to_end"]) for r in rows.values()) / len(rows)
    return (f"{len(rows)} configs: end to end more than {OFF:.0%} off {len(e2e)} "
            f"({sum(r['reliable'] for r in e2e)} called reliable, {high} of those high); "
            f"within epochs {len(steady)} ({sum(r['reliable'] for r in steady)} called reliable); "
            f"unreliable {sum(not r['reliable'] for r in rows.values())}; mean |end-to-end error| {mean:.4f}")


def _within_epochs_by_hand(loader: torch.utils.data.DataLoader, step: Any, seconds: float) -> float:
    """Samples/s of a plain loop within epochs: in each, timed from its 2 x capacity-th batch (past the backlog its
    workers made while starting) to where its last capacity batches begin (the drain at its end), for `seconds`."""
    capacity = loader.num_workers * loader.prefetch_factor
    first, last = 2 * capacity, len(loader) - capacity
    samples, spent = 0, 0.0
    while spent < seconds:
        for i, (x, y) in enumerate(loader):
            if i == first:
                start = time.perf_counter()
            step((x, y))
            if first < i <= last:
                samples += len(x)
            if i == last:
                spent += time.perf_counter() - start
    return samples / spent


def real(runs: int, seconds: float) -> None:
    def step(batch: Any) -> None:
        time.sleep(0.001)

    for prefetch, persistent, steps in ((1, True, 60), (1, True, 40), (2, True, 60), (1, False, 60)):
        def loader() -> torch.utils.data.DataLoader:
            return torch.utils.data.DataLoader(SleepySamples(16 * steps, sample_s=0.004), batch_size=16,
                                               num_workers=4, prefetch_factor=prefetch, persistent_workers=persistent)

        for _ in range(runs):
            m = measure(step, loader(), Windows(window_s=0.5))
            # The truth beside it: plain loops, one within epochs past each one's backlog and before its drain, one
            # over whole epochs, start-ups included (end to end), each for `seconds`.
            steady, e2e = _within_epochs_by_hand(loader(), step, seconds), _by_hand_over_epochs(loader(), step, seconds)
            print(f"prefetch {prefetch}, {'persistent' if persistent else 'fresh workers each epoch'}, "
                  f"{steps} batches an epoch: end to end {m.samples_per_s:,.0f}/s, by hand {e2e:,.0f}/s "
                  f"({m.samples_per_s / e2e:.3f}); within epochs {m.steady_samples_per_s:,.0f}/s, by hand "
                  f"{steady:,.0f}/s ({m.steady_samples_per_s / steady:.3f}){'' if m.reliable else ', unreliable'}",
                  flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["fake", "real"])
    parser.add_argument("--json", type=Path, help="fake: every config's errors and windows, to this file")
    parser.add_argument("--runs", type=int, default=2, help="real: measurements of each loader")
    parser.add_argument("--seconds", type=float, default=10.0, help="real: how long each hand loop is timed")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    if args.mode == "fake":
        rows = fake()
        print(summary(rows))
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
    else:
        real(args.runs, args.seconds)


if __name__ == "__main__":
    main()
