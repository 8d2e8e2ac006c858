"""Shared fixtures: a tiny workload, a temporary project folder, a stored study, a GPU marker that skips on a CPU.

Also how the tests share the cores under pytest-xdist (pyproject.toml's addopts runs two workers): each worker
and every process it starts computes on one thread; a test marked `alone` runs while no other test runs, except
one marked `steady` (one core busy, no more); tests that share a module-scoped fixture run
on one worker, which builds it once; tests marked `slow` start first.

A test marked `e2e` (a whole search in real processes: trial children, searchers, signals, resumes) is left out of
`pytest` by pyproject.toml's addopts and run by `pytest -m e2e`; .ci/run runs both, so CI runs every test.
Mark `e2e` the search that takes seconds end to end; its parts keep their own quick tests in the default run.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

TINY = Path(__file__).parent / "fixtures" / "tiny.py"

# Tests that time real work, in files this suite does not mark itself: they run alone under pytest-xdist.
ALONE_FILES = ("tests/trial/test_timing.py",)


def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and workerinput["workercount"] > 1:
        config.pluginmanager.register(SharedCores(workerinput["testrunuid"]), "autotune-shared-cores")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch  # here, not above: pytest-xdist's controller process, which runs no test, never imports it

    gpu = torch.cuda.is_available()
    skip = pytest.mark.skip(reason="needs a CUDA GPU; run `pytest -m gpu` on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            if not gpu:
                item.add_marker(skip)
                continue  # it builds no fixture and shares no core: in no group
            else:
                item.add_marker(pytest.mark.alone)  # one device: a test measuring it or its memory has it alone
        if item.nodeid.split("::")[0] in ALONE_FILES:
            item.add_marker(pytest.mark.alone)
        if item.get_closest_marker("alone"):
            item.add_marker(pytest.mark.xdist_group("alone"))  # one worker runs them back to back
            continue
        if item.get_closest_marker("steady"):
            # One group, handed out second (the sort below; --no-loadscope-reorder keeps that order): the other
            # worker runs it while the `alone` ones run.
            item.add_marker(pytest.mark.xdist_group("steady"))
            continue
        fixtures = getattr(item, "_fixtureinfo", None)  # a doctest has none
        defined = fixtures.name2fixturedefs.items() if fixtures is not None else ()
        shared = sorted(name for name, defs in defined if defs and defs[-1].scope == "module")
        if shared:
            item.add_marker(pytest.mark.xdist_group(f"{item.nodeid.split('::')[0]}:{'+'.join(shared)}"))
    if getattr(config, "workerinput", None) is not None:
        # The `alone` tests are handed out first, then the `steady` ones, which may run beside them, then the other
        # slow ones; the many short ones fill in after them, so that both workers finish at about the same time.
        # (Each worker collects, and so sorts, the same items alike.)
        items.sort(key=lambda item: next(i for i, mark in enumerate(("alone", "steady", "slow", None))
                                         if mark is None or item.get_closest_marker(mark)))


class SharedCores:
    """A readers-writer lock over the run's workers, on three files each worker opens once.

    Every test holds `held` shared; a test marked `alone` holds it exclusively, and keeps it through the
    `alone` tests that follow it on its worker. Taking `turn` first keeps a worker that waits to run alone
    from being passed by the other workers' back-to-back shared holds. A test marked `steady` holds `steady`
    exclusively instead, so one at a time runs beside the `alone` tests: the `alone` tests time sleeps and
    searches, and left the other core idle (45 s of a run's 240 s, at 0.6 cores busy); beside one core's
    steady load they pass as alone (three runs of every `alone` test next to a one-thread convolution loop).

    Each worker computes on one thread, and so does every process it starts (an inherited OMP_NUM_THREADS;
    a search's fork server keeps the value it started with, for every trial process it forks after): two
    workers each computing on every core slow each other's torch several times over, spinning at its barriers.
    """

    def __init__(self, run: str) -> None:
        import torch

        folder = Path(tempfile.gettempdir())
        self.paths = [folder / f"autotune-pytest-{run}.{name}" for name in ("turn", "held", "steady")]
        self.turn, self.held, self.steady = (os.open(path, os.O_RDWR | os.O_CREAT, 0o600) for path in self.paths)
        self.alone = False
        torch.set_num_threads(1)
        os.environ["OMP_NUM_THREADS"] = "1"

    @contextmanager
    def _turn(self) -> Iterator[None]:
        fcntl.flock(self.turn, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self.turn, fcntl.LOCK_UN)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> object:
        alone = item.get_closest_marker("alone") is not None
        steady = not alone and item.get_closest_marker("steady") is not None
        if item.get_closest_marker("skip") is not None:  # skipped (a GPU test on a CPU): nothing to share
            return (yield)
        if alone and not self.alone:
            with self._turn():
                fcntl.flock(self.held, fcntl.LOCK_EX)
            self.alone = True
        elif steady:
            fcntl.flock(self.steady, fcntl.LOCK_EX)
        elif not alone:
            with self._turn():
                fcntl.flock(self.held, fcntl.LOCK_SH)
        try:
            return (yield)
        finally:
            if steady:
                fcntl.flock(self.steady, fcntl.LOCK_UN)
            elif not (alone and nextitem is not None and nextitem.get_closest_marker("alone")):
                self.alone = False
                fcntl.flock(self.held, fcntl.LOCK_UN)

    def pytest_unconfigure(self) -> None:
        for fd, path in zip((self.turn, self.held, self.steady), self.paths):
            os.close(fd)
            path.unlink(missing_ok=True)


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
    # The CPU's space as on a host with bf16 instructions, whatever this host has, in this process and the searches
    # it starts: what a test asserts of a search may not depend on the machine (tests/study/test_space.py tests the
    # detection).
    monkeypatch.setenv("AUTOTUNE_CPU_BF16", "1")
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
