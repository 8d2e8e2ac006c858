"""What the truth benchmark prints: a header, each row as it ends (from its truth.json row), and the count at the end.

Every number printed is from the same run; a ratio off 1 comes with what splits it (within epochs, at a boundary,
per 5 s, CPU a sample), so the line shows which part autotune has wrong.
"""

from __future__ import annotations

from typing import Any

import torch

from autotune.config import Config

from .timings import TIMELINE_S

TOLERANCE = 0.07  # autotune's number within this of the hand-timed one


def header(recipe: str, hardware: str, cores: int, seconds: float) -> None:
    """What ran where: the recipe, the hardware, the cores and torch, and how long each hand loop is timed."""
    print(f"{recipe} on {hardware}, {cores} CPU cores, torch {torch.__version__}; "
          f"hand-timed loops at least {seconds:.0f} s a config", flush=True)


def print_row(row: dict[str, Any], config: Config) -> None:
    """A `rows.compared` row, in the four lines under its name."""
    name, ours, ratio = row["config"], row["autotune"], row["ratio"]
    unreliable = row["autotune_unreliable"]
    # Slices that disagree: the host moved, and a ratio off 1 may be the host's, not the measurement's.
    drifted = row["host_drift"] is not None and row["host_drift"] > TOLERANCE
    noise = ", ".join(f"±{spread:.1%}" for spread in row["autotune_spreads"])
    print(f"  {name:<46} autotune {ours:>8,.0f}/s (rounds {', '.join(f'{r:,.0f}' for r in row['autotune_rounds'])}; "
          f"noise {noise}{f'; {unreliable} unreliable' if unreliable else ''})  "
          f"by hand {row['hand']:>8,.0f}/s over {row['hand_seconds']:.0f} s{_span(row['hand_whole_epochs'])}  "
          f"ratio {ratio:.3f}{'' if abs(ratio - 1) <= TOLERANCE else '  OUTSIDE ±7%'}"
          f"{'  HOST MOVED: hand slices ' + ', '.join(f'{r:,.0f}/s' for r in row['hand_slices']) if drifted else ''}"
          f"{_graph(config, row.get('hand_graphed'))}", flush=True)
    print(f"  {'':<46} within epochs: autotune {row['autotune_steady']:,.0f}/s, by hand {rate(row['hand_steady'])}; "
          f"an epoch boundary (its start and its last batches): autotune {_seconds(row['autotune_boundary_s'])} "
          f"(its start alone {row['autotune_epoch_overhead_s']:.2f} s), by hand {_seconds(row['hand_boundary_s'])} "
          f"({row['hand_boundaries']} crossed); by hand per {TIMELINE_S:.0f} s: "
          f"{', '.join(f'{r:,.0f}' for r in row['hand_timeline'])}; autotune's windows: "
          + "; ".join(", ".join(f"{w:,.0f}" for w in windows or ()) for windows in row["autotune_windows"]),
          flush=True)
    workers = ", ".join(f"{c:.2f}" for c in row["hand_workers_cpu_ms"]) if config.num_workers else ""
    # The same in autotune's rounds: where a row's rates differ, did the host's cost of a sample differ with them?
    ours_workers = _cpu(row["autotune_workers_cpu_ms"]) if config.num_workers else ""
    main = ", ".join(f"{c:.2f}" for c in row["hand_main_cpu_ms"])
    print(f"  {'':<46} CPU a sample in the hand slices: the loop's process "
          f"{main} ms{f'; its workers {workers} ms' if workers else ''}"
          f"; in autotune's windows: the loop's process {_cpu(row['autotune_main_cpu_ms'])} ms"
          f"{f'; its workers {ours_workers} ms' if ours_workers else ''}", flush=True)
    print(f"  {'':<46} backlog growth autotune's windows left out: "
          f"{', '.join(f'{u:.1%}' for u in row['autotune_uncredited'])} of their samples", flush=True)
    if any(s is not None for s in row.get("autotune_first_batch_s", ())):  # a stream: its start, apart
        print(f"  {'':<46} the first batch (a stream's shards opened, its buffer filled; not in the steady rate): "
              f"autotune {_each_s(row['autotune_first_batch_s'])} s, by hand {_each_s(row['hand_first_batch_s'])} s"
              f"{_warmed(row.get('hand_warmed_through'))}; autotune's short batches' one-off work at its pass end, "
              f"left out: {_each_s(row.get('autotune_short_once_s') or [])} s", flush=True)


def print_hand_row(row: dict[str, Any]) -> None:
    """A `--hand-only` row: the hand loop alone."""
    first = row.get("hand_first_batch_s") or []
    print(f"  {row['config']:<46} by hand {row['hand']:>8,.0f}/s over {row['hand_seconds']:.0f} s"
          f"{_span(row['hand_whole_epochs'])} (within epochs {rate(row['hand_steady'])}, an epoch boundary "
          f"{_seconds(row['hand_boundary_s'])}, the first batch {_each_s(first)} s"
          f"{_warmed(row.get('hand_warmed_through'))}; per {TIMELINE_S:.0f} s: "
          f"{', '.join(f'{r:,.0f}' for r in row['hand_timeline'])})"
          f"{'  (its step replayed in a CUDA graph)' if all(row.get('hand_graphed') or [False]) else ''}", flush=True)


def summary(rows: list[dict[str, Any]]) -> None:
    """How many rows autotune's number is within TOLERANCE of the hand loop's, and on how many the host moved."""
    inside = sum(abs(r["ratio"] - 1) <= TOLERANCE for r in rows)
    drifted = sum(abs(r["host_drift"] or 0) > TOLERANCE for r in rows)
    print(f"{inside} of {len(rows)} configs within ±{TOLERANCE:.0%} of the hand-timed rate"
          f"{f'; on {drifted}, the hand loop itself moved by more than that between its slices' if drifted else ''}")


def rate(value: float | None) -> str:
    """Samples a second, "-" where the loop had no rate to give (no steady part within its epochs)."""
    return "-" if value is None else f"{value:,.0f}/s"


def _span(whole_epochs: bool) -> str:
    """What a hand loop's time spans: whole epochs' worth of batches, or not (see `loop.more_batches`)."""
    return " (whole epochs' worth)" if whole_epochs else " (not whole epochs)"


def _cpu(values: list[float | None]) -> str:
    """Each round's CPU milliseconds a sample (`Measurement.main_cpu_ms` or `workers_cpu_ms`), "-" where unread."""
    return ", ".join("-" if value is None else f"{value:.2f}" for value in values)


def _each_s(values: list[float | None]) -> str:
    """Seconds, one per round or slice, "-" where unread."""
    return ", ".join("-" if value is None else f"{value:.2f}" for value in values) or "-"


def _warmed(slices: list[bool] | None) -> str:
    """Whether a stream's hand slices were timed after their first pass's end (`loop.through_a_pass_end`)."""
    if not slices:
        return ""
    if all(slices):
        return "; each slice timed after its first pass end"
    return f"; timed after the first pass end in {sum(slices)} of {len(slices)} slices (the rest: it came too late)"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _graph(config: Config, graphed: list[bool] | None) -> str:
    """Where a config asks for a CUDA graph: whether the hand loop's slices replayed one (on a GPU, batches of one
    signature) or ran it eager (on a CPU; a workload that computes its own loss)."""
    if not config.cuda_graph:
        return ""
    if graphed and all(graphed):
        return "  (the hand loop replays its step in a CUDA graph)"
    return "  (the hand loop runs it eager, not in a CUDA graph)"
