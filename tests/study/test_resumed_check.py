"""A search stopped in its finalist rounds and run again reaches the parity verdicts and the winner it would have.

The trials and the parity runs are faked (tests/study/test_search.py's FakePool); the check, the study and the
search are the real ones. The workload is tests/fixtures/random_labels.py for its 8,192 samples alone: batch sizes
up to 1024 (64x its own) fit its space, and no parity run trains on them here. The fake baseline learns enough to
judge by in 8,192 samples, the length of a check sized for batch 1024, and too little in fewer; batch 1024 runs out
of memory, so it is never a contender. Before the verdicts were kept in the study, the rerun's check was sized for
the largest contender (batch 256, 2,048 samples), found itself inconclusive, rejected both faster batches and kept
the workload's own settings (the issue's 43,819 samples against 65,536 on an H200).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import optuna
import pytest
from study.test_search import FakePool

from autotune.config import Config
from autotune.options import SearchOptions
from autotune.parity.run import ParityRun
from autotune.procs.trial_process import Outcome
from autotune.study import pools, rounds, search, trials
from autotune.study.checks.families import SKIPPED, FamilyGate
from autotune.study.setup import open_study, prepare

pytestmark = pytest.mark.steady
FIXTURES = Path(__file__).parents[1] / "fixtures"
FIXES: dict[str, tuple[Any, ...]] = {
    "batch_size": (16, 256, 1024),
    "placement": ("stream",),
    "num_workers": (0,),
    "amp": ("off",),
    "channels_last": (False,),
}
LEARNS_FROM = 8192  # samples the fake baseline needs to learn enough to judge by


def _rate(config: Config) -> float:
    # The baseline's 512/s trains 9,216 samples in the 18 s a baseline run may take in an 8-minute search: batch
    # 1024's shortest run (8 steps, 8,192 samples) fits the check's share, and, the largest batch, sets the runs'
    # length. (At 16/s it would not: ParityCheck.batch_limit.)
    return 32.0 * config.batch_size


def _run(self: FakePool, config: Config, lr: float, *args: object, **kwargs: object) -> Outcome:
    FakePool.runs.append(config)
    if config.batch_size >= 1024:
        return Outcome("oom", reason="oom: CUDA out of memory. Tried to allocate 2.00 GiB")
    rate = _rate(config)
    result = dict(samples_per_s=rate, steady_samples_per_s=rate, spread=0.01, step_s=config.batch_size / rate,
                  epoch_s=8192 / rate, setup_s=0.5, materialize_s=0.0, stopped_early=False)
    return Outcome("complete", result=result, windows=(rate,))


def _parity_run(self: FakePool, config: Config, lr: float, samples: int, probe_batch: int,
                timeout_s: float, probe_samples: int | None = None) -> Outcome:
    FakePool.parity.append((config.batch_size, samples))
    loss = 1.8 if samples >= LEARNS_FROM else 1.99  # 10% of the initial loss learned, or 0.5%: under MIN_PROGRESS
    return Outcome("complete", result=ParityRun(config.batch_size, lr, 2.0, loss, (samples,), (loss,), True,
                                                0.01).as_dict())


@pytest.fixture
def fakes(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copy(FIXTURES / "random_labels.py", project / "recipes" / "random_labels.py")
    FakePool.runs, FakePool.parity = [], []
    monkeypatch.setattr(pools, "TrialPool", FakePool)
    monkeypatch.setattr(FakePool, "run", _run)
    monkeypatch.setattr(FakePool, "parity_run", _parity_run, raising=False)
    return project


def _options(study: str) -> SearchOptions:
    return SearchOptions(trials=6, fixes=FIXES, finalists=2, rounds=1, cpu_share=1, study=study)


def _verdicts(project: Path, study: str) -> dict[str, dict[str, Any]]:
    """The verdicts kept on the study, by config, without the seconds a run took."""
    kept = optuna.load_study(study_name=study, storage=f"sqlite:///{project / '.autotune' / 'random_labels.db'}")
    return {v["config"]: {k: x for k, x in v.items() if k != "run_s"}
            for k, v in kept.user_attrs.items() if k.startswith("parity:trial-")}


def test_a_search_stopped_in_its_rounds_reaches_the_same_verdicts_and_winner_when_run_again(
    fakes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = search("random_labels", _options("whole"), echo=lambda line: None).profile
    assert whole["knobs"]["batch_size"] == 256 and whole["parity"]["passed"] is True
    assert set(FakePool.parity) == {(16, 8192), (256, 8192)}

    measure = rounds.measure_rounds
    stop = [True]

    def measured_rounds(*args: Any, **kwargs: Any) -> Any:
        if stop:
            stop.clear()
            raise KeyboardInterrupt  # as SIGTERM lands in the rounds (autotune.procs.lifecycle.stop_on_signals)
        return measure(*args, **kwargs)

    monkeypatch.setattr(rounds, "measure_rounds", measured_rounds)
    with pytest.raises(KeyboardInterrupt):
        search("random_labels", _options("stopped"), echo=lambda line: None)

    FakePool.parity = []
    lines: list[str] = []
    again = search("random_labels", _options("stopped"), echo=lines.append).profile
    assert again["knobs"] == whole["knobs"]
    assert FakePool.parity == [], "the verdicts were kept: no parity run is made again"
    assert any(line.startswith("parity: taking up the check an earlier run of this search made") for line in lines)
    assert {k: v for k, v in again["parity"].items() if k != "check_s"} == {
        k: v for k, v in whole["parity"].items() if k != "check_s"}
    assert _verdicts(fakes, "stopped") == _verdicts(fakes, "whole")


def _rejecting_256(self: FakePool, config: Config, lr: float, samples: int, probe_batch: int,
                   timeout_s: float, probe_samples: int | None = None) -> Outcome:
    if config.batch_size < 256:
        return _parity_run(self, config, lr, samples, probe_batch, timeout_s)
    FakePool.parity.append((config.batch_size, samples))  # far behind the baseline's 1.8 at every rate
    return Outcome("complete", result=ParityRun(config.batch_size, lr, 2.0, 1.95, (samples,), (1.95,), True,
                                                0.01).as_dict())


def test_a_search_stopped_in_its_trials_skips_what_the_kept_verdicts_ruled_out_from_its_first_trial_on(
    fakes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(FakePool, "parity_run", _rejecting_256, raising=False)
    whole = search("random_labels", _options("whole"), echo=lambda line: None).profile
    assert whole["knobs"]["batch_size"] == 16 and whole["parity"]["configs_rejected"] == 1

    run_trial = trials._run_trial
    ran: list[object] = []

    def stopped_after_trial_2(*args: Any, **kwargs: Any) -> None:
        run_trial(*args, **kwargs)
        ran.append(args)
        if len(ran) == 3:
            raise KeyboardInterrupt  # as SIGTERM lands between trials, after batch 256 was judged

    FakePool.parity = []
    monkeypatch.setattr(trials, "_run_trial", stopped_after_trial_2)
    with pytest.raises(KeyboardInterrupt):
        search("random_labels", _options("stopped"), echo=lambda line: None)
    assert [b for b, _ in FakePool.parity] == [16, 256, 256, 256], "the baseline, then batch 256 at three rates"
    monkeypatch.setattr(trials, "_run_trial", run_trial)

    # Before the rerun's first trial, its family gate rules out what the kept verdicts ruled out, running nothing.
    FakePool.runs, FakePool.parity = [], []
    setup = open_study(prepare("random_labels", _options("stopped"), echo=lambda line: None))
    gate = FamilyGate()
    gate.take_up(setup, FakePool())
    assert (gate.why_skip(setup, Config(batch_size=1024)) or "").startswith(f"{SKIPPED}: batch 256 learned too little")
    assert gate.summary() == "parity: 1 math family(ies) judged during the trials, 1 rejected"

    lines: list[str] = []
    again = search("random_labels", _options("stopped"), echo=lines.append).profile
    assert FakePool.parity == [] and Config(batch_size=1024) not in FakePool.runs
    assert "parity: 1 math family(ies) judged during the trials, 1 rejected" in lines, "the rejection stands"
    assert again["knobs"] == whole["knobs"]
    assert _verdicts(fakes, "stopped") == _verdicts(fakes, "whole")
