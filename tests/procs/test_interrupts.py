"""A search stopped mid-trial, by SIGINT or SIGKILL, loses nothing; the same command again resumes it.

The first trial completes; the second (a seed at batch 128, with DataLoader workers)
hangs in its forward pass (TINY_FAIL=hang), so the signal always lands mid-trial.
A search stopped in its finalist rounds, run again, reaches the verdicts and the winner it would have.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
from _procs import REPO, child_env, descendants, wait_gone
from optuna.trial import TrialState

from autotune.study.shared import sharing
from autotune.tuned import file as tuned_file

# fp32 only: bf16 on a CPU is emulated, and its trials would take most of the resumed search's time. No parity
# check: what is under test is the stop and the resume, not the winner's numerics (tests/study covers those).
COMMAND = ["search", "--recipe", "tiny", "--trials", "4", "--trial-timeout", "60", "--finalists", "1", "--rounds", "1",
           "--fix", "amp=off", "--no-parity-check"]
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


class Search:
    """`autotune search` in a subprocess, its output collected by a thread."""

    def __init__(self, project: Path, env: dict[str, str], command: list[str] = COMMAND) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "autotune", *command],
            cwd=project,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=child_env(**env),
            # As from a terminal: a runner that starts the tests in the background may pass SIGINT on ignored.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout or []), daemon=True)
        self.reader.start()

    def output(self) -> str:
        self.reader.join(timeout=10)
        return "".join(self.lines)


def load(project: Path) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return optuna.load_study(study_name="tiny@cpu+amp=off", storage=f"sqlite:///{project}/.autotune/tiny.db")


def wait_mid_trial(project: Path, search: Search, timeout_s: float = 90) -> int:
    """Until the first config of batch 64 or more (the one that hangs) runs, every trial before it finished; its
    number. The seeds at the workload's own batch come first, so it is not trial 1."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert search.proc.poll() is None, search.output()
        if any("trial 0 " in line for line in search.lines):  # the study exists; reading it now races nothing
            try:
                trials = load(project).get_trials()
            except Exception:  # the study is being created
                trials = []
            hanging = [
                t.number
                for t in trials
                if t.state == TrialState.RUNNING and t.user_attrs.get("config", {}).get("batch_size", 0) >= 64
            ]
            if hanging and all(t.state.is_finished() for t in trials[: hanging[0]]):
                time.sleep(1.0)  # well inside the hanging step
                return hanging[0]
        time.sleep(0.3)
    raise AssertionError(f"no trial ran in time:\n{search.output()}")


@pytest.fixture
def quick_heartbeats(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_S", "1")
    monkeypatch.setenv("AUTOTUNE_GRACE_S", "3")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_every_stop_signal_is_ctrl_c(sig: int) -> None:
    """The one handler every autotune process installs (autotune.procs.lifecycle.stop_on_signals)."""
    code = ("import os, signal, sys, time\nfrom autotune.procs import lifecycle\nlifecycle.stop_on_signals()\n"
            f"try:\n    os.kill(os.getpid(), {int(sig)})\n    time.sleep(5)\n"
            "except KeyboardInterrupt:\n    sys.exit(130)\n")
    done = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, timeout=30)
    assert done.returncode == 130, done.stderr


@pytest.mark.e2e
@pytest.mark.slow
def test_sigterm_stops_cleanly_and_keeps_finished_trials(project: Path, quick_heartbeats: None) -> None:
    """Schedulers (Slurm, Kubernetes) stop jobs with SIGTERM: the search stops as with Ctrl-C (the test above
    shows SIGINT and SIGHUP take the same path)."""
    sig = signal.SIGTERM
    search = Search(project, {"TINY_FAIL": "hang"})
    n = wait_mid_trial(project, search)
    below = descendants(search.proc.pid)
    search.proc.send_signal(sig)
    assert search.proc.wait(timeout=30) == 130
    out = search.output()
    assert (
        "interrupted: finished trials are kept in the study; run the same command to resume. No tuned file was written."
        in out
    )
    assert "Traceback" not in out
    trials = load(project).get_trials()
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials[:n])
    assert trials[n].state == TrialState.FAIL
    assert (
        trials[n].user_attrs["reason"]
        == "interrupted: the search was stopped (SIGINT, SIGTERM or SIGHUP); the config was queued again"
    )
    retry = [t for t in trials if t.system_attrs.get("retry_history") == [n]]
    assert len(retry) == 1 and retry[0].state == TrialState.WAITING and retry[0].params == trials[n].params
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    assert sorted(p.name for p in (project / "recipes").iterdir()) == ["tiny.py"], "no recipe, no half-written file"
    assert wait_gone(below, 2) == set(), "no process of the search outlives it by more than 2 s"


