"""An answer every time: when nothing faster may win, the tuned file keeps the workload's own settings and says why.

The trials and parity runs are faked (tests/study/test_search.py's FakePool); the check, the choice and the
profile are the real ones.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from study.test_search import FakePool

from autotune.config import Config
from autotune.options import SearchOptions
from autotune.parity.run import ParityRun
from autotune.procs.trial_process import Outcome
from autotune.study import SearchError, pools, search
from autotune.tuned import file as tuned_file

pytestmark = pytest.mark.steady
BASELINE = Config(batch_size=16)


def _rate(config: Config) -> float:
    """Only another batch size runs faster: every config that may win without a check is as fast as the baseline."""
    return 2000.0 if config.batch_size != 16 else 1000.0


def _parity(losses: dict[bool, float], initial: float = 2.0) -> object:
    """A parity run whose loss is `losses[same batch as the baseline's]`."""

    def parity_run(self: FakePool, config: Config, lr: float, samples: int, probe_batch: int,
                   timeout_s: float, probe_samples: int | None = None) -> Outcome:
        loss = losses[config.batch_size == 16]
        return Outcome("complete", result=ParityRun(config.batch_size, lr, initial, loss, (samples,), (loss,), True,
                                                    0.1).as_dict())

    return parity_run


@pytest.fixture
def fake_pool(monkeypatch: pytest.MonkeyPatch) -> type[FakePool]:
    FakePool.runs = []
    monkeypatch.setattr(pools, "TrialPool", FakePool)
    monkeypatch.setattr(FakePool, "rate", staticmethod(_rate))
    return FakePool


def test_every_faster_config_rejected_keeps_the_workloads_own_settings(
    project: Path, fake_pool: type[FakePool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(FakePool, "parity_run", _parity({True: 1.0, False: 1.6}))  # other batches train worse
    lines: list[str] = []
    made = search("tiny", SearchOptions(trials=8, finalists=1, rounds=1), echo=lines.append).profile
    assert tuned_file.knobs_to_config(made["knobs"]) == BASELINE and made["speedup"] == 1.0
    checked = made["parity"]["configs_checked"]
    assert made["parity"]["configs_rejected"] == checked > 0
    why = (f"no config faster than the baseline trains like it: all {checked} checked, the fastest first, were "
           f"rejected; to search further, narrow the search (e.g. --fix batch_size=16) or try --lr-scaling")
    assert made["parity"]["reason"] == f"kept the workload's own settings: {why}"
    assert f"keeping the workload's own settings: {why}; measuring them, 1 round(s), fresh processes" in lines
    assert f"parity: kept the workload's own settings (1.0x is the answer): {why}" in lines
    assert tuned_file.read(project / "recipes" / "tiny.tuned.toml")["profiles"]["cpu"] == made


def test_a_check_that_can_judge_nothing_faster_keeps_the_workloads_own_settings(
    project: Path, fake_pool: type[FakePool], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Random labels: the baseline's loss does not move from the untrained model's, so no other math can be judged.
    monkeypatch.setattr(FakePool, "parity_run", _parity({True: 1.386, False: 1.386}, initial=1.386))
    lines: list[str] = []
    made = search("tiny", SearchOptions(trials=8, finalists=1, rounds=1), echo=lines.append).profile
    assert tuned_file.knobs_to_config(made["knobs"]) == BASELINE and made["speedup"] == 1.0
    parity = made["parity"]
    assert (parity["passed"], parity["conclusive"], parity["family"]) == (True, False, "loader")
    assert parity["reason"].startswith("kept the workload's own settings: the parity check is inconclusive (the "
                                       "baseline learned too little in it to judge by)")


def test_a_failed_baseline_parity_run_keeps_the_workloads_own_settings(
    project: Path, fake_pool: type[FakePool], monkeypatch: pytest.MonkeyPatch
) -> None:
    def parity_run(self: FakePool, *args: object, **kwargs: object) -> Outcome:
        return Outcome("failed", reason="crashed: trial process killed by signal SIGSEGV")

    monkeypatch.setattr(FakePool, "parity_run", parity_run)
    made = search("tiny", SearchOptions(trials=8, finalists=1, rounds=1), echo=lambda line: None).profile
    assert tuned_file.knobs_to_config(made["knobs"]) == BASELINE and made["speedup"] == 1.0
    assert made["parity"]["conclusive"] is False
    assert made["parity"]["reason"].startswith(
        "kept the workload's own settings: the parity check could not judge any faster config: the baseline's "
        "parity run failed: ")


def test_a_search_whose_baseline_never_completed_says_why(
    project: Path, fake_pool: type[FakePool], monkeypatch: pytest.MonkeyPatch
) -> None:
    def run(self: FakePool, config: Config, *args: object, **kwargs: object) -> Outcome:
        return Outcome("pruned", reason="pruned", windows=(1.0,))

    monkeypatch.setattr(FakePool, "run", run)
    with pytest.raises(SearchError, match=r"^no trial completed in study 'tiny@cpu': 0 failed and 3 were stopped "
                                          r"early, the baseline's among them; the lines above give each reason\.$"):
        search("tiny", SearchOptions(trials=3), echo=lambda line: None)


def test_a_rerun_after_a_failed_write_reuses_the_verdicts_and_rounds(
    project: Path, fake_pool: type[FakePool], monkeypatch: pytest.MonkeyPatch
) -> None:
    parity_runs: list[Config] = []
    passing = _parity({True: 1.0, False: 1.0})

    def parity_run(self: FakePool, config: Config, *args: object, **kwargs: object) -> Outcome:
        parity_runs.append(config)
        return passing(self, config, *args, **kwargs)  # type: ignore[operator]

    monkeypatch.setattr(FakePool, "parity_run", parity_run)
    write_profile = tuned_file.write_profile

    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tuned_file, "write_profile", full_disk)
    options = SearchOptions(trials=6, finalists=1, rounds=1)
    with pytest.raises(OSError, match="No space left on device"):
        search("tiny", options, echo=lambda line: None)
    measured, checked = len(FakePool.runs), len(parity_runs)
    assert checked > 0
    monkeypatch.setattr(tuned_file, "write_profile", write_profile)
    lines: list[str] = []
    made = search("tiny", options, echo=lines.append).profile
    assert (len(FakePool.runs), len(parity_runs)) == (measured, checked), "nothing measured or checked again"
    assert ("finalists: reusing the parity verdicts and rounds of the run whose tuned file was not written; nothing "
            "is measured again") in lines
    assert made["knobs"]["batch_size"] != 16 and made["parity"]["passed"] is True and made["speedup"] == 2.0
    # Written: the next run of the same command checks and measures afresh.
    search("tiny", options, echo=lambda line: None)
    assert len(parity_runs) > checked


def _failing_write(monkeypatch: pytest.MonkeyPatch) -> object:
    """Make the tuned file's write fail as a full disk does; returns the real write, to put back."""
    write_profile = tuned_file.write_profile

    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tuned_file, "write_profile", full_disk)
    return write_profile


