"""The report's PNG figures: the sensitivity heat map, the optimisation history, the importances.

Plain data in, a PNG of a fixed pixel size out (no Optuna here). Figures are
drawn on matplotlib's Agg canvas through ``matplotlib.figure.Figure``, never
pyplot, so no display and no global figure state are involved.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter, LogLocator
from matplotlib.transforms import blended_transform_factory

from autotune.text import short_rate

DPI = 100
SIZES = {"heatmap": (960, 640), "history": (960, 480), "importance": (800, 440)}  # pixels, width x height


def _figure(kind: str) -> Figure:
    width, height = SIZES[kind]
    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, format="png")  # no bbox_inches="tight": the size stays what SIZES says
    return path


# What a cell that holds no complete trial shows; the colour bar covers the rest.
PRUNED_COLOUR = "#8c8c8c"  # tried: trials ran there, and every one was stopped early as clearly slower
FAILED_COLOUR = "#f6d5db"  # tried: every trial there failed (its reason is written in the cell)
NOT_RUN_COLOUR = "#dcdcdc"  # proposed, not run: its predicted rate or the parity check ruled it out
NOT_TRIED_COLOUR = "#ffffff"
LEGEND = (
    (PRUNED_COLOUR, "pruned: ran, stopped early as clearly slower"),
    (FAILED_COLOUR, "oom / failed: every trial failed"),
    (NOT_RUN_COLOUR, "not run: ruled out by its predicted rate or by parity"),
    (NOT_TRIED_COLOUR, "not tried"),
)


def heatmap_figure(
    cells: Mapping[tuple[int, str], float],
    pruned: Collection[tuple[int, str]],
    failed: Mapping[tuple[int, str], str],
    columns: Sequence[str],
    title: str,
    not_run: Collection[tuple[int, str]] = (),
) -> Figure:
    """Samples/s over batch size (rows) x column (worker count, or "on device"); cells with no complete trial
    are told apart: pruned, failed, not run, not tried, each in its own colour, named in the legend.

    `cells` maps (batch_size, column) to the best samples/s seen there; `pruned` holds cells where trials ran
    but all were pruned; `failed` maps cells where trials only failed to a short reason ("oom"); `not_run` holds
    cells whose configs were only valued or judged, never run (a valued config was once drawn as "pruned").
    """
    rows = sorted({b for b, _ in cells} | {b for b, _ in pruned} | {b for b, _ in failed} | {b for b, _ in not_run})
    grid = np.full((len(rows), len(columns)), np.nan)
    for (b, c), value in cells.items():
        grid[rows.index(b), columns.index(c)] = value
    fig = _figure("heatmap")
    ax = fig.add_subplot()
    finite = grid[np.isfinite(grid)]
    vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (1.0, 2.0)
    vmax = max(vmax, vmin * 1.001)
    # Seed-like studies span 14k to 500k samples/s: a log scale keeps the slow half of the map readable.
    norm = LogNorm(vmin, vmax) if vmin > 0 and vmax / vmin > 10 else Normalize(vmin, vmax)
    image = ax.imshow(
        np.ma.masked_invalid(grid),
        cmap=colormaps["viridis"].with_extremes(bad=NOT_TRIED_COLOUR),
        norm=norm,
        aspect="auto",
        origin="lower",
    )
    for i, b in enumerate(rows):
        for j, c in enumerate(columns):
            value = grid[i, j]
            if math.isfinite(value):
                light = float(norm(value)) > 0.6  # viridis turns light at the top: dark text there
                ax.text(
                    j, i, short_rate(value), ha="center", va="center", fontsize=9, color="black" if light else "white"
                )
            elif (b, c) in pruned:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor=PRUNED_COLOUR, edgecolor="none"))
                ax.text(j, i, "pruned", ha="center", va="center", fontsize=8, color="white")
            elif (b, c) in failed:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor=FAILED_COLOUR, edgecolor="none"))
                ax.text(j, i, failed[(b, c)], ha="center", va="center", fontsize=8, color="#b00020")
            elif (b, c) in not_run:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor=NOT_RUN_COLOUR, edgecolor="none"))
                ax.text(j, i, "not run", ha="center", va="center", fontsize=8, color="#404040")
    # Thin cell borders, so a white (not tried) cell reads as a cell.
    ax.set_xticks(np.arange(len(columns) + 1) - 0.5, minor=True)
    ax.set_yticks(np.arange(len(rows) + 1) - 0.5, minor=True)
    ax.grid(which="minor", color="#cccccc", linewidth=0.6)
    ax.tick_params(which="minor", length=0)
    ax.set_xticks(range(len(columns)), labels=list(columns))
    ax.set_yticks(range(len(rows)), labels=[str(b) for b in rows])
    ax.set_xlabel("num_workers, or 'on device': the whole data set on the device (placement=device, no DataLoader)")
    ax.set_ylabel("batch_size")
    ax.set_title(title, fontsize=11)
    bar = fig.colorbar(image, ax=ax, label="samples/s, best complete trial in the cell")
    if isinstance(norm, LogNorm):
        bar.ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: short_rate(v)))
    bar.ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    fig.legend(
        handles=[Patch(facecolor=colour, edgecolor="#999999", label=label) for colour, label in LEGEND],
        loc="outside lower center",
        ncols=len(LEGEND),
        fontsize=8,
        frameon=False,
    )
    return fig


def heatmap(
    cells: Mapping[tuple[int, str], float],
    pruned: Collection[tuple[int, str]],
    failed: Mapping[tuple[int, str], str],
    columns: Sequence[str],
    title: str,
    path: Path,
    not_run: Collection[tuple[int, str]] = (),
) -> Path:
    """`heatmap_figure`, written to `path` as a PNG."""
    return _save(heatmap_figure(cells, pruned, failed, columns, title, not_run), path)


def history(
    complete: Sequence[tuple[int, float]],
    pruned: Sequence[tuple[int, float]],
    failed: Sequence[int],
    baseline: float | None,
    title: str,
    path: Path,
) -> Path:
    """Each trial's samples/s by trial number, the best so far, the baseline, and where trials failed."""
    fig = _figure("history")
    ax = fig.add_subplot()
    if complete:
        xs, ys = zip(*sorted(complete))
        ax.scatter(xs, ys, s=22, color="#1f77b4", label="complete", zorder=3)
        best = np.maximum.accumulate(np.array(ys))
        ax.step(xs, best, where="post", color="#d62728", label="best so far", zorder=2)
    if pruned:
        px, py = zip(*pruned)
        ax.scatter(px, py, s=22, facecolors="none", edgecolors="#7f7f7f", label="pruned (last window)", zorder=3)
    if baseline is not None:
        ax.axhline(baseline, color="#2ca02c", linestyle="--", label=f"baseline {short_rate(baseline)}/s")
    values = [v for _, v in complete] + [v for _, v in pruned]
    if values and min(values) > 0 and max(values) / min(values) > 20:
        ax.set_yscale("log")  # seed-like studies span 14k to 500k samples/s
    if failed:
        bottom = blended_transform_factory(ax.transData, ax.transAxes)
        ax.scatter(
            failed, [0.03] * len(failed), marker="x", color="#b00020", transform=bottom, label="failed", zorder=3
        )
    ax.set_xlabel("trial")
    ax.set_ylabel("samples/s")
    ax.set_title(title, fontsize=11)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return _save(fig, path)


def importances(values: Mapping[str, float], title: str, path: Path) -> Path:
    """Horizontal bars, the most important knob on top, each labelled with its share."""
    names = list(values)[::-1]
    shares = [values[n] for n in names]
    fig = _figure("importance")
    ax = fig.add_subplot()
    bars = ax.barh(names, shares, color="#1f77b4")
    ax.bar_label(bars, labels=[f"{s:.0%}" for s in shares], padding=3, fontsize=9)
    ax.set_xlim(0, max(shares + [0.01]) * 1.15)
    ax.set_xlabel("importance for reaching the fastest trials (PED-ANOVA, shares sum to 1)")
    ax.set_title(title, fontsize=11)
    return _save(fig, path)