@pytest.mark.e2e
@pytest.mark.slow
def test_sigkill_mid_trial_then_the_same_command_resumes(project: Path, quick_heartbeats: None) -> None:
    first = Search(project, {"TINY_FAIL": "hang"})
    n = wait_mid_trial(project, first)
    below = descendants(first.proc.pid)
    assert len(below) >= 2, "a trial child and its DataLoader workers run"
    first.proc.kill()
    first.proc.wait(timeout=10)
    assert wait_gone(below, 15) == set(), "the trial child and its DataLoader workers end with the search"
    killed = load(project).get_trials()
    assert killed[n].state == TrialState.RUNNING, "nothing marked it yet: only its heartbeat stopped"

    # The same command again; large batches now fail as OOM, so the killed config ends with a reason quickly.
    second = Search(project, {"TINY_FAIL": "oom"})
    assert second.proc.wait(timeout=240) == 0, second.output()
    out = second.output()
    assert f"resuming study 'tiny@cpu+amp=off': {n} trial(s) already finished, {4 - n} to go" in out
    assert f"wrote {project / 'recipes' / 'tiny.tuned.toml'}" in out

    trials = load(project).get_trials()
    assert trials[n].state == TrialState.FAIL
    assert trials[n].user_attrs["reason"].startswith("interrupted: its searcher ")
    retry = [t for t in trials if t.system_attrs.get("retry_history") == [n]]
    assert len(retry) == 1 and retry[0].params == trials[n].params, "the killed trial's config was queued again"
    assert (retry[0].state, retry[0].user_attrs["reason"]) == (
        TrialState.FAIL,
        "oom: asked for 2.00 GiB",
    ), "and measured"
    assert not [t for t in trials if not t.state.is_finished()], "no trial left RUNNING or WAITING"
    counted = sharing.counted(trials)
    assert len(counted) == 4 and trials[0] in counted and trials[n] not in counted
    profile = tuned_file.read(project / "recipes" / "tiny.tuned.toml")["profiles"]["cpu"]
    assert profile["trials_complete"] + profile["trials_failed"] + profile["trials_pruned"] == 4


# Verdicts clear-cut on any CPU, over 8,192 samples of tiny.py's blobs: batch 128 at the linear rule's rate trains like
# the baseline (deviation -0.0%), batch 256 at none of the three rates (+138%, +262%, +5,491%); and batch 128 runs
# about 4x the baseline's rate, so the rounds cannot pick another winner. One core a trial, as on a busy host.
ROUNDS_COMMAND = ["search", "--recipe", "tiny", "--trials", "4", "--trial-timeout", "60", "--finalists", "1",
                  "--rounds", "2", "--cpus", "1", "--fix", "amp=off", "--fix", "batch_size=16,128,256",
                  "--fix", "placement=stream", "--fix", "num_workers=0", "--fix", "channels_last=False"]
ROUNDS_ENV = {"TINY_SAMPLES": "8192", "PYTHONUNBUFFERED": "1"}


def verdicts(project: Path) -> dict[str, dict[str, object]]:
    """The parity verdicts a search kept on its study, by config, without the seconds each run took."""
    storage = f"sqlite:///{project}/.autotune/tiny.db"
    (name,) = optuna.study.get_all_study_names(storage)
    attrs = optuna.load_study(study_name=name, storage=storage).user_attrs
    return {v["config"]: {k: x for k, x in v.items() if k != "run_s"}
            for k, v in attrs.items() if k.startswith("parity:trial-")}


def written(project: Path) -> dict[str, object]:
    """The tuned file's profile, without what the clock decides (the check's seconds, its winner's run's)."""
    profile = tuned_file.read(project / "recipes" / "tiny.tuned.toml")["profiles"]["cpu"]
    parity = {k: v for k, v in profile["parity"].items() if k not in ("check_s", "run_s")}
    return {"knobs": profile["knobs"], "lr": profile["lr"], "parity": parity}


@pytest.mark.e2e
@pytest.mark.slow
def test_sigterm_in_the_finalist_rounds_then_the_same_command_reaches_the_same_verdicts_and_winner(
    project: Path, tmp_path_factory: pytest.TempPathFactory, quick_heartbeats: None
) -> None:
    whole = tmp_path_factory.mktemp("uninterrupted")
    (whole / "recipes").mkdir()
    shutil.copy(REPO / "tests" / "fixtures" / "tiny.py", whole / "recipes" / "tiny.py")
    uninterrupted = Search(whole, ROUNDS_ENV, ROUNDS_COMMAND)
    assert uninterrupted.proc.wait(timeout=300) == 0, uninterrupted.output()

    first = Search(project, ROUNDS_ENV, ROUNDS_COMMAND)
    deadline = time.monotonic() + 300
    while not any(line.startswith("finalists: measuring") for line in first.lines):
        assert first.proc.poll() is None and time.monotonic() < deadline, first.output()
        time.sleep(0.1)
    first.proc.send_signal(signal.SIGTERM)  # each round measures in fresh processes: seconds to go
    assert first.proc.wait(timeout=60) == 130, first.output()
    assert "No tuned file was written." in first.output()
    assert not (project / "recipes" / "tiny.tuned.toml").exists()
    kept = verdicts(project)  # what the interrupted run judged, kept on its study

    again = Search(project, ROUNDS_ENV, ROUNDS_COMMAND)
    assert again.proc.wait(timeout=300) == 0, again.output()
    out = again.output()
    said = f"the interrupted run:\n{first.output()}\nthe same command again:\n{out}"  # whole, where one fails
    assert "resuming study " in out and "4 trial(s) already finished, 0 to go" in out, said
    taken = (f"parity: taking up the check an earlier run of this search made ({len(kept)} verdict(s), 8,192 samples "
             f"a run)")
    assert taken in out, said
    assert "parity: checking" not in out and "\n  parity " not in out, f"no config is judged again: {said}"

    judged = verdicts(project)
    assert judged == kept, said
    assert {c: (v["passed"], v["samples"]) for c, v in judged.items()} == {
        "bs=128 workers=0": (True, 8192), "bs=256 workers=0": (False, 8192)}, said
    assert judged == verdicts(whole), said
    assert written(project) == written(whole), said
    assert written(project)["knobs"]["batch_size"] == 128
