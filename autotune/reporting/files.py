"""The report as one file: Markdown that links the figures beside it, HTML that embeds them.

Both are built from the same blocks (headings, paragraphs, tables, figures), so
they say the same thing; the HTML is self-contained (figures as data URIs) and
can be mailed or opened anywhere, the Markdown renders where the repository is
browsed and keeps the PNGs as files to commit.
"""

from __future__ import annotations

import base64
import datetime
import html
from pathlib import Path
from typing import Any

from autotune.reporting.contents import StudyReport
from autotune.reporting.rounds import Rounds
from autotune.text import percent, rate

CAPTIONS = {
    "heatmap": (
        "Sensitivity map: batch_size x num_workers",
        "Each coloured cell holds the best samples/s among the complete trials with that batch size and worker count, "
        "over all other knobs (the colour bar); {on_device}. A dark grey cell marked pruned was tried: its trials ran "
        "and were stopped early as clearly slower than the best, none complete. A pink cell marked oom or failed had "
        "only failures. A white cell was not tried.",
    ),
    "history": (
        "Optimisation history",
        "Each trial's samples/s in the order the search ran them, the best so far, and the baseline.",
    ),
    "importance": (
        "Parameter importances",
        "PED-ANOVA over the complete trials: how much each knob's values among the fastest trials differ from the "
        "rest.",
    ),
}
# What placement=device means where the study ran: on a CPU there is no GPU to keep the data set on.
ON_DEVICE = {
    "gpu": "'on device' is the data set kept in the GPU's memory and sliced into batches there "
    "(placement=device, no DataLoader workers)",
    "cpu": "'on device' is the data set held in memory as one tensor and sliced into batches "
    "(placement=device, no DataLoader workers)",
}


def caption(kind: str, hardware: str) -> tuple[str, str]:
    """A figure's title and caption; the heat map's says what 'on device' means on `hardware` ("cpu" or a GPU)."""
    title, text = CAPTIONS[kind]
    return title, text.format(on_device=ON_DEVICE["cpu" if hardware == "cpu" else "gpu"])


def best_table(rep: StudyReport) -> tuple[list[str], list[list[str]]]:
    """The fastest trials beside the baseline's, as headers and rows (shared by the text, Markdown and HTML).

    No ratio: each trial is one measurement, in its own process; a speed-up is stated from the rounds only.
    """
    rows = []
    for label, row in [("baseline", rep.baseline)] + [(f"#{r.rank}", r) for r in rep.best]:
        if row is None:
            continue
        noise = f"±{row.spread:.1%}" if row.spread is not None else "-"
        lr = f"{row.lr:g}" if row.lr is not None else "-"
        rows.append([label, str(row.trial), rate(row.samples_per_s), noise, row.describe, lr, row.parity or "-"])
    return ["", "trial", "samples/s", "noise", "config", "lr", "parity"], rows


def winner_line(rounds: Rounds) -> str:
    """The winner's speed-up, in the tuned file's own numbers."""
    return (
        f"winner, measured again: {rounds.winner}: {rate(rounds.samples_per_s)}/s, {rounds.speedup:.2f}x the "
        f"baseline's {rate(rounds.baseline_samples_per_s)}/s (noise ±{rounds.spread:.1%}); medians of the rounds, "
        f"each config beside the baseline in fresh processes, as {rounds.tuned_file} states"
    )


def rounds_table(rounds: Rounds) -> tuple[list[str], list[list[str]]]:
    """Every config the rounds measured, the winner first, then the baseline, then the other finalists."""
    order = {"winner": 0, "baseline": 1, "finalist": 2}
    rows = [
        [
            f.role,
            f.config,
            str(f.rounds),
            rate(f.samples_per_s) if f.samples_per_s is not None else "failed",
            f"{f.vs_baseline:.2f}x" if f.vs_baseline is not None else "-",
        ]
        for f in sorted(rounds.finalists, key=lambda f: order[f.role])
    ]
    return ["", "config", "rounds", "samples/s", "vs baseline"], rows


def failure_table(rep: StudyReport) -> tuple[list[str], list[list[str]]]:
    rows = []
    for g in rep.failures:
        numbers = ", ".join(str(n) for n in g.trials[:12]) + (", ..." if len(g.trials) > 12 else "")
        rows.append(
            [
                g.state,
                g.reason,
                str(len(g.trials)),
                numbers,
                "; ".join(g.configs) + ("; ..." if len(g.trials) > len(g.configs) else ""),
            ]
        )
    return ["state", "reason", "n", "trials", "configs"], rows


