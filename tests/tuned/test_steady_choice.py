"""A profile carries both picks: the winner by its declared run, and what steady samples/s alone would have taken."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.config import Config
from autotune.tuned import file as tuned_file
from autotune.tuned.schema import validate
from autotune.tuned.show import render

STEADY = {"config": "bs=32 device-resident", "samples_per_s": 90000.0, "run_s": 1.31, "setup_s": 1.2}


def _file(**changes: Any) -> dict[str, Any]:
    profile = {
        "samples_per_s": 3600.0,
        "baseline_samples_per_s": 3600.0,
        "speedup": 1.0,
        "run_s": 0.42,
        "run_epochs": 1,
        "steady_choice": dict(STEADY),
        "knobs": tuned_file.config_to_knobs(Config(batch_size=32, num_workers=4, prefetch_factor=2)),
        "versions": {"torch": "2.14.1"},
    }
    profile.update(changes)
    return {"schema": 1, "recipe": "slow_reads", "profiles": {"cpu": profile}}


def test_a_profile_with_both_picks_is_valid_and_shown(tmp_path: Path) -> None:
    data = _file()
    assert validate(data) == []
    path = tmp_path / "slow_reads.tuned.toml"
    tuned_file.write_profile(path, "slow_reads", "cpu", data["profiles"]["cpu"])
    shown = render(tuned_file.read(path), path).splitlines()
    assert [line.rstrip() for line in shown if line.startswith(("declared run, epochs", "samples/s alone"))] == [
        "declared run, epochs     1",
        "samples/s alone picks    bs=32 device-resident: 90,000/s, but a 1.31 s run (1.2 s one-time)",
    ]


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        (
            {"steady_choice": {**STEADY, "run_s": 0.3}},
            "`profiles.'cpu'.steady_choice.run_s >= run_s` must hold (the winner's declared run is shorter), but got "
            "(profiles.'cpu'.steady_choice.run_s=0.3, run_s=0.42)",
        ),
        (
            {"steady_choice": {**STEADY, "samples_per_s": 100.0}},
            "`profiles.'cpu'.steady_choice.samples_per_s >= samples_per_s` must hold (steady samples/s picked it), but "
            "got (profiles.'cpu'.steady_choice.samples_per_s=100.0, samples_per_s=3600.0)",
        ),
        ({"steady_choice": {**STEADY, "run_s": float("nan")}},
         "profiles.'cpu'.steady_choice.run_s must be a finite number, but got nan"),
        ({"steady_choice": {"config": "bs=32 device-resident"}},
         "profiles.'cpu'.steady_choice lacks 'samples_per_s'"),
        ({"steady_choice": {**STEADY, "why": "faster"}},
         "profiles.'cpu'.steady_choice has unknown key 'why'; known: config, samples_per_s, run_s, setup_s"),
        ({"run_epochs": 0}, "profiles.'cpu'.run_epochs must be > 0, but got 0"),
        ({"run_epochs": 1.5}, "profiles.'cpu'.run_epochs must be int, but got 1.5"),
    ],
)
def test_a_steady_choice_that_no_run_could_make_is_refused(changes: dict[str, Any], problem: str) -> None:
    assert problem in validate(_file(**changes))
