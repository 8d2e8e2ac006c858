"""The tuned recipe file: round trip, validation of every problem at once, atomic write, profile merge."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from autotune import recipe
from autotune.config import Config


def _profile(**changes) -> dict:
    profile = {
        "command": "autotune search --recipe tiny",
        "samples_per_s": 2000.0,
        "baseline_samples_per_s": 500.0,
        "speedup": 4.0,
        "spread": 0.02,
        "lr": 0.1,
        "lr_rule": "linear",
        "knobs": recipe.config_to_knobs(Config(batch_size=32, num_workers=2, persistent_workers=True, prefetch_factor=2)),
        "excluded": {"cuda_graph": "needs CUDA"},
        "versions": {"torch": "2.14.1"},
    }
    profile.update(changes)
    return profile


def test_round_trip_and_match(tmp_path: Path) -> None:
    path = tmp_path / "recipes" / "tiny.tuned.toml"
    recipe.write_profile(path, "tiny", "cpu", _profile())
    data = recipe.read(path)
    assert data["schema"] == recipe.SCHEMA_VERSION and data["recipe"] == "tiny"
    assert recipe.match(data, "cpu") == _profile()
    assert recipe.match(data, "NVIDIA H200") is None
    assert recipe.knobs_to_config(data["profiles"]["cpu"]["knobs"]) == Config(batch_size=32, num_workers=2, persistent_workers=True, prefetch_factor=2)
    assert path.read_text().startswith("# autotune tuned recipe for 'tiny': data, not code. Commit it.\n")


def test_another_hardware_adds_a_profile_and_keeps_the_others(tmp_path: Path) -> None:
    path = tmp_path / "tiny.tuned.toml"
    recipe.write_profile(path, "tiny", "cpu", _profile())
    recipe.write_profile(path, "tiny", "NVIDIA H200", _profile(samples_per_s=9e5, speedup=450.0))
    recipe.write_profile(path, "tiny", "cpu", _profile(samples_per_s=2500.0))
    profiles = recipe.read(path)["profiles"]
    assert list(profiles) == ["cpu", "NVIDIA H200"]
    assert (profiles["cpu"]["samples_per_s"], profiles["NVIDIA H200"]["samples_per_s"]) == (2500.0, 9e5)


def test_write_is_atomic_a_failed_write_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "tiny.tuned.toml"
    recipe.write_profile(path, "tiny", "cpu", _profile())
    before = path.read_text()

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="No space left on device"):
        recipe.write_profile(path, "tiny", "cpu", _profile(samples_per_s=1.0))
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["tiny.tuned.toml"]  # no temporary file left behind


def test_every_problem_is_listed_at_once(tmp_path: Path) -> None:
    path = tmp_path / "bad.tuned.toml"
    path.write_text(
        'schema = 7\ncolour = "blue"\n[profiles.cpu]\nsamples_per_s = "fast"\nbaseline_samples_per_s = 10.0\n'
        'speedup = -1.0\nflavour = 1\n[profiles.cpu.versions]\n[profiles.cpu.knobs]\nbatch_size = 0\namp = "fp8"\nturbo = true\n'
    )
    with pytest.raises(recipe.RecipeError) as info:
        recipe.read(path)
    message = str(info.value)
    expected = [
        "schema must be 1, but got 7",
        "unknown top-level key 'colour'",
        "profiles.'cpu'.samples_per_s must be number, but got 'fast'",
        "profiles.'cpu'.speedup must be > 0, but got -1.0",
        "profiles.'cpu' has unknown key 'flavour'",
        "profiles.'cpu'.knobs.batch_size must be >= 1, but got 0",
        "profiles.'cpu'.knobs.amp must be one of off, bf16, fp16, but got 'fp8'",
        "profiles.'cpu'.knobs has unknown knob 'turbo'",
        "profiles.'cpu'.knobs lacks knob 'num_workers'",
    ]
    for line in expected:
        assert line in message
    assert re.match(rf"tuned recipe {re.escape(str(path))} has 1[0-9] problem\(s\):", message)


def test_not_toml_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "x.tuned.toml"
    path.write_text("schema = = 1")
    with pytest.raises(recipe.RecipeError, match=r"is not valid TOML"):
        recipe.read(path)
