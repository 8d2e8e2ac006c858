"""`autotune report` from a small stored study: tables, grouped failures, PNGs, and the report files."""

from __future__ import annotations

import base64
import io
import re
import shutil
from pathlib import Path

import numpy as np
import optuna
import pytest
from click.testing import CliRunner
from optuna.trial import TrialState
from PIL import Image

from autotune.cli import main
from autotune.config import Config
from autotune.knobs import DataFacts, Machine
from autotune.reporting.figures import SIZES
from autotune.reporting.study import ReportError, render, report
from autotune.study.space.domains import build_space

# Tables and plots drawn in this process, on one thread: these may run beside the alone tests (tests/conftest.py).
pytestmark = pytest.mark.steady

MACHINE = Machine("NVIDIA H200", True, 4, ("bf16", "fp16"), 140 * 2**30)
FACTS = DataFacts(
    size=60_000, sample_bytes=3_144, image_4d=True, static_shapes=True, deterministic=True, device_dataset=False
)
STUDY = "tiny@nvidia-h200"
NO_ROUNDS = (
    "no speed-up is stated: the study holds no finalists measured again beside the baseline (its search has not "
    "written a tuned file, or an earlier autotune version did); each trial's samples/s is one measurement."
)

# (config, state, samples/s or the pruned trial's window rates, role, failure reason), in the order the search ran them.
TRIALS: list[tuple[Config, str, float | list[float] | None, str, str | None]] = [
    (Config(batch_size=16), "complete", 1_000.0, "baseline", None),
    (
        Config(batch_size=128, num_workers=4, pin_memory=True, persistent_workers=True, prefetch_factor=2),
        "complete",
        9_000.0,
        "seed",
        None,
    ),
    (Config(batch_size=64, placement="device", cuda_graph=True), "complete", 40_000.0, "seed", None),
    (Config(batch_size=16, num_workers=2, prefetch_factor=2), "complete", 2_500.0, "", None),
    (Config(batch_size=64, num_workers=0), "complete", 1_500.0, "", None),
    (Config(batch_size=64, num_workers=2, prefetch_factor=2), "complete", 5_000.0, "", None),
    (Config(batch_size=128, num_workers=2, prefetch_factor=2, amp="bf16"), "complete", 6_000.0, "", None),
    (Config(batch_size=128, placement="device", cuda_graph=True, amp="bf16"), "complete", 60_000.0, "", None),
    (
        Config(batch_size=128, placement="device", cuda_graph=True, amp="bf16", cudnn_benchmark=True),
        "complete",
        58_000.0,
        "",
        None,
    ),
    (Config(batch_size=1024, num_workers=4, prefetch_factor=2), "failed", None, "", "oom"),
    (Config(batch_size=1024, num_workers=2, prefetch_factor=2), "failed", None, "", "oom"),
    (
        Config(batch_size=32, num_workers=1, prefetch_factor=2),
        "failed",
        None,
        "",
        "error: ValueError: cannot read sample 3",
    ),
    (
        Config(batch_size=32, num_workers=3, prefetch_factor=2),
        "failed",
        None,
        "",
        "error: ValueError: cannot read sample 9",
    ),
    (Config(batch_size=256, num_workers=1, prefetch_factor=1), "failed", None, "", "timeout: no result within 90 s"),
    (Config(batch_size=16, num_workers=1, prefetch_factor=1), "pruned", [900.0, 950.0], "", None),
    (Config(batch_size=32, num_workers=1, prefetch_factor=1), "pruned", [1_200.0, 1_100.0], "", None),
]


def make_study(url: str, name: str = STUDY, trials: list = TRIALS, recipe: str = "tiny") -> None:
    """A study as `autotune search` leaves it: the real space's parameters and the search's user attributes."""
    space = build_space(16, MACHINE, FACTS)
    study = optuna.create_study(storage=url, study_name=name, direction="maximize")
    study.set_user_attr("hardware", MACHINE.hardware)
    study.set_user_attr("recipe", recipe)
    for config, state, value, role, reason in trials:
        study.enqueue_trial(space.params(config) or {}, user_attrs={"role": role} if role else {})
        trial = study.ask()
        config = space.suggest(trial)
        trial.set_user_attr("config", config.as_dict())
        trial.set_user_attr("lr", 0.05 * config.batch_size / 16)
        if reason:
            trial.set_user_attr("reason", reason)
        if state == "complete":
            trial.set_user_attr("result", {"samples_per_s": value, "spread": 0.02})
            study.tell(trial, value)
        elif state == "pruned":
            for i, rate in enumerate(value):
                trial.report(rate, i)
            study.tell(trial, state=TrialState.PRUNED)
        else:
            study.tell(trial, state=TrialState.FAIL)


