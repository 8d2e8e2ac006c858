"""The streams' tests: real tar shards and parquet files, written small in each test's own data folder, and a
project holding the stream workloads of tests/fixtures (tiny_stream, tiny_shards) beside tiny.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from _small import IMAGES, SHARDS, TEXTS
from _streams import FIXTURES

STREAM_SWITCHES = ("TINY_STREAM", "TINY_STREAM_LEN", "TINY_SHARDS", "TINY_STREAM_UNDECLARED", "TINY_STREAM_WORKERS",
                   "WORLD_SIZE", "RANK")


@pytest.fixture
def small_data(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project whose built-in streams are small: 48 ImageNet-class JPEGs in 16 shards, 512 texts in 16 files."""
    monkeypatch.setenv("AUTOTUNE_SYNTHETIC_IMAGENET_IMAGES", str(IMAGES))
    monkeypatch.setenv("AUTOTUNE_IMAGENET_SHARDS", str(SHARDS))
    monkeypatch.setenv("AUTOTUNE_SYNTHETIC_TEXT_SAMPLES", str(TEXTS))
    monkeypatch.setenv("AUTOTUNE_QUIET", "1")
    return project / "data"


@pytest.fixture
def streams(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`project` with recipes/tiny_stream.py and recipes/tiny_shards.py, no stream switch set, one process's world."""
    for name in ("tiny_stream", "tiny_shards"):
        shutil.copy(FIXTURES / f"{name}.py", project / "recipes" / f"{name}.py")
    for switch in STREAM_SWITCHES:
        monkeypatch.delenv(switch, raising=False)
    return project
