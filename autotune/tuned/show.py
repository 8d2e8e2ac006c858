"""`autotune show`: a tuned file as a table a person reads at a glance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.study.space import KNOBS

_ROWS: tuple[tuple[str, str], ...] = (
    ("samples_per_s", "samples/s"),
    ("steady_samples_per_s", "steady samples/s"),
    ("baseline_samples_per_s", "baseline samples/s"),
    ("speedup", "speed-up"),
    ("spread", "noise"),
    ("run_s", "declared run, s"),
    ("baseline_run_s", "baseline run, s"),
    ("lr", "learning rate"),
    ("lr_rule", "lr rule"),
    ("cpu_share", "CPU cores"),
    ("search_s", "search, s"),
)


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    if key in ("samples_per_s", "steady_samples_per_s", "baseline_samples_per_s"):
        return f"{value:,.0f}"
    if key == "speedup":
        return f"{value:.2f}x"
    if key == "spread":
        return f"±{value:.1%}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _parity_rows(profiles: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """The parity check's numbers (autotune.study.parity): the decision, the deviations, the losses, the cost."""
    cells: dict[str, list[str]] = {
        "parity": [],
        "parity deviation/probe": [],
        "parity loss (baseline)": [],
        "parity check, s": [],
    }
    for p in profiles:
        check = p.get("parity") or {}
        if not check.get("checked"):
            values = ["not checked" if check else "-", "-", "-", "-"]
        else:
            values = [
                f"{'passed' if check['passed'] else 'REJECTED'} ({check['family']}, ±{check['tolerance']:.0%})",
                f"{check['deviation']:+.1%} / {check['probe_deviation']:+.1%}" if "probe_deviation" in check else "-",
                f"{check['loss']:.4g} ({check['baseline_loss']:.4g}) at {check['samples']:,}"
                if "loss" in check
                else "-",
                f"{check['check_s']:.1f} ({check['configs_checked']} checked, {check['configs_rejected']} rejected)",
            ]
        for key, value in zip(cells, values):
            cells[key].append(value)
    return list(cells.items())


def render(data: dict[str, Any], path: Path) -> str:
    """Rows are knobs and numbers, one column per hardware profile."""
    profiles = data.get("profiles", {})
    if not profiles:
        return f"{path}: no profiles yet"
    names = list(profiles)
    rows: list[tuple[str, list[str]]] = []
    for knob in KNOBS:
        rows.append(
            (
                knob,
                [
                    _cell(knob, p["knobs"].get(knob)) if knob not in p.get("excluded", {}) else "n/a"
                    for p in profiles.values()
                ],
            )
        )
    for key, label in _ROWS:
        rows.append((label, [_cell(key, p.get(key)) for p in profiles.values()]))
    rows += _parity_rows(list(profiles.values()))
    rows.append(
        (
            "trials ok/failed/pruned",
            [
                f"{p.get('trials_complete', 0)}/{p.get('trials_failed', 0)}/{p.get('trials_pruned', 0)}"
                for p in profiles.values()
            ],
        )
    )
    rows.append(
        (
            "versions",
            [
                " ".join(f"{k} {v}" for k, v in p.get("versions", {}).items() if k != "python")
                for p in profiles.values()
            ],
        )
    )
    label_w = max(len(r[0]) for r in rows)
    widths = [max(len(n), *(len(r[1][i]) for r in rows)) for i, n in enumerate(names)]
    lines = [f"{path} (schema {data.get('schema')}, recipe {data.get('recipe')!r})"]
    lines.append(" " * label_w + "  " + "  ".join(n.ljust(w) for n, w in zip(names, widths)))
    lines.append("-" * label_w + "  " + "  ".join("-" * w for w in widths))
    for label, cells in rows:
        lines.append(label.ljust(label_w) + "  " + "  ".join(c.ljust(w) for c, w in zip(cells, widths)))
    for name, p in profiles.items():
        if p.get("command"):
            lines.append(f"{name}: made by `{p['command']}` on {p.get('created', '?')}")
    return "\n".join(line.rstrip() for line in lines)