def test_a_rerun_of_the_same_command_after_a_failed_write_runs_no_trial(
    project: Path, fake_pool: type[FakePool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first run's budget ended its trials short of the target; the rerun's fresh budget must not measure more
    trials that its reused end would then ignore."""
    from autotune.study import trials

    monkeypatch.setattr(FakePool, "parity_run", _parity({True: 1.0, False: 1.0}))
    out_of_time = trials.out_of_time
    monkeypatch.setattr(trials, "out_of_time", lambda setup, *spent: len(FakePool.runs) >= 3)  # budget spent
    write_profile = _failing_write(monkeypatch)
    options = SearchOptions(trials=8, finalists=1, rounds=1)
    with pytest.raises(OSError, match="No space left on device"):
        search("tiny", options, echo=lambda line: None)
    measured = list(FakePool.runs)
    monkeypatch.setattr(trials, "out_of_time", out_of_time)  # the rerun's budget is whole again
    monkeypatch.setattr(tuned_file, "write_profile", write_profile)
    lines: list[str] = []
    made = search("tiny", options, echo=lines.append).profile
    assert FakePool.runs == measured, "no trial and no round measured again"
    assert ("resuming study 'tiny@cpu': 3 trial(s) already finished; its tuned file was not written, so this run "
            "writes it from them and runs no trial") in lines
    assert ("finalists: reusing the parity verdicts and rounds of the run whose tuned file was not written; nothing "
            "is measured again") in lines
    assert not any(line.startswith("[") for line in lines), lines
    assert made["knobs"]["batch_size"] != 16 and made["speedup"] == 2.0


def test_a_rerun_that_measures_trials_after_a_failed_write_measures_its_end_afresh(
    project: Path, fake_pool: type[FakePool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rerun asking for more trials measures them; the end then comes from every trial, and says so, even when
    none of the new trials completed."""
    monkeypatch.setattr(FakePool, "parity_run", _parity({True: 1.0, False: 1.0}))
    write_profile = _failing_write(monkeypatch)
    with pytest.raises(OSError, match="No space left on device"):
        search("tiny", SearchOptions(trials=4, finalists=1, rounds=1), echo=lambda line: None)
    monkeypatch.setattr(tuned_file, "write_profile", write_profile)
    run = FakePool.run

    def trials_fail(self: FakePool, config: Config, lr: float, windows: object = None, on_window: object = None,
                    **kwargs: object) -> Outcome:
        if on_window is None:  # a finalist's round, not a trial
            return run(self, config, lr, windows, on_window, **kwargs)  # type: ignore[arg-type]
        return Outcome("failed", reason="error: RuntimeError: boom")

    monkeypatch.setattr(FakePool, "run", trials_fail)
    lines: list[str] = []
    search("tiny", SearchOptions(trials=6, finalists=1, rounds=1), echo=lines.append)
    trial_lines = [line for line in lines if line.startswith("[")]
    assert len(trial_lines) == 2 and all("failed: error: RuntimeError: boom" in line for line in trial_lines)
    assert not any("reusing" in line for line in lines), lines
    assert "finalists: measuring 1 config(s) against the baseline, 1 round(s), fresh processes" in lines


def test_the_trials_reserve_the_pools_measured_process_start_for_the_rounds(
    project: Path, fake_pool: type[FakePool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each time the trials ask the clock, they pass the longest start-up the trial pool's processes reported; a
    search whose round processes started with the trials (--gpus) passes none."""
    from autotune.study import trials

    monkeypatch.setattr(FakePool, "parity_run", _parity({True: 1.0, False: 1.0}))
    monkeypatch.setattr(FakePool, "startup_s", 15.0)
    asked: list[float] = []

    def out_of_time(setup: object, spent: float = 0.0, gradients_s: float = 0.0, start_s: float = 0.0) -> bool:
        asked.append(start_s)
        return len(FakePool.runs) >= 2

    monkeypatch.setattr(trials, "out_of_time", out_of_time)
    search("tiny", SearchOptions(trials=8, finalists=1, rounds=1), echo=lambda line: None)
    assert asked and set(asked) == {15.0}
    writer, searcher = SimpleNamespace(options=SearchOptions()), SimpleNamespace(options=SearchOptions(
        write_tuned_file=False))
    assert trials.round_start_s(writer, 15.0, ()) == 15.0  # type: ignore[arg-type]
    assert trials.round_start_s(searcher, 15.0, ()) == 0.0, "it runs no round"  # type: ignore[arg-type]
    assert trials.round_start_s(writer, 15.0, ("cuda:1",)) == 0.0, "under --gpus"  # type: ignore[arg-type]
