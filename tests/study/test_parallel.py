"""Several searchers, one study: `--gpus` on one host, and separate commands through PostgreSQL."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import optuna
import pytest
from _procs import child_env

from autotune.config import Config
from autotune.knobs import SpaceError
from autotune.options import SearchOptions
from autotune.procs.searchers import GpusError, cpu_share, parse_gpus
from autotune.study import SearchError, search_parallel
from autotune.study.checks import baseline_run
from autotune.study.setup import open_study, prepare, slug
from autotune.study.shared import sharing
from autotune.study.shared.storage import open_storage
from autotune.tuned import file as tuned_file

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


@pytest.mark.parametrize(
    ("text", "available", "devices"), [("0,1", 2, [0, 1]), ("all", 3, [0, 1, 2]), (" 1 ", 2, [1]), ("ALL", 1, [0])]
)
def test_parse_gpus(text: str, available: int, devices: list[int]) -> None:
    assert parse_gpus(text, available) == devices


@pytest.mark.parametrize(
    ("text", "available", "message"),
    [
        (
            "0,2",
            2,
            "--gpus must be `all` or distinct device indices such as 0,1, but got '0,2': device 2 does not exist "
            "(this machine has 2: 0..1).",
        ),
        ("0,0,x", 2, "but got '0,0,x': device 0 is listed twice; 'x' is not a device index."),
        ("all", 0, "--gpus all needs CUDA GPUs, but this machine has none; run without --gpus to tune on the CPU."),
    ],
)
def test_parse_gpus_rejects(text: str, available: int, message: str) -> None:
    with pytest.raises(GpusError) as info:
        parse_gpus(text, available)
    assert message in str(info.value)


def test_cpu_share() -> None:
    assert [cpu_share(16, n) for n in (1, 2, 3, 8, 32)] == [16, 8, 5, 2, 1]


def check_study(study: optuna.Study, trials: int) -> list[optuna.trial.FrozenTrial]:
    """Exactly `trials` tickets, all finished; seeds once each; no config measured twice; the writer done."""
    all_trials = study.get_trials()
    assert not [t for t in all_trials if not t.state.is_finished()], "no trial left RUNNING or WAITING"
    assert sharing.retried_numbers(all_trials) == set(), "nothing was interrupted"
    assert len(all_trials) == trials, "none lost, none surplus"
    seeds = [
        json.dumps(t.user_attrs["config"], sort_keys=True)
        for t in all_trials
        if t.user_attrs.get("role") in ("seed", "baseline")
    ]
    assert len(seeds) >= 4 and len(set(seeds)) == len(seeds), "each seed config queued and measured once"
    measured = [
        json.dumps(t.user_attrs["config"], sort_keys=True) for t in all_trials if "duplicate_of" not in t.user_attrs
    ]
    assert len(set(measured)) == len(measured), "a config already measured is not measured again"
    assert study.user_attrs["writer"]["state"] == "done"
    return all_trials


@pytest.mark.e2e
@pytest.mark.slow
def test_gpus_runs_a_searcher_per_device_and_the_parent_writes(project: Path) -> None:
    """`--gpus 0,1` as the CLI runs it, on the CPU: this process and a searcher, one study in the default SQLite."""
    lines: list[str] = []
    options = SearchOptions(trials=6, trial_timeout_s=30, finalists=1, rounds=2, command="autotune search --gpus 0,1")
    result = search_parallel("tiny", options, devices=[0, 0], echo=lines.append)
    out = "\n".join(lines)
    assert result is not None and result.tuned_path == project / "recipes" / "tiny.tuned.toml", out
    assert (
        "2 searchers share study 'tiny@cpu', 1 of 2 CPU cores each; this process is cpu0 and writes the tuned file "
        "once no trial runs"
        in out
    )
    # The searcher made the baseline's parity run before its trials; the writer used it instead of making its own.
    made = [
        line
        for line in lines
        if line.startswith("cpu1 | parity: made the baseline's run for the check (8,192 samples, ")
    ]
    assert len(made) == 1, out
    study = optuna.load_study(study_name="tiny@cpu", storage=f"sqlite:///{project}/.autotune/tiny.db")
    stored = study.user_attrs[baseline_run.ATTRIBUTE]
    study_searcher = stored["searcher"]
    assert study_searcher != sharing.owner() and (stored["config"]["batch_size"], stored["config"]["num_workers"]) == (
        16,
        0,
    )
    # How many configs the gate checks depends on the measured numbers (a noisy fastest brings a runner-up along).
    summary = [line for line in lines if re.match(r"parity: \d+ config\(s\) checked", line)]
    assert len(summary) == 1 and f", run by searcher {study_searcher} before its trials)" in summary[0], out
    # The baseline and each finalist once a round (the declared run's choice may bring the rate leader along).
    firsts, seconds = (sum(line.startswith(f"  round {r}: ") for line in lines) for r in (1, 2))
    assert firsts == seconds and firsts in (2, 3), out
    trials = check_study(study, 6)
    assert study.user_attrs["cpu_share"] == 1 and study.user_attrs["writer"]["owner"] == sharing.owner()
    profile = tuned_file.read(result.tuned_path)["profiles"]["cpu"]
    assert profile["cpu_share"] == 1, "the profile states the share it was tuned for"
    assert profile["trials_complete"] + profile["trials_failed"] + profile["trials_pruned"] == 6
    assert profile["knobs"]["num_workers"] <= 1
    # tiny's declared run (1,024 samples) is short: its own settings may finish it first, and then need no check.
    if profile["knobs"] != tuned_file.config_to_knobs(Config(batch_size=16)):
        assert profile["parity"]["checked"]
        assert profile["parity"]["check_s"] >= round(stored["parity_run"]["seconds"], 1)
    assert len(trials) == 6


@pytest.mark.e2e
@pytest.mark.slow
def test_the_writer_waits_for_the_baseline_run_of_a_searcher_that_joins_late(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trials can all end before the searcher making the baseline's parity run stored it; the writer waits."""
    released = project / "searcher-may-go"
    monkeypatch.setenv("TINY_SEARCHER_WAITS_FOR", str(released))  # the searcher is held until the writer says it waits
    lines: list[str] = []

    def echo(line: str) -> None:
        lines.append(line)
        if line.startswith("parity: waiting for the baseline's run"):
            released.touch()

    # Five trials: the fifth seed is the first of a larger batch, whose parity run needs the baseline's.
    options = SearchOptions(trials=5, trial_timeout_s=30, finalists=1, rounds=1)
    assert search_parallel("tiny", options, devices=[0, 0], echo=echo) is not None, "\n".join(lines)
    waited = lines.index("parity: waiting for the baseline's run that a searcher makes before its trials")
    made = [
        i for i, line in enumerate(lines) if line.startswith("cpu1 | parity: made the baseline's run for the check")
    ]
    # How many configs the gate checks depends on the measured numbers (a noisy fastest brings a runner-up along).
    summary = [line for line in lines if re.match(r"parity: \d+ config\(s\) checked", line)]
    assert len(made) == 1 and waited < made[0], lines
    assert len(summary) == 1 and " before its trials)" in summary[0], lines
    assert not any(line.startswith("cpu1 | [") for line in lines), "the parent took every ticket"


