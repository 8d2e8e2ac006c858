"""Shared fixtures: a tiny workload, a temporary project folder, a stored study, a GPU marker that skips on a CPU."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

TINY = Path(__file__).parent / "fixtures" / "tiny.py"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; run `pytest -m gpu` on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working folder holding recipes/tiny.py, with data and study state kept inside it."""
    (tmp_path / "recipes").mkdir()
    shutil.copy(TINY, tmp_path / "recipes" / "tiny.py")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AUTOTUNE_DATA", str(tmp_path / "data"))
    monkeypatch.delenv("TINY_FAIL", raising=False)
    monkeypatch.delenv("AUTOTUNE_WINDOW_S", raising=False)
    monkeypatch.setattr("autotune.tuned.api._told", set())  # each test's first use of a profile is told afresh
    return tmp_path


@pytest.fixture
def postgres_url() -> str:
    """A PostgreSQL URL from AUTOTUNE_TEST_POSTGRES_URL (.ci/run starts a server and sets it); else skip."""
    url = os.environ.get("AUTOTUNE_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("AUTOTUNE_TEST_POSTGRES_URL is not set: no PostgreSQL server to test against (.ci/run starts one)")
    return url


@pytest.fixture(scope="session")
def report_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/reporting/test_report.py's study in an SQLite file, written once (a second of SQLite commits): copy it."""
    from reporting.test_report import make_study

    path = tmp_path_factory.mktemp("report-study") / "study.db"
    make_study(f"sqlite:///{path}")
    return path