def summary(rep: StudyReport) -> str:
    c = rep.counts
    unfinished = f", {c['unfinished']} unfinished" if c["unfinished"] else ""
    return (
        f"study {rep.study!r} in {rep.storage}: {c['complete']} complete, {c['pruned']} pruned, "
        f"{c['failed']} failed{unfinished}; values are each trial's samples/s as the search measured it once"
    )


def _blocks(rep: StudyReport, command: str) -> list[tuple[Any, ...]]:
    blocks: list[tuple[Any, ...]] = [("h1", f"autotune report: {rep.recipe} on {rep.hardware}"), ("p", summary(rep))]
    if rep.rounds is not None:
        blocks += [("h2", "The winner, measured again"), ("p", winner_line(rep.rounds)),
                   ("table", *rounds_table(rep.rounds))]
    headers, rows = best_table(rep)
    blocks += [
        ("h2", "Fastest trials beside the baseline's, each measured once"),
        ("table", headers, rows) if rows else ("p", "No trial completed."),
    ]
    for kind in ("heatmap", "history", "importance"):
        if kind in rep.figures:
            title, text = caption(kind, rep.hardware)
            blocks += [("h2", title), ("img", rep.figures[kind], title), ("p", text)]
            if kind == "importance" and rep.importances:
                blocks.append(("table", ["knob", "importance"], [[k, percent(v)] for k, v in rep.importances.items()]))
    if rep.failures:
        headers, rows = failure_table(rep)
        blocks += [("h2", "Failed and pruned trials, by reason"), ("table", headers, rows)]
    if rep.notes:
        blocks += [("h2", "Notes")] + [("p", n) for n in rep.notes]
    made = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    blocks.append(("p", f"Made by `{command}` on {made}."))
    return blocks


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def write_markdown(rep: StudyReport, command: str) -> Path:
    """The report as Markdown; figures are linked by file name, so keep them beside it."""
    out: list[str] = []
    for block in _blocks(rep, command):
        kind = block[0]
        if kind == "h1":
            out += [f"# {block[1]}", ""]
        elif kind == "h2":
            out += [f"## {block[1]}", ""]
        elif kind == "p":
            out += [block[1], ""]
        elif kind == "img":
            out += [f"![{block[2]}]({Path(block[1]).name})", ""]
        elif kind == "table":
            headers, rows = block[1], block[2]
            out.append("| " + " | ".join(_md_cell(h) for h in headers) + " |")
            out.append("|" + "|".join("---" for _ in headers) + "|")
            out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
            out.append("")
    rep.markdown.parent.mkdir(parents=True, exist_ok=True)
    rep.markdown.write_text("\n".join(out) + "\n")
    return rep.markdown


_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#222}"
    "table{border-collapse:collapse;margin:1em 0;font-size:14px}td,th{border:1px solid #ccc;padding:3px "
    "8px;text-align:left}"
    "th{background:#f4f4f4}img{max-width:100%;border:1px solid #eee}code{background:#f4f4f4;padding:0 3px}"
)


def write_html(rep: StudyReport, command: str) -> Path:
    """The report as one self-contained HTML file: figures embedded as base64 PNG data."""
    out = [
        "<!doctype html>",
        "<html><head><meta charset='utf-8'>",
        f"<title>{html.escape(rep.recipe)} report</title>",
        f"<style>{_STYLE}</style></head><body>",
    ]
    for block in _blocks(rep, command):
        kind = block[0]
        if kind in ("h1", "h2"):
            out.append(f"<{kind}>{html.escape(block[1])}</{kind}>")
        elif kind == "p":
            text = html.escape(block[1])
            parts = text.split("`")  # `command` spans become <code>
            out.append("<p>" + "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts)) + "</p>")
        elif kind == "img":
            data = base64.b64encode(Path(block[1]).read_bytes()).decode()
            out.append(f"<img alt='{html.escape(block[2])}' src='data:image/png;base64,{data}'>")
        elif kind == "table":
            headers, rows = block[1], block[2]
            out.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in headers) + "</tr>")
            out += ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows]
            out.append("</table>")
    out.append("</body></html>")
    rep.html.parent.mkdir(parents=True, exist_ok=True)
    rep.html.write_text("\n".join(out))
    return rep.html
