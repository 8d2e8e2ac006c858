"""What the hand loop's times say: its rate within epochs, what an epoch boundary costs beyond it, its slices joined.

autotune splits a measurement the same way, so a ratio off 1 shows which part it has wrong.
"""

from __future__ import annotations

import math
from typing import Any

TIMELINE_S = 5.0  # the hand loop's rate is also given per this many seconds


def epoch_parts(arrived: list[tuple[float, int, int]], samples: int, wall: float, per_epoch: int,
                capacity: int) -> dict[str, float | int | None]:
    """The hand loop split as autotune splits a measurement: its rate within epochs (from each epoch's second batch
    to `capacity` batches before its end, where the workers still have the epoch's work), and what each epoch
    boundary it crossed cost beyond that. Read where the loop received each batch: the device is not synchronised
    per step, so each time may run ahead of the device by the few steps its queue holds."""
    seconds, batches, within = 0.0, 0, 0
    for (t0, place0, _), (t1, place1, size) in zip(arrived, arrived[1:]):
        if place1 == place0 + 1 and 1 <= place0 and place1 < per_epoch - capacity:
            seconds, batches, within = seconds + t1 - t0, batches + 1, within + size
    boundaries = sum(place == 0 for _, place, _ in arrived)
    steady = within / seconds if batches >= 2 and seconds > 0 else None
    cost = _boundary_cost(wall, samples, steady, boundaries)
    # Samples/s in each TIMELINE_S of the loop: a rate that falls as the loop goes on (a host's cores leaving their
    # boost clock under sustained load) shows here, and would make any short measurement read high.
    # A last bin shorter than half of TIMELINE_S joins the one before it: a few batches over a fraction of a
    # second would read as a rate far off the loop's.
    bins = [0] * max(1, math.ceil(wall / TIMELINE_S - 0.5))
    for t, _, size in arrived:
        bins[min(int(t // TIMELINE_S), len(bins) - 1)] += size
    timeline = [round(n / (TIMELINE_S if i < len(bins) - 1 else wall - i * TIMELINE_S), 1)
                for i, n in enumerate(bins)]
    counted = steady is not None  # the parts within epochs, for `joined`
    return {"steady_samples_per_s": steady, "boundaries": boundaries, "boundary_s": cost, "timeline": timeline,
            "within_samples": within if counted else 0, "within_seconds": seconds if counted else 0.0}


def boundary_as_by_hand(result: dict[str, Any]) -> float | None:
    """What an epoch costs a trial beyond its steps at its rate within epochs, as `epoch_parts` reads a hand loop's.

    The trial's `epoch_overhead_s` is an epoch's start alone; its epoch also takes its last `capacity` batches
    (what the workers hold when the sampler runs out) at the step's speed, which a loader-bound loop passes
    faster than its steady rate. The hand loop's boundary is all of that at once: its epoch's time less its
    samples at the rate within epochs (`_boundary_cost`). None for whole-epoch windows, which have no rate
    within epochs. One difference stays: a trial's rate within epochs leaves out the steps from an epoch's
    start to its first steady window, the hand loop's only the epoch's first batch.
    """
    if result.get("whole_epochs") or not result.get("epoch_s") or not result.get("steady_samples_per_s"):
        return None
    return result["epoch_s"] * (1 - result["samples_per_s"] / result["steady_samples_per_s"])


def _boundary_cost(wall: float, samples: int, steady: float | None, boundaries: int) -> float | None:
    """What each epoch boundary cost beyond the rate within epochs; None where that cannot be told."""
    return (wall - samples / steady) / boundaries if steady is not None and boundaries else None


def joined(slices: list[dict[str, Any]]) -> dict[str, Any]:
    """Slices of a hand loop, timed between autotune's measurements, as one loop over all of their times."""
    samples, seconds = sum(h["samples"] for h in slices), sum(h["seconds"] for h in slices)
    within, within_s = sum(h["within_samples"] for h in slices), sum(h["within_seconds"] for h in slices)
    steady = within / within_s if within_s > 0 else None
    boundaries = sum(h["boundaries"] for h in slices)
    cost = _boundary_cost(seconds, samples, steady, boundaries)
    rates = [h["samples_per_s"] for h in slices]
    return {"samples_per_s": samples / seconds, "seconds": seconds, "samples": samples,
            "steady_samples_per_s": steady, "boundaries": boundaries, "boundary_s": cost,
            "timeline": [r for h in slices for r in h["timeline"]], "within_samples": within,
            "within_seconds": within_s, "slices": rates,
            "drift": max(rates) / min(rates) - 1 if len(rates) > 1 else None,
            "whole_epochs": all(h["epochs_worth"] is not None for h in slices),
            "workers_cpu_ms": [h["workers_cpu_ms"] for h in slices if h["workers_cpu_ms"] is not None],
            "main_cpu_ms": [h["main_cpu_ms"] for h in slices],
            # Each slice's wait for its first batch (a stream's shards opened, its buffer filled): before its
            # timed part, as a run pays it once; each new pass pays it again within, in its boundaries.
            "first_batch_s": [h["first_batch_s"] for h in slices if h.get("first_batch_s") is not None],
            # A stream's slices: whether each warmed up through its first pass's end (`loop.through_a_pass_end`)
            "warmed_through": [bool(h.get("warmed_through_a_pass_end")) for h in slices],
            # Whether each slice replayed its step in a CUDA graph (a config that asks for one, on a GPU)
            "graphed": [bool(h.get("graphed")) for h in slices]}


def hand_fields(hand: dict[str, Any]) -> dict[str, Any]:
    """A `joined` hand loop's numbers as a truth.json row keeps them."""
    return {"hand": hand["samples_per_s"], "hand_seconds": hand["seconds"],
            "hand_steady": hand["steady_samples_per_s"], "hand_boundaries": hand["boundaries"],
            "hand_boundary_s": hand["boundary_s"], "hand_timeline": hand["timeline"], "hand_slices": hand["slices"],
            "hand_whole_epochs": hand["whole_epochs"], "hand_workers_cpu_ms": hand["workers_cpu_ms"],
            "hand_main_cpu_ms": hand["main_cpu_ms"], "hand_first_batch_s": hand["first_batch_s"],
            "hand_warmed_through": hand["warmed_through"], "hand_graphed": hand["graphed"]}
