"""The tuned file: round trip, validation of every problem at once, atomic write, profile merge."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune.config import Config
from autotune.tuned import file as tuned_file
from autotune.tuned.schema import validate_parity


def _profile(**changes) -> dict:
    profile = {
        "command": "autotune search --recipe tiny",
        "samples_per_s": 2000.0,
        "baseline_samples_per_s": 500.0,
        "speedup": 4.0,
        "spread": 0.02,
        "lr": 0.1,
        "lr_rule": "linear",
        "knobs": tuned_file.config_to_knobs(
            Config(batch_size=32, num_workers=2, persistent_workers=True, prefetch_factor=2)
        ),
        "excluded": {"cuda_graph": "needs CUDA"},
        "versions": {"torch": "2.14.1"},
    }
    profile.update(changes)
    return profile


def test_round_trip_and_match(tmp_path: Path) -> None:
    path = tmp_path / "recipes" / "tiny.tuned.toml"
    tuned_file.write_profile(path, "tiny", "cpu", _profile())
    data = tuned_file.read(path)
    assert data["schema"] == tuned_file.SCHEMA_VERSION and data["recipe"] == "tiny"
    assert tuned_file.match(data, "cpu") == _profile()
    assert tuned_file.match(data, "NVIDIA H200") is None
    assert tuned_file.knobs_to_config(data["profiles"]["cpu"]["knobs"]) == Config(
        batch_size=32, num_workers=2, persistent_workers=True, prefetch_factor=2
    )
    assert path.read_text().startswith("# autotune tuned file for 'tiny': data, not code. Commit it.\n")


def test_another_hardware_adds_a_profile_and_keeps_the_others(tmp_path: Path) -> None:
    path = tmp_path / "tiny.tuned.toml"
    tuned_file.write_profile(path, "tiny", "cpu", _profile())
    tuned_file.write_profile(path, "tiny", "NVIDIA H200", _profile(samples_per_s=9e5, speedup=450.0))
    tuned_file.write_profile(path, "tiny", "cpu", _profile(samples_per_s=2500.0))
    profiles = tuned_file.read(path)["profiles"]
    assert list(profiles) == ["cpu", "NVIDIA H200"]
    assert (profiles["cpu"]["samples_per_s"], profiles["NVIDIA H200"]["samples_per_s"]) == (2500.0, 9e5)


def test_write_is_atomic_a_failed_write_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "tiny.tuned.toml"
    tuned_file.write_profile(path, "tiny", "cpu", _profile())
    before = path.read_text()

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="No space left on device"):
        tuned_file.write_profile(path, "tiny", "cpu", _profile(samples_per_s=1.0))
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["tiny.tuned.toml"]  # no temporary file left behind


def test_every_problem_is_listed_at_once(tmp_path: Path) -> None:
    path = tmp_path / "bad.tuned.toml"
    path.write_text(
        'schema = 7\ncolour = "blue"\n[profiles.cpu]\nsamples_per_s = "fast"\nbaseline_samples_per_s = 10.0\n'
        'speedup = -1.0\nflavour = 1\n[profiles.cpu.versions]\n[profiles.cpu.knobs]\nbatch_size = 0\namp = '
        '"fp8"\nturbo = true\n'
    )
    with pytest.raises(tuned_file.TunedFileError) as info:
        tuned_file.read(path)
    message = str(info.value)
    expected = [
        "schema must be 1, but got 7",
        "unknown top-level key 'colour'",
        "profiles.'cpu'.samples_per_s must be number, but got 'fast'",
        "profiles.'cpu'.speedup must be > 0, but got -1.0",
        "profiles.'cpu' has unknown key 'flavour'",
        "profiles.'cpu'.knobs.batch_size must be in 1..16777216, but got 0",
        "profiles.'cpu'.knobs.amp must be one of off, bf16, fp16, but got 'fp8'",
        "profiles.'cpu'.knobs has unknown knob 'turbo'",
        "profiles.'cpu'.knobs lacks knob 'num_workers'",
    ]
    for line in expected:
        assert line in message
    assert re.match(rf"tuned file {re.escape(str(path))} has 1[0-9] problem\(s\):", message)


def test_not_toml_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "x.tuned.toml"
    path.write_text("schema = = 1")
    with pytest.raises(tuned_file.TunedFileError, match=r"is not valid TOML"):
        tuned_file.read(path)


# -- the parity table of a profile -------------------------------------------------------------


GOOD_RECORD = {
    "checked": True,
    "passed": True,
    "family": "batch_size",
    "tolerance": 0.25,
    "samples": 65536,
    "window": 16384,
    "lr": 0.32,
    "baseline_lr": 0.01,
    "initial_loss": 2.30,
    "loss": 2.27,
    "baseline_loss": 2.26,
    "deviation": 0.155,
    "probe_loss": 2.237,
    "baseline_probe_loss": 2.238,
    "probe_deviation": -0.024,
    "run_s": 1.5,
    "configs_checked": 3,
    "configs_rejected": 1,
    "check_s": 12.5,
}


def test_validate_record_accepts_a_check_and_its_absence() -> None:
    assert validate_parity("p", GOOD_RECORD) == []
    assert validate_parity("p", {"checked": False}) == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"checked": "yes"}, "p.checked must be true or false, but got 'yes'"),
        ({"family": "amp"}, "p.family must be one of loader, numerics, batch_size, but got 'amp'"),
        ({"samples": 65536.5}, "p.samples must be int, but got 65536.5"),
        ({"passed": 1}, "p.passed must be bool, but got 1"),
        ({"window": 70000}, "`window <= samples` must hold in p, but got (window=70000, samples=65536)"),
        ({"deviation": 0.48}, "p says passed, but |deviation| = 0.48 exceeds its tolerance 0.25"),
        (
            {"configs_rejected": 4},
            "`configs_rejected <= configs_checked` must hold in p, but got (configs_rejected=4, configs_checked=3)",
        ),
        ({"colour": "red"}, "p has unknown key 'colour'; known: checked, passed, family"),
    ],
)
def test_validate_record_names_the_key_and_the_rule(change: dict[str, Any], problem: str) -> None:
    problems = validate_parity("p", {**GOOD_RECORD, **change})
    assert len(problems) == 1 and problems[0].startswith(problem)


def test_validate_record_lists_every_missing_key_and_refuses_extras_when_unchecked() -> None:
    assert validate_parity("p", {"checked": True}) == [
        f"p lacks {key!r}"
        for key in (
            "passed",
            "family",
            "tolerance",
            "samples",
            "window",
            "lr",
            "baseline_lr",
            "configs_checked",
            "configs_rejected",
            "check_s",
        )
    ]
    assert validate_parity("p", {"checked": False, "passed": True}) == [
        "p says checked = false, so it must hold nothing else, but has ['passed']"
    ]


# -- on a GPU: real CUDA graphs, real fp16 -------------------------------------------------------




def test_a_tuned_file_of_a_path_recipe_names_a_show_command_that_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from autotune.cli import main

    monkeypatch.chdir(tmp_path)
    tuned = tmp_path / "work" / "my_model.tuned.toml"  # made by `autotune search --recipe work/my_model.py`
    tuned_file.write_profile(tuned, "my_model", "cpu", _profile())
    header = tuned.read_text().splitlines()[1]
    assert header == (
        "# Each profile says which command made it; `autotune show --recipe work/my_model.tuned.toml` prints it."
    )
    command = re.search(r"`autotune (show --recipe \S+)`", header).group(1).split()
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 0 and "autotune search --recipe tiny" in result.output, result.output


def test_the_show_command_in_a_tuned_files_header_is_quoted_for_the_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the profile's `command =` is: pasted into a shell, it runs (made by `autotune search --recipe 'my dir
    ü/wörk load ñ.py'`)."""
    import shlex
    import subprocess
    import sys

    monkeypatch.chdir(tmp_path)
    tuned, recipe, shown = "my dir ü/wörk load ñ.tuned.toml", "wörk load ñ", "'my dir ü/wörk load ñ.tuned.toml'"
    tuned_file.write_profile(tmp_path / tuned, recipe, "cpu", _profile())
    header = (tmp_path / tuned).read_text(encoding="utf-8").splitlines()[1]
    assert header == f"# Each profile says which command made it; `autotune show --recipe {shown}` prints it."
    command = re.search(r"`(autotune show --recipe .+)`", header).group(1)
    # Run as written, by a shell, as a user pastes it.
    program = shlex.join([sys.executable, "-c", "from autotune.cli import run; run()"])
    done = subprocess.run(command.replace("autotune", program, 1), shell=True, capture_output=True, text=True,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert done.returncode == 0 and "autotune search --recipe tiny" in done.stdout, done.stderr


WRITER = """\
import os, sys, time
from pathlib import Path
from autotune.tuned import file as tuned_file

def held(src, dst):  # after the temporary is written and fsynced, before it replaces the file: a writer stopped here
    print(src, flush=True)
    time.sleep(600)

os.replace = held
tuned_file.write_profile(Path(sys.argv[1]), "tiny", "cpu", {profile!r})
"""


def _writer_stopped_before_replace(path: Path) -> tuple[subprocess.Popen[str], Path]:
    """A real process whose write_profile holds its temporary, written and fsynced, and goes no further."""
    from _procs import child_env

    child = subprocess.Popen([sys.executable, "-c", WRITER.format(profile=_profile()), str(path)],
                             stdout=subprocess.PIPE, text=True, env=child_env())
    assert child.stdout is not None
    temporary = Path(child.stdout.readline().strip())
    assert temporary.parent == path.parent and temporary.name.endswith(".tmp"), temporary
    return child, temporary


def test_a_killed_writers_temporary_is_removed_by_the_next_write_and_nothing_else(tmp_path: Path) -> None:
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    path = recipes / "tiny.tuned.toml"
    live, held = _writer_stopped_before_replace(path)
    try:
        killed, stale = _writer_stopped_before_replace(path)
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        others = [recipes / ".other.tuned.toml.k1ll3d.tmp", recipes / "notes.txt", recipes / "tiny.py"]
        for other in others:
            other.write_text("kept\n")
        assert tuned_file.remove_stale_temporaries(path) == [stale]
        killed2, stale2 = _writer_stopped_before_replace(path)
        killed2.kill()
        killed2.wait()
        tuned_file.write_profile(path, "tiny", "cpu", _profile())  # the next write removes what a dead writer left
        assert not stale2.exists()
        assert sorted(p.name for p in recipes.iterdir()) == sorted(
            [held.name, path.name, *(p.name for p in others)]), "a live writer's temporary and every other file stay"
        assert all(p.read_text() == "kept\n" for p in others)
        assert tuned_file.read(path)["profiles"]["cpu"]["samples_per_s"] == _profile()["samples_per_s"]
    finally:
        live.kill()
        live.wait()