@pytest.fixture
def stored(project: Path, report_study: Path) -> str:
    shutil.copy(report_study, project / "elsewhere.db")
    return f"sqlite:///{project / 'elsewhere.db'}"


def _png(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def _not_blank(image: Image.Image) -> bool:
    pixels = np.asarray(image.convert("L"), dtype=np.float32)
    return bool(pixels.std() > 10 and len(np.unique(pixels)) > 20)


def test_report_tables_failures_and_importances(stored: str, tmp_path: Path) -> None:
    rep = report("tiny", storage=stored, out=tmp_path / "out", top=3, echo=lambda _: None)
    assert (rep.study, rep.hardware, rep.counts) == (
        STUDY,
        "NVIDIA H200",
        {"complete": 9, "pruned": 2, "failed": 5, "unfinished": 0},
    )
    assert rep.baseline is not None and (rep.baseline.trial, rep.baseline.samples_per_s) == (0, 1_000.0)
    assert [(r.trial, r.samples_per_s) for r in rep.best] == [(7, 60_000.0), (8, 58_000.0), (2, 40_000.0)]
    assert rep.best[0].describe == "bs=128 device-resident graph bf16"
    assert [(g.state, g.reason, g.trials) for g in rep.failures] == [
        ("failed", "error: ValueError", (11, 12)),
        ("failed", "oom", (9, 10)),
        ("pruned", "windows ran below 50% of the best trial's samples/s", (14, 15)),
        ("failed", "timeout", (13,)),
    ]
    assert rep.failures[0].example == "error: ValueError: cannot read sample 3"
    assert rep.importances is not None and abs(sum(rep.importances.values()) - 1) < 1e-9
    assert set(rep.importances) <= {
        "placement",
        "batch_size",
        "num_workers",
        "pin_memory",
        "persistent_workers",
        "prefetch_factor",
        "cudnn_benchmark",
        "amp",
        "cuda_graph",
        "channels_last",
        "compile",
    }
    assert rep.notes == (NO_ROUNDS,)


def test_report_marks_what_the_parity_check_rejected(stored: str, tmp_path: Path) -> None:
    study = optuna.load_study(study_name=STUDY, storage=stored)
    # As the search keeps them: on the study, under the trial that found the config, with the config described.
    study.set_user_attr("parity:trial-7", {"passed": False, "config": "bs=128 device-resident graph bf16"})
    # Trial 8 ran at the sqrt rule's rate (0.4); the check rejected that and passed the linear rule's 0.8: the row
    # states the rate its verdict is for.
    study.set_user_attr(
        "parity:trial-8", {"passed": True, "lr": 0.8, "config": "bs=128 device-resident cudnn.benchmark graph bf16"}
    )
    rep = report("tiny", storage=stored, out=tmp_path / "out", top=3, echo=lambda _: None)
    assert [(r.rank, r.trial, r.parity) for r in rep.best] == [(1, 7, "REJECT"), (2, 8, "pass"), (3, 2, None)]
    assert [r.lr for r in rep.best] == [0.4, 0.8, 0.2]
    assert rep.notes == (
        "parity REJECT: the search's parity check found the config trains differently from the baseline; it cannot "
        "win.",
        NO_ROUNDS,
    )
    text = render(rep)
    assert re.search(r"  #1 +7 +60,000 +±2\.0% +bs=128 device-resident graph bf16 +0\.4 +REJECT\n", text), text
    assert (
        "| #2 | 8 | 58,000 | ±2.0% | bs=128 device-resident cudnn.benchmark graph bf16 | 0.8 | pass |"
        in rep.markdown.read_text()
    )

    # When every config shown was rejected, the fastest one that passed is listed after them, at its rank.
    study.set_user_attr(
        "parity:trial-8", {"passed": False, "config": "bs=128 device-resident cudnn.benchmark graph bf16"}
    )
    study.set_user_attr("parity:trial-2", {"passed": False, "config": "bs=64 device-resident graph"})
    study.set_user_attr("parity:trial-6", {"passed": True, "config": "bs=128 workers=2 prefetch=2 bf16"})
    rep = report("tiny", storage=stored, out=tmp_path / "out", top=3, echo=lambda _: None)
    assert [(r.rank, r.trial, r.parity) for r in rep.best] == [
        (1, 7, "REJECT"),
        (2, 8, "REJECT"),
        (3, 2, "REJECT"),
        (5, 6, "pass"),
    ]  # #4 (trial 1) was not checked


def test_report_files_exist_decode_and_link(stored: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    rep = report("tiny", storage=stored, out=out, echo=lambda _: None)
    stem = "tiny.nvidia-h200"
    assert rep.figures == {kind: out / f"{stem}.{kind}.png" for kind in ("heatmap", "history", "importance")}
    assert (rep.markdown, rep.html) == (out / f"{stem}.report.md", out / f"{stem}.report.html")
    for kind, path in rep.figures.items():
        image = _png(path.read_bytes())
        assert (image.format, image.size) == ("PNG", SIZES[kind])
        assert _not_blank(image), f"{path.name} looks blank"
    markdown = rep.markdown.read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", markdown)
    assert sorted(links) == sorted(p.name for p in rep.figures.values())
    assert all((rep.markdown.parent / link).is_file() for link in links)
    assert "| baseline | 0 | 1,000 | ±2.0% |" in markdown and "| #1 | 7 | 60,000 | ±2.0% |" in markdown
    embedded = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", rep.html.read_text())
    assert sorted(_png(base64.b64decode(data)).size for data in embedded) == sorted(SIZES.values())
    assert "http" not in rep.html.read_text().replace("<!doctype html>", "")  # self-contained: nothing fetched


def test_report_with_few_trials_says_what_it_left_out(project: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{project / 'few.db'}"
    make_study(url, trials=TRIALS[:3])
    rep = report("tiny", storage=url, out=tmp_path, echo=lambda _: None)
    assert rep.importances is None and set(rep.figures) == {"heatmap", "history"}
    assert rep.notes == (NO_ROUNDS, "parameter importances need at least 5 complete trials; the study has 3.")
    assert "parameter importances need at least 5 complete trials" in rep.markdown.read_text()


def test_report_finds_the_one_study_in_the_default_storage(project: Path) -> None:
    (project / ".autotune").mkdir()
    make_study(f"sqlite:///{project / '.autotune' / 'tiny.db'}", trials=TRIALS[:2])
    rep = report("tiny", echo=lambda _: None)
    assert (
        rep.study == STUDY
        and rep.markdown == project / "recipes" / "tiny.nvidia-h200.report.md"
        and rep.markdown.is_file()
    )


def test_report_asks_which_study_when_there_are_several(project: Path) -> None:
    url = f"sqlite:///{project / 'two.db'}"
    make_study(url, trials=TRIALS[:1])
    make_study(url, name="tiny@cpu", trials=TRIALS[:1])
    with pytest.raises(
        ReportError,
        match=r"2 studies for recipe 'tiny' in sqlite:///.*two.db: 'tiny@nvidia-h200', 'tiny@cpu'; "
        r"pick one with --study NAME",
    ):
        report("tiny", storage=url, echo=lambda _: None)
    with pytest.raises(
        ReportError, match=r"there is no study 'tiny@a100' in .*; studies there: 'tiny@nvidia-h200', 'tiny@cpu'\."
    ):
        report("tiny", storage=url, study="tiny@a100", echo=lambda _: None)


def test_report_without_a_study_says_to_search_first(project: Path) -> None:
    with pytest.raises(
        ReportError,
        match=r"there is no study storage at \.autotune/tiny\.db: run `autotune search --recipe tiny` here first",
    ):
        report("tiny", echo=lambda _: None)


def test_report_command_prints_tables_and_file_names(stored: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["report", "--recipe", "tiny", "--storage", stored, "--out", str(tmp_path), "--top", "2"]
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "tiny on NVIDIA H200" in out and "9 complete, 2 pruned, 5 failed" in out
    assert re.search(r"baseline\s+0\s+1,000\s+±2\.0%\s+bs=16 workers=0", out)
    assert re.search(r"#2\s+8\s+58,000\s+±2\.0%", out) and "#3" not in out
    assert f"{tmp_path}/tiny.nvidia-h200.heatmap.png" in out and f"{tmp_path}/tiny.nvidia-h200.report.html" in out


def test_report_command_rejects_an_unknown_study(stored: str) -> None:
    result = CliRunner().invoke(main, ["report", "--recipe", "tiny", "--storage", stored, "--study", "nope"])
    assert result.exit_code == 2
    assert "there is no study 'nope'" in result.output and "Traceback" not in result.output
