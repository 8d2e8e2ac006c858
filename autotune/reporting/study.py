"""`autotune report`: parameter sensitivity from the study in storage, as tables, figures and one file.

Reads a study `autotune search` wrote (trials carry their full config, learning
rate, role and failure reason as user attributes) and writes, next to the recipe
or under ``out``: a heat map of samples/s over batch_size x num_workers (a
sensitivity map), the optimisation history, the parameter importances,
and a Markdown report that links them beside an HTML report that embeds them.

This module finds the study, draws the figures and puts the report together;
the rows of its tables come from ``autotune.reporting.trials``, the winner's
numbers from ``autotune.reporting.rounds``.

    autotune report --recipe mnist_cnn
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import AutotuneError
from autotune.reporting.contents import StudyReport
from autotune.reporting.files import (
    best_table,
    failure_table,
    rounds_table,
    summary,
    winner_line,
    write_html,
    write_markdown,
)
from autotune.reporting.rounds import read_rounds
from autotune.reporting.trials import (
    failure_groups,
    fastest,
    param_importances,
    parity_verdicts,
    row_of,
)
from autotune.study.shared.sharing import SharingError
from autotune.study.shared.storage import open_storage, redact
from autotune.text import bar, percent, table
from autotune.tuned import file as tuned_file
from autotune.workloads import resolve


class ReportError(AutotuneError, RuntimeError):
    """A report that cannot be made; the message says why and what to do."""


# -- finding and reading the study -------------------------------------------------------------


def _pick_study(storage: optuna.storages.BaseStorage, recipe: str, wanted: str | None, where: str,
                tuned_path: Path | None = None) -> tuple[str, str]:
    """The study to read, and why it when the recipe has several: the one the tuned file's profiles name.

    A changed workload gets a study beside the old one (``RECIPE@HARDWARE~DIGEST``), so a storage often holds several
    for one recipe; the tuned file says which one its profile came from.
    """
    studies = storage.get_all_studies()
    names = [s.study_name for s in studies]
    listed = ", ".join(repr(n) for n in names) or "none"
    if wanted is not None:
        if wanted not in names:
            raise ReportError(f"there is no study {wanted!r} in {where}; studies there: {listed}.")
        return wanted, ""
    mine = [
        s.study_name for s in studies if s.user_attrs.get("recipe") == recipe or s.study_name.startswith(f"{recipe}@")
    ]
    if not mine:
        raise ReportError(
            f"there is no study for recipe {recipe!r} in {where}; studies there: {listed}. Pass --study NAME."
        )
    if len(mine) == 1:
        return mine[0], ""
    named = [n for n in mine if n in _studies_named_by(tuned_path)]
    if len(named) == 1:
        others = ", ".join(repr(n) for n in mine if n != named[0])
        return named[0], f"the one {tuned_path} names, of {len(mine)} for recipe {recipe!r} (also {others})"
    note = f" ({tuned_path} names {', '.join(repr(n) for n in named)})" if named else ""
    raise ReportError(
        f"{len(mine)} studies for recipe {recipe!r} in {where}: {', '.join(repr(n) for n in mine)}{note}; "
        f"pick one with --study NAME."
    )


def _studies_named_by(tuned_path: Path | None) -> set[str]:
    """The studies the profiles of the tuned file at `tuned_path` came from; none when it cannot be read."""
    if tuned_path is None or not tuned_path.is_file():
        return set()
    try:
        profiles = tuned_file.read(tuned_path).get("profiles", {})
    except tuned_file.TunedFileError:
        return set()  # the report reads the study; `autotune show` says what is wrong with the file
    return {str(p["study"]) for p in profiles.values() if isinstance(p, dict) and p.get("study")}


def _open_study(
    recipe: str, name: str, storage: str | None, study: str | None, state_dir: Path, tuned_path: Path | None = None
) -> tuple[optuna.Study, str, str]:
    if storage is None:
        db = state_dir / f"{name}.db"
        if not db.is_file():
            raise ReportError(
                f"there is no study storage at {db}: run `autotune search --recipe {recipe}` here first, or pass "
                f"--storage URL."
            )
        storage = f"sqlite:///{db.resolve()}"
    where = redact(storage)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter(
                "ignore", optuna.exceptions.ExperimentalWarning
            )  # heartbeats: what the search relies on
            store = open_storage(storage, create=False)  # reading: a missing file is an error, not made
    except SharingError as exc:
        raise ReportError(str(exc)) from exc
    chosen, why = _pick_study(store, name, study, where, tuned_path)
    return optuna.load_study(study_name=chosen, storage=store), where, why


# -- the figures' data -------------------------------------------------------------------------


def _column(config: dict[str, Any]) -> str:
    return "on device" if config.get("placement") == "device" else str(config.get("num_workers", 0))


def heatmap_data(
    trials: list[FrozenTrial],
) -> tuple[dict[tuple[int, str], float], set[tuple[int, str]], dict[tuple[int, str], str], list[str],
           set[tuple[int, str]]]:
    """The heat map's cells: the best complete value, else pruned (ran, stopped early), else failed's reason, else
    not run (ruled out by a prediction or the parity check before it ran); and the columns.

    A cell with no complete trial is still a tried one when its trials were pruned or failed; only a cell no trial
    reached is "not tried".
    """
    cells: dict[tuple[int, str], float] = {}
    pruned: set[tuple[int, str]] = set()
    not_run: set[tuple[int, str]] = set()
    failed: dict[tuple[int, str], str] = {}
    for t in trials:
        key = (int(t.user_attrs["config"]["batch_size"]), _column(t.user_attrs["config"]))
        if t.state == TrialState.COMPLETE and t.value is not None:
            cells[key] = max(cells.get(key, 0.0), float(t.value))
        elif t.state == TrialState.PRUNED and "duration_s" not in t.user_attrs and not t.intermediate_values:
            # Never run (a trial that runs keeps its wall time, and one the pruner stopped its windows): valued from
            # its parts, or skipped by a prediction or by the parity check.
            not_run.add(key)
        elif t.state == TrialState.PRUNED:
            pruned.add(key)
        elif t.state == TrialState.FAIL:
            # An oom reason carries its numbers after "oom: " (autotune.trial.oom).
            failed[key] = "oom" if str(t.user_attrs.get("reason", "")).startswith("oom") else "failed"
    tried = [*cells, *pruned, *failed, *not_run]
    workers = sorted({int(c) for _, c in tried if c != "on device"})
    columns = [str(w) for w in workers] + (["on device"] if any(c == "on device" for _, c in tried) else [])
    pruned -= set(cells)
    failed = {k: v for k, v in failed.items() if k not in cells and k not in pruned}
    return cells, pruned, failed, columns, not_run - set(cells) - pruned - set(failed)


def _stem(study: str) -> str:
    """A file name stem per study: mnist_cnn@nvidia-h200 -> mnist_cnn.nvidia-h200."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", study.replace("@", ".", 1)).strip("-")


