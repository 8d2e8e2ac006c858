"""A cpu profile for the tiny recipe that the framework jobs export from."""

from __future__ import annotations

from pathlib import Path

import torch

from autotune.config import Config
from autotune.tuned import file as tuned_file


def write_cpu_profile(project: Path, config: Config, lr: float) -> None:
    tuned_file.write_profile(
        project / "recipes" / "tiny.tuned.toml",
        "tiny",
        "cpu",
        {
            "samples_per_s": 2000.0,
            "baseline_samples_per_s": 1000.0,
            "speedup": 2.0,
            "lr": lr,
            "lr_rule": "linear",
            "cpu_share": 2,
            "knobs": tuned_file.config_to_knobs(config),
            "versions": {"torch": torch.__version__},
        },
    )
