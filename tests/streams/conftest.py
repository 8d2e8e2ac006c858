"""The streams' tests: real tar shards and parquet files, written small in each test's own data folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from _small import IMAGES, SHARDS, TEXTS


@pytest.fixture
def small_data(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project whose built-in streams are small: 48 ImageNet-class JPEGs in 16 shards, 512 texts in 16 files."""
    monkeypatch.setenv("AUTOTUNE_SYNTHETIC_IMAGENET_IMAGES", str(IMAGES))
    monkeypatch.setenv("AUTOTUNE_IMAGENET_SHARDS", str(SHARDS))
    monkeypatch.setenv("AUTOTUNE_SYNTHETIC_TEXT_SAMPLES", str(TEXTS))
    monkeypatch.setenv("AUTOTUNE_QUIET", "1")
    return project / "data"
