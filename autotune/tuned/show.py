"""`autotune show`: a tuned file as a table a person reads at a glance."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.knobs import KNOBS

_ROWS: tuple[tuple[str, str], ...] = (
    ("samples_per_s", "samples/s"),
    ("steady_samples_per_s", "steady samples/s"),
    ("baseline_samples_per_s", "baseline samples/s"),
    ("speedup", "speed-up"),
    ("tokens_per_s", "tokens/s"),
    ("baseline_tokens_per_s", "baseline tokens/s"),
    ("padding", "padding"),
    ("spread", "noise"),
    ("run_s", "declared run, s"),
    ("baseline_run_s", "baseline run, s"),
    ("run_epochs", "declared run, epochs"),
    ("first_batch_s", "first batch, s"),
    ("lr", "learning rate"),
    ("lr_rule", "lr rule"),
    ("cpu_share", "CPU cores"),
    ("search_s", "search, s"),
)

_ONLY_WHEN_PRESENT = ("tokens_per_s", "baseline_tokens_per_s", "padding", "first_batch_s")


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    if key == "pad_multiple" and value == 0:
        return "off"
    if key in ("samples_per_s", "steady_samples_per_s", "baseline_samples_per_s", "tokens_per_s",
               "baseline_tokens_per_s"):
        return f"{value:,.0f}"
    if key == "speedup":
        return f"{value:.2f}x"
    if key == "padding":
        return f"{value:.0%}"
    if key == "spread":
        return f"±{value:.1%}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


DECLARED_RUN = ("run_s", "baseline_run_s", "run_epochs")  # absent from a stream's profile whose pass is unknown


def _run_cell(key: str, profile: dict[str, Any]) -> str:
    """`key`'s cell; a stream's declared run (it has a first batch) without a declared pass is "unknown"."""
    if key in DECLARED_RUN and key not in profile and "first_batch_s" in profile:
        return "unknown"
    return _cell(key, profile.get(key))


def _steady_choice(choice: dict[str, Any] | None) -> str:
    """The config steady samples/s alone would have picked, and the declared run it would have taken; "-": the same."""
    if not choice:
        return "-"
    return (
        f"{choice['config']}: {choice['samples_per_s']:,.0f}/s, but a {choice['run_s']:.4g} s run "
        f"({choice['setup_s']:.4g} s one-time)"
    )


def _parity_rows(profiles: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """The parity check's numbers (autotune.parity.verdict): the decision, the deviations, the losses, the cost."""
    cells: dict[str, list[str]] = {
        "parity": [],
        "parity deviation/probe": [],
        "parity loss (baseline)": [],
        "parity inputs (host)": [],  # decode = gpu: how far its images are from the host's (two host draws)
        "parity numerics": [],  # amp and compile, judged with no run: its gradients' error over the batch's noise
        "parity check, s": [],
    }
    for p in profiles:
        check = p.get("parity") or {}
        if not check.get("checked"):
            values = ["not checked" if check else "-"] + ["-"] * (len(cells) - 1)
        else:
            inconclusive = ", inconclusive: same math as the baseline" if check.get("conclusive") is False else ""
            values = [
                f"{'passed' if check['passed'] else 'REJECTED'} ({check['family']}, ±{check['tolerance']:.0%})"
                f"{inconclusive}",
                f"{check['deviation']:+.1%} / {check['probe_deviation']:+.1%}" if "probe_deviation" in check else "-",
                f"{check['loss']:.4g} ({check['baseline_loss']:.4g}) at {check['samples']:,}"
                if "loss" in check
                else "-",
                _runless(check, "inputs"),
                _runless(check, "numerics"),
                f"{check['check_s']:.1f} ({check['configs_checked']} checked, {check['configs_rejected']} rejected)",
            ]
        for key, value in zip(cells, values):
            cells[key].append(value)
    return list(cells.items())


# The checks that need no training run (autotune.parity.inputs, autotune.parity.numerics): the record's
# key for the outcome, the key of its number, the words for pass and fail, and what the cell shows of the numbers.
RUNLESS: dict[str, tuple[str, str, tuple[str, str], Callable[[dict[str, Any]], str]]] = {
    "inputs": ("inputs_passed", "inputs_distance", ("match", "DIFFER"),
               lambda c: f"{c['inputs_distance']:.2f} apart ({c['inputs_host_distance']:.2f})"),
    "numerics": ("numerics_passed", "numerics_ratio", ("within", "BEYOND"),
                 lambda c: f"error {c['numerics_ratio']:.3g}x the batch noise"),
}


def _runless(check: dict[str, Any], what: str) -> str:
    passed, number, words, shown = RUNLESS[what]
    if passed not in check:
        return "-"
    if number not in check:
        return f"not shown: the {what} check failed to run"
    return f"{words[0] if check[passed] else words[1]}: {shown(check)}"


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
        if key in _ONLY_WHEN_PRESENT and not any(key in p for p in profiles.values()):
            continue  # a workload that counts no tokens gets no token rows
        rows.append((label, [_run_cell(key, p) for p in profiles.values()]))
    rows.append(("samples/s alone picks", [_steady_choice(p.get("steady_choice")) for p in profiles.values()]))
    rows += _parity_rows(list(profiles.values()))
    rows.append(
        (
            "trials ok/failed/pruned",
            [
                f"{p.get('trials_complete', 0)}/{p.get('trials_failed', 0)}/{p.get('trials_pruned', 0)}"
                + (f" (and {p['trials_interrupted']} interrupted)" if p.get("trials_interrupted") else "")
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
        if p.get("lr_reason") and "lr" in p:
            lines.append(f"{name}: lr {_cell('lr', p['lr'])} ({p.get('lr_rule', '?')}): {p['lr_reason']}")
        if p.get("command"):
            lines.append(f"{name}: made by `{p['command']}` on {p.get('created', '?')}")
    lines.append("batch_size is per process: N processes (torchrun) train on N x batch_size per step, at the rate "
                 "load_tuned(recipe, world_size=N).lr gives by the lr rule (docs/integrations.md).")
    return "\n".join(line.rstrip() for line in lines)