def _draw(
    trials: list[FrozenTrial],
    complete: list[FrozenTrial],
    baseline: float | None,
    importances: dict[str, float] | None,
    title: str,
    out: Path,
    stem: str,
) -> tuple[dict[str, Path], list[str]]:
    from autotune.reporting import figures  # matplotlib loads only when a report is drawn, not with every trial process

    written: dict[str, Path] = {}
    notes: list[str] = []
    cells, pruned_cells, failed_cells, columns, not_run = heatmap_data(trials)
    if cells:
        written["heatmap"] = figures.heatmap(
            cells,
            pruned_cells,
            failed_cells,
            columns,
            f"{title}: samples/s by batch_size x num_workers",
            out / f"{stem}.heatmap.png",
            not_run,
        )
        pruned = [
            (t.number, list(t.intermediate_values.values())[-1])
            for t in trials
            if t.state == TrialState.PRUNED and t.intermediate_values
        ]
        failed = [t.number for t in trials if t.state == TrialState.FAIL]
        written["history"] = figures.history(
            [(t.number, float(t.value or 0)) for t in complete],
            pruned,
            failed,
            baseline,
            f"{title}: optimisation history",
            out / f"{stem}.history.png",
        )
    else:
        notes.append("no trial completed, so there is no heat map and no history to draw.")
    if importances:
        written["importance"] = figures.importances(
            importances, f"{title}: which knobs decide samples/s", out / f"{stem}.importance.png"
        )
    return written, notes


