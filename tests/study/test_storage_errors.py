"""A study's SQLite file that refuses a write mid-search: exit 2, one message naming the cause and the file, the
finished trials kept; once the cause is gone, the same command resumes with them.

Each cause is real: the file made immutable (chattr +i, which holds for root too), a file-size limit
(RLIMIT_FSIZE, set in a search process of its own once the database exists), and another process holding the
database's exclusive lock. The trials are faked (tests/study/test_search.py's FakePool), in the subprocess too.
"""

from __future__ import annotations

import re
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _procs import child_env
from procs.test_faults import make_unwritable, make_writable
from study.test_identity import nothing_started_early, search, studies  # noqa: F401 (a fixture among them)

pytestmark = [pytest.mark.steady, pytest.mark.usefixtures("fake_pool")]
from study.test_search import fake_pool  # noqa: E402, F401 (a fixture: trials without processes)

TESTS = Path(__file__).parents[1]
KEPT = "The trials that finished are kept in it; "


def finished(project: Path) -> int:
    return studies(project)["tiny@cpu"]


def test_an_immutable_study_file_is_named_with_its_cause_and_the_search_resumes_once_writable(project: Path) -> None:
    assert search("--trials", "3").exit_code == 0
    db = project / ".autotune" / "tiny.db"
    make_unwritable(db)
    try:
        refused = search("--trials", "6")
    finally:
        make_writable(db)
    assert refused.exit_code == 2, refused.output
    assert "Traceback" not in refused.output
    assert re.fullmatch(
        rf"Error: the study 'tiny@cpu' in {re.escape(str(db))} could not be written: the database is read-only "
        rf"\(attempt to write a readonly database\)\. {KEPT}make {re.escape(str(db))} writable \(and its folder, where "
        r"SQLite keeps its journal\), then run the same command again to resume\.",
        refused.output.splitlines()[-1]), refused.output
    assert finished(project) == 3
    resumed = search("--trials", "6")
    assert resumed.exit_code == 0, resumed.output
    assert "resuming study 'tiny@cpu': 3 trial(s) already finished, 3 to go" in resumed.output.splitlines()


CHILD = textwrap.dedent("""\
    import sys
    sys.path.insert(0, {tests!r})
    from study.test_search import FakePool
    from autotune.procs import early
    from autotune.study import pools
    pools.TrialPool = FakePool  # the trials are faked; the search, its study and its file are real
    early.start_early = lambda recipe, options, gpus, echo=None: early.StartedEarly(options)
    from autotune.cli import run
    sys.argv = ["autotune", *sys.argv[1:]]
    run()
""")


def _search_process(project: Path, limit: int | None, *args: str) -> subprocess.CompletedProcess[str]:
    def limited() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    command = [sys.executable, "-c", CHILD.format(tests=str(TESTS)), "search", "--recipe", "tiny", "--finalists", "1",
               "--rounds", "1", *args]
    return subprocess.run(command, cwd=project, env=child_env(), capture_output=True, text=True, timeout=300,
                          preexec_fn=limited)


@pytest.mark.slow
def test_a_file_size_limit_is_named_with_its_cause_and_the_search_resumes_once_lifted(project: Path) -> None:
    assert search("--trials", "3").exit_code == 0
    db = project / ".autotune" / "tiny.db"
    limit = db.stat().st_size + 16 * 1024  # a few trials' rows more, then SQLite's write fails
    refused = _search_process(project, limit, "--trials", "60")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "Traceback" not in refused.stderr
    assert refused.stderr.splitlines()[-1] == (
        f"Error: the study 'tiny@cpu' in {db} could not be written: no space left: its disk, or this process's "
        f"file-size limit (ulimit -f), cannot take more (disk I/O error). {KEPT}free space on that disk (or raise "
        f"the limit), or give --storage another place for a new study, then run the same command again to resume.")
    kept = finished(project)
    assert 3 <= kept < 60
    resumed = _search_process(project, None, "--trials", "60")
    assert resumed.returncode == 0, resumed.stderr
    resuming = f"resuming study 'tiny@cpu': {kept} trial(s) already finished, {60 - kept} to go"
    assert resuming in resumed.stdout.splitlines(), resumed.stdout


HOLD = textwrap.dedent("""\
    import sqlite3, sys
    connection = sqlite3.connect(sys.argv[1], isolation_level=None)
    connection.execute("BEGIN EXCLUSIVE")
    print("locked", flush=True)
    sys.stdin.readline()  # held until the test says so
    connection.execute("ROLLBACK")
""")


def test_a_locked_study_file_is_named_with_its_cause_and_the_search_resumes_once_released(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert search("--trials", "3").exit_code == 0
    db = project / ".autotune" / "tiny.db"
    monkeypatch.setattr("autotune.study.shared.storage.SQLITE_BUSY_TIMEOUT_S", 0.5)
    monkeypatch.setattr("autotune.study.shared.storage.SCHEMA_ATTEMPTS", 1)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        refused = search("--trials", "6")
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=30)
    assert refused.exit_code == 2, refused.output
    assert "Traceback" not in refused.output
    assert re.fullmatch(
        rf"Error: the (study 'tiny@cpu' in|study storage) {re.escape(str(db))} could not be written: the database is "
        rf"locked by another process \(database is locked\)\. {KEPT}wait for the other search or program to finish, "
        r"or stop it, then run the same command again to resume\.", refused.output.splitlines()[-1]), refused.output
    assert finished(project) == 3
    resumed = search("--trials", "6")
    assert resumed.exit_code == 0, resumed.output
    assert "resuming study 'tiny@cpu': 3 trial(s) already finished, 3 to go" in resumed.output.splitlines()