@pytest.mark.e2e
@pytest.mark.slow
def test_gpus_searchers_share_the_tickets(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no baseline run to make first, both processes take tickets from the start.

    The searcher process imports torch before it joins (seconds); this process forks its trial processes from
    a server that already has, and could take every ticket first. So no step runs until both have taken one.
    """
    both_took_one = project / "both-took-a-ticket"
    monkeypatch.setenv("TINY_STEPS_WAIT_FOR", str(both_took_one))
    study_made = threading.Event()
    lines: list[str] = []

    def echo(line: str) -> None:
        lines.append(line)
        if line.startswith("2 searchers share study 'tiny@cpu'"):
            study_made.set()

    def open_the_gate() -> None:
        study_made.wait(120)
        storage = open_storage(f"sqlite:///{project}/.autotune/tiny.db")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not both_took_one.exists():
            try:
                trials = optuna.load_study(study_name="tiny@cpu", storage=storage).get_trials(deepcopy=False)
            except Exception:  # SQLite busy with the searchers' writes: look again
                trials = []
            if len({t.user_attrs["searcher"] for t in trials if "searcher" in t.user_attrs}) == 2:
                both_took_one.touch()
            time.sleep(0.1)

    gate = threading.Thread(target=open_the_gate, daemon=True)
    gate.start()
    options = SearchOptions(trials=6, trial_timeout_s=30, finalists=1, rounds=1, parity_check=False)
    result = search_parallel("tiny", options, devices=[0, 0], echo=echo)
    gate.join(timeout=5)
    out = "\n".join(lines)
    assert result is not None, out
    assert any(line.startswith("[") for line in lines) and any(line.startswith("cpu1 | [") for line in lines), out
    study = optuna.load_study(study_name="tiny@cpu", storage=f"sqlite:///{project}/.autotune/tiny.db")
    trials = check_study(study, 6)
    assert len({t.user_attrs["searcher"] for t in trials}) == 2, "both searchers took tickets"
    assert baseline_run.ATTRIBUTE not in study.user_attrs


@pytest.mark.slow
def test_gpus_with_bad_input_ends_its_waiting_searchers_quietly(project: Path) -> None:
    """A bad --fix stops the parent before the study exists: the searcher it started ends without a line."""
    lines: list[str] = []
    options = SearchOptions(trials=4, fixes={"batch_size": (3,)})
    with pytest.raises(SpaceError, match=r"--fix batch_size: 3 is outside its domain "):
        search_parallel("tiny", options, devices=[0, 0], echo=lines.append)
    assert not [line for line in lines if line.startswith("cpu1 |")], lines
    assert not (project / ".autotune").exists(), "nothing written"


@pytest.mark.e2e
@pytest.mark.slow
def test_two_commands_share_one_postgres_study(project: Path, postgres_url: str) -> None:
    """The same `autotune search` on two "hosts": two processes, one PostgreSQL study, one recipe writer."""
    study_name = f"tiny-{uuid.uuid4().hex[:8]}"
    command = [
        sys.executable,
        "-m",
        "autotune",
        "search",
        "--recipe",
        "tiny",
        "--storage",
        postgres_url,
        "--study",
        study_name,
        "--trials",
        "5",
        "--trial-timeout",
        "30",
        "--finalists",
        "1",
        "--rounds",
        "1",
    ]
    # What is shared is under test, not the measurement: short windows keep two searches on two cores brief.
    env = child_env(AUTOTUNE_WINDOW_S="0.05")
    searchers = [
        subprocess.Popen(command, cwd=project, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        for _ in range(2)
    ]
    outputs = [w.communicate(timeout=300)[0] for w in searchers]
    assert [w.returncode for w in searchers] == [0, 0], outputs
    # The other command waits for the writer and then says who wrote it ("searcher vm:N wrote ..."): not a writer.
    wrote = f"wrote {project / 'recipes' / 'tiny.tuned.toml'}"
    writers = [out for out in outputs if any(line.startswith(wrote) for line in out.splitlines())]
    assert len(writers) == 1, outputs
    other = outputs[1 - outputs.index(writers[0])]
    assert f"study {study_name!r} is done; searcher " in other, other
    study = optuna.load_study(study_name=study_name, storage=open_storage(postgres_url))
    try:
        trials = check_study(study, 5)
        assert len({t.user_attrs["searcher"] for t in trials}) == 2, "both searchers took tickets"
        profile = tuned_file.read(project / "recipes" / "tiny.tuned.toml")["profiles"]["cpu"]
        assert profile["study"] == study_name
        assert profile["trials_complete"] + profile["trials_failed"] + profile["trials_pruned"] == 5
    finally:
        optuna.delete_study(study_name=study_name, storage=open_storage(postgres_url))


def test_a_searcher_on_other_hardware_is_refused(project: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/other.db"
    study = optuna.create_study(storage=open_storage(url), study_name="shared", direction="maximize")
    study.set_user_attr("hardware", "NVIDIA H200")
    with pytest.raises(
        SearchError,
        match=r"study 'shared' measures 'NVIDIA H200', but this searcher runs on 'cpu'; "
        r"a study is bound to one hardware model: use another --study for this machine\.",
    ):
        open_study(prepare("tiny", SearchOptions(storage=url, study="shared"), echo=lambda _: None))
    assert study.get_trials() == [], "nothing queued"


def test_a_searcher_with_fewer_cores_than_the_study_share_is_refused(project: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/share.db"
    study = optuna.create_study(storage=open_storage(url), study_name="shared", direction="maximize")
    study.set_user_attr("hardware", "cpu")
    study.set_user_attr("cpu_share", 64)
    with pytest.raises(
        SearchError, match=r"study 'shared' gives each searcher 64 CPU cores, but this searcher has 1; "
    ):
        open_study(prepare("tiny", SearchOptions(storage=url, study="shared", cpu_share=1), echo=lambda _: None))


@pytest.mark.gpu
def test_gpus_0_1_on_two_gpus(project: Path) -> None:
    """The real thing on a host with two GPUs: `--gpus 0,1` from the command line, one study, one recipe."""
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs two CUDA GPUs; this machine has {torch.cuda.device_count()}")
    command = [
        sys.executable,
        "-m",
        "autotune",
        "search",
        "--recipe",
        "tiny",
        "--gpus",
        "0,1",
        "--trials",
        "10",
        "--trial-timeout",
        "60",
        "--finalists",
        "2",
        "--rounds",
        "2",
    ]
    done = subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=600, env=child_env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "this process is gpu0 and writes the tuned file once no trial runs" in done.stdout
    assert "\ngpu1 | [" in done.stdout, done.stdout
    hardware = torch.cuda.get_device_name(0)
    study = optuna.load_study(study_name=f"tiny@{slug(hardware)}", storage=f"sqlite:///{project}/.autotune/tiny.db")
    trials = check_study(study, 10)
    assert len({t.user_attrs["searcher"] for t in trials}) == 2, "both GPUs took tickets"
    profile = tuned_file.read(project / "recipes" / "tiny.tuned.toml")["profiles"][hardware]
    assert profile["cpu_share"] == max(1, len(os.sched_getaffinity(0)) // 2)
