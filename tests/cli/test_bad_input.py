"""Bad input to `autotune search`: one message naming the value and the rule, exit 2, no traceback, no file touched."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.cli import main

BAD_RECIPE = """\
schema = 99
recipe = "tiny"
colour = "blue"

[profiles.cpu]
samples_per_s = "fast"
baseline_samples_per_s = 100.0
speedup = -1.0
versions = {}
mystery = 1

[profiles.cpu.knobs]
batch_size = 0
num_workers = 2
pin_memory = false
persistent_workers = true
prefetch_factor = 99
cudnn_benchmark = false
channels_last = false
amp = "fp8"
cuda_graph = false
placement = "stream"
warp_drive = true
"""


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def run_bad(project: Path, *args: str) -> str:
    before = snapshot(project)
    result = CliRunner().invoke(main, ["search", *args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert snapshot(project) == before, "a bad input must leave every file as it was"
    return result.output


def test_unknown_recipe_name(project: Path) -> None:
    out = run_bad(project, "--recipe", "nosuch")
    assert "Error: unknown recipe 'nosuch': not ./recipes/nosuch.py, not a path, not a built-in. Known recipes: " in out
    assert "tiny" in out and "mnist_cnn" in out


def test_recipe_path_that_is_not_a_py_file(project: Path) -> None:
    (project / "recipes" / "tiny.txt").write_text("not python\n")
    out = run_bad(project, "--recipe", "./recipes/tiny.txt")
    assert "Error: a recipe path must name a `.py` file, but got './recipes/tiny.txt'." in out


def test_workload_that_fails_to_import_names_file_line_and_error(project: Path) -> None:
    path = project / "recipes" / "broken.py"
    path.write_text("import torch\n\nimport no_such_module_here\n")
    out = run_bad(project, "--recipe", "broken")
    assert (
        f"workload {path}, line 3 failed to import: ModuleNotFoundError: No module named 'no_such_module_here'" in out
    )


def test_workload_with_a_syntax_error(project: Path) -> None:
    path = project / "recipes" / "typo.py"
    path.write_text("DEFAULTS = dict(\n    batch_size=16,\n    lr=0.1\n    epochs=2)\n")
    out = run_bad(project, "--recipe", "typo")
    assert re.search(rf"workload {re.escape(str(path))}, line [34] failed to import: SyntaxError: ", out)


def test_data_set_that_raises_names_the_workload_line(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINY_FAIL", "getitem")
    out = run_bad(project, "--recipe", "tiny")
    path = project / "recipes" / "tiny.py"
    assert re.search(
        rf"workload {re.escape(str(path))}: building or reading its data set failed: "
        rf"ValueError: cannot read sample 0 \({re.escape(str(path))}, line \d+\)",
        out,
    )


def test_hand_edited_tuned_recipe_lists_every_problem(project: Path) -> None:
    tuned = project / "recipes" / "tiny.tuned.toml"
    tuned.write_text(BAD_RECIPE)
    out = run_bad(project, "--recipe", "tiny")
    problems = [
        "schema must be 1, but got 99 (a file from another autotune version?)",
        "unknown top-level key 'colour'; known: schema, recipe, profiles",
        "profiles.'cpu'.samples_per_s must be number, but got 'fast'",
        "profiles.'cpu'.speedup must be > 0, but got -1.0",
        "profiles.'cpu' has unknown key 'mystery'",
        "profiles.'cpu'.knobs.batch_size must be >= 1, but got 0",
        "profiles.'cpu'.knobs.prefetch_factor must be in 1..64, but got 99",
        "profiles.'cpu'.knobs.amp must be one of off, bf16, fp16, but got 'fp8'",
        "profiles.'cpu'.knobs has unknown knob 'warp_drive'",
    ]
    assert f"tuned file {tuned} has {len(problems)} problem(s):" in out
    for problem in problems:
        assert f"  - {problem}" in out
    # `show` reads it the same way.
    result = CliRunner().invoke(main, ["show", "--recipe", "tiny"])
    assert result.exit_code == 2 and "has 9 problem(s)" in result.output


def test_tuned_recipe_that_is_not_toml(project: Path) -> None:
    tuned = project / "recipes" / "tiny.tuned.toml"
    tuned.write_text("schema = = 1\n")
    out = run_bad(project, "--recipe", "tiny")
    assert f"Error: tuned file {tuned} is not valid TOML: " in out


@pytest.mark.parametrize(
    ("fix", "message"),
    [
        ("warp=on", "--fix names unknown knob 'warp'; the knobs are: placement, batch_size, num_workers,"),
        ("batch_size=3", "--fix batch_size: 3 is outside its domain {4, 8, 16, 32, 64, 128}."),
        ("num_workers=0..99", "--fix num_workers: 3, 4, 5,"),
        ("amp=fp16", "--fix amp: fp16 is outside its domain {off, bf16}."),
        (
            "cuda_graph=on",
            "--fix cuda_graph: on is outside its domain {off} (cuda_graph is left out here: needs CUDA).",
        ),
        ("pin_memory=maybe", "--fix pin_memory: expected on/off, but got 'maybe'."),
        ("batch_size=64..8", "--fix batch_size: `lo <= hi` must hold, but got (low=64, high=8)."),
        ("batch_size", "--fix must look like knob=value, knob=a,b or knob=lo..hi, but got 'batch_size'."),
    ],
)
def test_bad_fix(project: Path, fix: str, message: str) -> None:
    out = run_bad(project, "--recipe", "tiny", "--fix", fix)
    assert message in out


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "postgresql://autotune:hunter2@127.0.0.1:1/nowhere",
            "cannot open study storage postgresql://autotune:***@127.0.0.1:1/nowhere: ",
        ),
        ("mysql+nosuchdriver://db/x", "cannot open study storage mysql+nosuchdriver://db/x: "),
        ("not a url", "cannot open study storage not a url: "),
    ],
)
def test_unusable_storage_url(project: Path, url: str, message: str) -> None:
    out = run_bad(project, "--recipe", "tiny", "--storage", url)
    assert message in out
    assert "hunter2" not in out


def test_gpus_on_a_machine_without_gpus(project: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA GPUs")
    out = run_bad(project, "--recipe", "tiny", "--gpus", "0,1")
    assert "Error: --gpus 0,1 needs CUDA GPUs, but this machine has none; run without --gpus to tune on the CPU." in out


def test_bad_heartbeat_setting(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_GRACE_S", "soon")
    out = run_bad(project, "--recipe", "tiny", "--storage", f"sqlite:///{project}/x.db")
    assert "AUTOTUNE_GRACE_S must be a whole number of seconds >= 1, but got 'soon'." in out