def report(
    recipe: str,
    storage: str | None = None,
    study: str | None = None,
    out: Path | None = None,
    top: int = 5,
    state_dir: Path = Path(".autotune"),
    command: str | None = None,
    echo: Callable[[str], None] = print,
) -> StudyReport:
    """Tables, figures and one report file from a study `autotune search` wrote.

    With no `storage`, reads ``./.autotune/RECIPE.db`` as the search does; with no
    `study`, takes the one study for this recipe there, or of several the one the
    tuned file's profiles name. Files go to `out`, by
    default next to the recipe (``./recipes``). `command` is recorded in the report.

    For example::

        rep = report("mnist_cnn")
        rep.figures["heatmap"]
        # PosixPath('recipes/mnist_cnn.nvidia-h200.heatmap.png')
    """
    if top < 1:
        raise ReportError(f"`top >= 1` must hold, but got {top=}.")
    ref = resolve(recipe)
    loaded, where, why = _open_study(recipe, ref.name, storage, study, state_dir, ref.tuned_path)
    echo(f"autotune report: reading study {loaded.study_name!r} in {where}{f': {why}' if why else ''}")
    trials = [t for t in loaded.get_trials(deepcopy=False) if "config" in t.user_attrs]
    if not trials:
        raise ReportError(
            f"study {loaded.study_name!r} holds no trial with a recorded config; was it written by `autotune search`?"
        )
    complete = sorted(
        (t for t in trials if t.state == TrialState.COMPLETE and t.value is not None),
        key=lambda t: -float(t.value or 0),
    )
    counts = _counts(trials, complete)
    base_trial = next(
        (t for t in sorted(complete, key=lambda t: t.number) if t.user_attrs.get("role") == "baseline"), None
    )
    base_value = float(base_trial.value) if base_trial is not None and base_trial.value else None
    best, notes = fastest(complete, base_trial, parity_verdicts(loaded), top)
    rounds = read_rounds(loaded)
    if rounds is None:
        notes.append("no speed-up is stated: the study holds no finalists measured again beside the baseline (its "
                     "search has not written a tuned file, or an earlier autotune version did); each trial's "
                     "samples/s is one measurement.")
    importances, why = param_importances(loaded, len(complete))
    notes += [why] if why else []

    hardware = str(loaded.user_attrs.get("hardware", "?"))
    out = Path(out) if out is not None else ref.tuned_path.parent
    stem = _stem(loaded.study_name)
    echo(f"  drawing figures into {out}/ ...")
    written, more = _draw(trials, complete, base_value, importances, f"{ref.name} on {hardware}", out, stem)
    rep = StudyReport(
        ref.name,
        loaded.study_name,
        where,
        hardware,
        counts,
        row_of(base_trial) if base_trial else None,
        tuple(best),
        importances,
        tuple(notes + more),
        failure_groups(trials),
        written,
        out / f"{stem}.report.md",
        out / f"{stem}.report.html",
        rounds,
    )
    command = command or f"autotune report --recipe {recipe}"
    write_markdown(rep, command)
    write_html(rep, command)
    return rep


def _counts(trials: list[FrozenTrial], complete: list[FrozenTrial]) -> dict[str, int]:
    """The study's trials by how they ended."""
    return {
        "complete": len(complete),
        "pruned": sum(t.state == TrialState.PRUNED for t in trials),
        "failed": sum(t.state == TrialState.FAIL for t in trials),
        "unfinished": sum(not t.state.is_finished() for t in trials),
    }


# -- what the command prints -------------------------------------------------------------------


def render(rep: StudyReport) -> str:
    """The report as text tables, and the files written."""
    lines = [f"{rep.recipe} on {rep.hardware}", summary(rep)]
    if rep.rounds is not None:
        lines += ["", winner_line(rep.rounds)]
        lines += table(*rounds_table(rep.rounds), right=[2, 3, 4])
    lines += ["", "fastest trials beside the baseline's, each measured once"]
    headers, rows = best_table(rep)
    lines += table(headers, rows, right=[1, 2, 3]) if rows else ["  no complete trial"]
    if rep.importances:
        lines += ["", "parameter importances (PED-ANOVA: what the fastest trials have in common)"]
        lines += table(["knob", "share", ""], [[k, percent(v), bar(v)] for k, v in rep.importances.items()], right=[1])
    if rep.failures:
        lines += ["", "failed and pruned trials, by reason"]
        headers, rows = failure_table(rep)
        lines += table(headers, rows, right=[2])
    lines += [f"note: {n}" for n in rep.notes]
    lines += ["", "written:"] + [f"  {path}" for path in [*rep.figures.values(), rep.markdown, rep.html]]
    return "\n".join(lines)
