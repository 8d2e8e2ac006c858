"""A search of the built-in hf_stream_text end to end on the CPU: real parquet files, real trial processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.tuned import file as tuned_file


@pytest.mark.e2e
@pytest.mark.slow
def test_a_search_of_hf_stream_text_exits_0_with_a_tuned_file(small_data: Path) -> None:
    command = [sys.executable, "-m", "autotune", "search", "--recipe", "hf_stream_text", "--trials", "3",
               "--time-budget", "60"]
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy(), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "  stream: Hugging Face datasets, 16 shard(s); its order is its own (autotune never shuffles it)" in lines
    assert any(line.startswith("  pass check (") and "every worker count keeps" in line for line in lines), lines
    profile = tuned_file.read(small_data.parent / "recipes" / "hf_stream_text.tuned.toml")["profiles"]["cpu"]
    assert profile["samples_per_s"] > 0 and profile["tokens_per_s"] > 0
    assert profile["excluded"]["bucketing"] == "a stream has no index to group samples by length; its order is its own"
