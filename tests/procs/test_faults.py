"""Faults inside a trial end as a failed trial with a reason, leave no process behind, and the next trial runs.

Each fault is real: the tiny workload's TINY_FAIL switch makes its forward pass raise
CUDA's out-of-memory message or hang, or its data set raise, hang or kill itself in a
DataLoader worker process.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from _procs import wait_none_with
from click.testing import CliRunner

from autotune.cli import main
from autotune.config import Config
from autotune.procs.pool import TrialPool
from autotune.trial.timing import Windows
from autotune.tuned import file as tuned_file

QUICK = Windows(warmup_steps=2, window_s=0.05, min_windows=2, max_windows=3, boundaries=1)


WORKER_RAISES = 'in a worker")'


def _line_of(text: str) -> int:
    """The fixture's line that raises, found rather than written down, so an edit to tiny.py moves it too."""
    lines = (Path(__file__).parent.parent / "fixtures" / "tiny.py").read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if text in line)


# A fault that ends the trial by itself gets seconds to say why on a busy machine; a hang is as clear after one.
@pytest.mark.parametrize(
    ("fail", "config", "timeout_s", "reason"),
    [
        ("oom", Config(batch_size=64), 3.0, r"oom: asked for 2\.00 GiB"),
        (
            "kill_worker",
            Config(batch_size=16, num_workers=1),
            3.0,
            r"worker died: DataLoader worker \(pid\(s\) \d+\) exited unexpectedly",
        ),
        ("hang_worker", Config(batch_size=16, num_workers=1), 1.0, r"timeout: no result within 1 s"),
        ("hang", Config(batch_size=64), 1.0, r"timeout: no result within 1 s"),
        (
            "getitem_worker",
            Config(batch_size=16, num_workers=1),
            3.0,
            r"error: ValueError: cannot read sample \d+ in a worker in DataLoader worker process 0 "
            rf"\(tiny\.py, line {_line_of(WORKER_RAISES)}\)",
        ),
    ],
    ids=[
        "oom at a large batch",
        "DataLoader worker dies",
        "DataLoader worker hangs",
        "step hangs",
        "__getitem__ raises",
    ],
)
def test_a_fault_fails_the_trial_with_its_reason(
    project: Path, monkeypatch: pytest.MonkeyPatch, fail: str, config: Config, timeout_s: float, reason: str
) -> None:
    monkeypatch.setenv("TINY_FAIL", fail)
    pool = TrialPool(project / "recipes" / "tiny.py", "cpu", 2, project / "logs", timeout_s=timeout_s)
    try:
        outcome = pool.run(config, 0.05, QUICK)
        assert outcome.state == "failed"
        assert outcome.reason is not None and re.fullmatch(reason, outcome.reason), outcome.reason
        assert pool.child is None, "a failed child is not trusted with the next trial"
        assert wait_none_with(str(project), 10) == set(), "the child and its DataLoader workers are gone"
    finally:
        pool.stop()


