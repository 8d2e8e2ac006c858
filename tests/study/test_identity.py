"""A study remembers the workload it measured: a changed workload gets a study beside the old one, kept; `--study`
resumes a named one and says what changed; a changed domain under `--study` is one error, exit 2.

The workload file and the study's SQLite file are real (tests/fixtures/tiny.py in a project's recipes/, edited between
searches as a user edits it); the command is the real one, run in this process; only the trials are faked
(tests/study/test_search.py's FakePool), so that a search takes seconds.
"""

from __future__ import annotations

import re
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner, Result
from study.test_search import FakePool, fake_pool  # noqa: F401 (fake_pool, a fixture: trials without processes)

from autotune.cli import main
from autotune.procs import early
from autotune.tuned import file as tuned_file

pytestmark = [pytest.mark.steady, pytest.mark.usefixtures("fake_pool")]  # faked trials, one thread, this process


@pytest.fixture(autouse=True)
def nothing_started_early(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line starts no trial process ahead: the faked trials need none."""
    monkeypatch.setattr(early, "start_early", lambda recipe, options, gpus, echo=None: early.StartedEarly(options))


def search(*args: str) -> Result:
    return CliRunner().invoke(main, ["search", "--recipe", "tiny", "--finalists", "1", "--rounds", "1", *args])


def edit(project: Path, old: str, new: str) -> None:
    path = project / "recipes" / "tiny.py"
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


def studies(project: Path) -> dict[str, int]:
    storage = optuna.storages.RDBStorage(f"sqlite:///{project}/.autotune/tiny.db")
    names = [s.study_name for s in storage.get_all_studies()]
    return {name: len(storage.get_all_trials(storage.get_study_id_from_name(name))) for name in names}


def beside(result: Result, changes: str) -> str:
    """The study the search started beside the old one, as its line names it (the digest is the workload's)."""
    found = re.search(rf"^the workload changed since study 'tiny@cpu' measured it \({re.escape(changes)}\); starting "
                      r"study '(tiny@cpu~[0-9a-f]{12})' beside it \(the old one is kept: --study 'tiny@cpu' resumes "
                      r"it\)$", result.output, re.M)
    assert found is not None, result.output
    return found.group(1)


def test_an_edited_batch_size_gets_a_study_beside_the_old_one_and_the_old_one_refuses_its_domain(
    project: Path,
) -> None:
    first = search("--trials", "3")
    assert first.exit_code == 0, first.output
    assert studies(project) == {"tiny@cpu": 3}
    edit(project, "batch_size=16,  # small", "batch_size=32,  # small")

    second = search("--trials", "3")
    assert second.exit_code == 0, second.output
    new = beside(second, "the source of tiny.py; DEFAULTS['batch_size'] 16 -> 32")
    assert studies(project) == {"tiny@cpu": 3, new: 3}, "the old study is kept as it was"
    assert tuned_file.read(project / "recipes" / "tiny.tuned.toml")["profiles"]["cpu"]["study"] == new

    third = search("--trials", "4")
    assert third.exit_code == 0, third.output
    assert (f"the workload changed since study 'tiny@cpu' measured it (the source of tiny.py; DEFAULTS['batch_size'] "
            f"16 -> 32); resuming study '{new}', which measured it as it is now") in third.output.splitlines()
    assert f"resuming study '{new}': 3 trial(s) already finished, 1 to go" in third.output.splitlines()
    assert studies(project) == {"tiny@cpu": 3, new: 4}

    named = search("--trials", "5", "--study", "tiny@cpu")
    assert named.exit_code == 2, named.output
    assert "Traceback" not in named.output
    assert named.exception is None or isinstance(named.exception, SystemExit)
    assert re.fullmatch(
        r"Error: study 'tiny@cpu' searched another domain of batch_size than this search's \(8, 16, 32, 64, 128\): "
        r"the workload or the machine changed since \(.+\)\. Search without --study to start a study for this "
        r"workload, or name a new one\.", named.output.splitlines()[-1]), named.output
    assert ("  the workload changed since study 'tiny@cpu' measured it (the source of tiny.py; DEFAULTS['batch_size'] "
            "16 -> 32); resuming it as --study names it: its measurements were made on the workload as it was"
            ) in named.output.splitlines()


def test_a_resized_data_set_gets_a_study_beside_the_old_one_and_study_resumes_the_old_one(project: Path) -> None:
    first = search("--trials", "3")
    assert first.exit_code == 0, first.output
    edit(project, '"TINY_SAMPLES", 512', '"TINY_SAMPLES", 640')

    second = search("--trials", "3")
    assert second.exit_code == 0, second.output
    new = beside(second, "the source of tiny.py; the data set's length 512 -> 640")
    assert studies(project) == {"tiny@cpu": 3, new: 3}

    named = search("--trials", "4", "--study", "tiny@cpu")
    assert named.exit_code == 0, named.output
    lines = named.output.splitlines()
    assert ("  the workload changed since study 'tiny@cpu' measured it (the source of tiny.py; the data set's length "
            "512 -> 640); resuming it as --study names it: its measurements were made on the workload as it was"
            ) in lines
    assert "resuming study 'tiny@cpu': 3 trial(s) already finished, 1 to go" in lines
    assert studies(project) == {"tiny@cpu": 4, new: 3}
    assert tuned_file.read(project / "recipes" / "tiny.tuned.toml")["profiles"]["cpu"]["study"] == "tiny@cpu"


def test_report_reads_the_study_the_tuned_file_names_among_several_for_the_recipe(project: Path) -> None:
    assert search("--trials", "3").exit_code == 0
    edit(project, "batch_size=16,  # small", "batch_size=32,  # small")
    second = search("--trials", "3")
    new = beside(second, "the source of tiny.py; DEFAULTS['batch_size'] 16 -> 32")
    db = project / ".autotune" / "tiny.db"
    report = CliRunner().invoke(main, ["report", "--recipe", "tiny", "--out", str(project / "report")])
    assert report.exit_code == 0, report.output
    assert report.output.splitlines()[0] == (
        f"autotune report: reading study '{new}' in sqlite:///{db}: the one {project}/recipes/tiny.tuned.toml names, "
        f"of 2 for recipe 'tiny' (also 'tiny@cpu')")
    # Without a tuned file to say which, the report asks.
    (project / "recipes" / "tiny.tuned.toml").unlink()
    asked = CliRunner().invoke(main, ["report", "--recipe", "tiny", "--out", str(project / "report")])
    assert (asked.exit_code, asked.output.splitlines()) == (2, [
        f"Error: 2 studies for recipe 'tiny' in sqlite:///{db}: 'tiny@cpu', '{new}'; pick one with --study NAME."])