def test_after_a_failed_trial_the_next_one_runs_in_a_fresh_child(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TINY_FAIL", "oom")
    pool = TrialPool(project / "recipes" / "tiny.py", "cpu", 2, project / "logs", timeout_s=30.0)
    try:
        assert pool.run(Config(batch_size=64), 0.05, QUICK).reason == "oom: asked for 2.00 GiB"
        # A small batch: the fault does not fire.
        outcome = pool.run(Config(batch_size=16), 0.05, QUICK)
        assert outcome.state == "complete" and outcome.result is not None and outcome.result["samples_per_s"] > 0
        assert pool.children_started == 2
    finally:
        pool.stop()


def make_unwritable(folder: Path) -> None:
    """Make `folder` refuse new files, for root too (root ignores mode bits, not the immutable flag)."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
    else:
        done = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot make a folder unwritable for root here: chattr: {done.stderr.strip()}")


def make_writable(folder: Path) -> None:
    if os.geteuid() != 0:
        folder.chmod(0o755)
    else:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


@pytest.fixture
def locked_recipes(project: Path):  # type: ignore[no-untyped-def]
    folder = project / "recipes"
    make_unwritable(folder)
    try:
        yield folder
    finally:
        make_writable(folder)


def test_unwritable_recipes_folder_stops_the_search_before_any_trial(
    project: Path, locked_recipes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """There is no study yet, so the message says that nothing ran, not that a study keeps its trials."""
    loaded: list[object] = []
    monkeypatch.setattr("autotune.study.setup.load", loaded.append)  # the workload's code: never reached
    result = CliRunner().invoke(main, ["search", "--recipe", "tiny", "--trials", "2"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    tuned = locked_recipes / "tiny.tuned.toml"
    assert re.fullmatch(
        rf"Error: cannot write tuned file {re.escape(str(tuned))}: (Operation not permitted|Permission denied) "
        rf"\({re.escape(str(locked_recipes))}/\.tiny\.tuned\.toml\.\w+\.check\); a search must be able to write "
        rf"its tuned file before it starts, so nothing was run: make {re.escape(str(locked_recipes))} writable and "
        rf"run the same command again\.",
        result.output.splitlines()[-1],
    ), result.output
    assert loaded == [], "the workload was not loaded"
    assert not (project / ".autotune").exists(), "no study was started"
    assert sorted(p.name for p in locked_recipes.iterdir()) == ["tiny.py"]


def test_writing_into_an_unwritable_folder_is_one_clear_error(project: Path, locked_recipes: Path) -> None:
    profile = {
        "samples_per_s": 2.0,
        "baseline_samples_per_s": 1.0,
        "speedup": 2.0,
        "versions": {"torch": "x"},
        "knobs": tuned_file.config_to_knobs(Config(batch_size=16)),
    }
    with pytest.raises(
        tuned_file.TunedFileError, match=r"cannot write tuned file .*tiny\.tuned\.toml: .*run the same command again\."
    ):
        tuned_file.write_profile(locked_recipes / "tiny.tuned.toml", "tiny", "cpu", profile)
    assert sorted(p.name for p in locked_recipes.iterdir()) == ["tiny.py"], "no file, no temporary file"


@pytest.mark.parametrize("recipe", ["tiny", "mnist_cnn"])
def test_a_working_folder_that_refuses_new_files_is_one_message_and_no_process_starts(
    project: Path, monkeypatch: pytest.MonkeyPatch, recipe: str
) -> None:
    """The folder holds recipes/tiny.py (its tuned file's folder takes files) or nothing (the built-in's tuned file
    would go to ./recipes, not there yet): the message names what autotune writes there, once."""
    from _procs import descendants

    from autotune.procs import early

    started: list[str] = []
    monkeypatch.setattr(early, "start_early", lambda recipe, *args, **kwargs: started.append(recipe))
    if recipe == "mnist_cnn":
        (project / "recipes" / "tiny.py").unlink()
        (project / "recipes").rmdir()
    before = descendants(os.getpid())  # processes earlier tests left (a fork server), not this search's
    make_unwritable(project)
    try:
        result = CliRunner().invoke(main, ["search", "--recipe", recipe, "--trials", "2"])
    finally:
        make_writable(project)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    what = ".autotune/ (the study and the trial processes' logs)"
    if recipe == "mnist_cnn":
        what += " and recipes/ (the tuned file, mnist_cnn.tuned.toml)"
    assert result.output.splitlines() == [
        f"Error: autotune needs to write in {project}: {what}; {project} refuses new files (Operation not "
        f"permitted). Nothing was run: run the command from a folder you can write to, or make {project} writable."
    ]
    assert started == [] and descendants(os.getpid()) <= before, "no trial process was started"
    assert sorted(p.name for p in project.iterdir()) == (["recipes"] if recipe == "tiny" else [])
