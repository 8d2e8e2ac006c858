"""The parity check keeps to its share of the search's budget: its runs are sized to fit it and stopped at it.

On a busy 2-core host, a `--time-budget 60` mnist_cnn search's check was sized for batch 8192 (65,536 samples) and
its baseline's run took 116.8 s of its 9 s. The runs here are faked (tests/study/test_search.py's FakePool, a
ParityCheck's `make_run`); the check, its sizing and the search's timeouts are the real ones.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest
from study.test_search import FakePool

from autotune.config import Config
from autotune.options import SearchOptions
from autotune.parity.check import ParityCheck
from autotune.parity.run import ParityRun
from autotune.parity.verdict import ParityRunOutOfTime
from autotune.procs.trial_process import Outcome
from autotune.study import pools, search

FIXTURES = Path(__file__).parents[1] / "fixtures"
BASE = Config(batch_size=64)


def _learned(config: Config, lr: float, samples: int) -> ParityRun:
    """A run that learned a tenth of its initial loss, as the baseline's: every config trains alike."""
    return ParityRun(config.batch_size, lr, 2.0, 1.8, (samples,), (1.8,), True, 0.01)


def test_the_runs_are_sized_for_the_largest_batch_whose_shortest_run_fits_the_share_and_no_larger_one_runs() -> None:
    runs: list[tuple[int, int]] = []

    def make_run(config: Config, lr: float, samples: int) -> ParityRun:
        runs.append((config.batch_size, samples))
        return _learned(config, lr, samples)

    # A 60 s search: a 9 s share, a quarter of it (2.25 s) for the baseline's run, at its trial's 600 samples/s.
    check = ParityCheck(BASE, lambda c: 0.1, make_run, [], echo=lambda line: None, max_batch=8192,
                        baseline_rate=600.0, budget_s=9.0)
    # 1,350 samples in 2.25 s: 8 steps of batch 168; but the baseline's shortest run (64 of its batches, 4,096
    # samples), made anyway, holds 8 steps of batch 512. Held to 168, a 90 s mnist_cnn search on a busy 2-core host
    # left batch 1024 unjudged beside its baseline's 64 batches of 128.
    assert check.batch_limit == 512
    assert check.samples == 4096  # the baseline's 64 steps of its batch, its shortest run: 6.8 s of the 9 s
    assert check.samples / 600.0 <= 9.0

    large, small = dataclasses.replace(BASE, batch_size=8192), dataclasses.replace(BASE, batch_size=128)
    # During the trials, the search skips it: a trial of a config that cannot win is spent for nothing.
    assert check.why_hopeless(large) is not None and "does not fit the check's share" in check.why_hopeless(large)
    assert check.why_hopeless(small) is None
    assert check.select([large, small], want=2, max_runs=4) == [small]
    assert runs == [(64, 4096), (128, 4096)], "batch 8192 is not run, nor sized for"
    verdict = check.verdicts[large]
    assert not verdict.passed and not verdict.conclusive
    assert verdict.reason == (
        "it changes batch_size, and its shortest run (8 steps: 65,536 samples, 109.2 s at the baseline's 600 "
        "samples/s) does not fit the check's share of the time budget (9 s): cannot be judged"
    )


def test_a_candidate_s_run_stopped_at_the_share_is_unjudged_not_rejected() -> None:
    def make_run(config: Config, lr: float, samples: int) -> ParityRun:
        if config.batch_size != BASE.batch_size:
            raise ParityRunOutOfTime("timeout: no result within 2 s, what was left of the check's share")
        return _learned(config, lr, samples)

    check = ParityCheck(BASE, lambda c: 0.1, make_run, [], echo=lambda line: None, max_batch=128,
                        baseline_rate=600.0, budget_s=9.0)
    larger = dataclasses.replace(BASE, batch_size=128)
    assert check.select([larger], want=1, max_runs=1) == []
    verdict = check.verdicts[larger]
    assert (verdict.passed, verdict.conclusive) == (False, False)
    assert verdict.reason == "timeout: no result within 2 s, what was left of the check's share"


def test_without_a_budget_the_runs_are_sized_for_the_largest_batch_as_before() -> None:
    check = ParityCheck(BASE, lambda c: 0.1, _learned, [], echo=lambda line: None, max_batch=8192,
                        baseline_rate=600.0)
    assert check.samples == 65536


@pytest.fixture
def busy(project: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, float]]:
    """A search whose parity runs all need 116.8 s, as the baseline's did on the busy host: each times out at the
    limit it is given. Returns each run's (batch, timeout)."""
    shutil.copy(FIXTURES / "random_labels.py", project / "recipes" / "random_labels.py")
    asked: list[tuple[int, float]] = []

    def parity_run(self: FakePool, config: Config, lr: float, samples: int, probe_batch: int,
                   timeout_s: float, probe_samples: int | None = None) -> Outcome:
        asked.append((config.batch_size, timeout_s))
        if timeout_s < 116.8:
            return Outcome("failed", reason=f"timeout: no result within {timeout_s:.0f} s")
        return Outcome("complete", result=_learned(config, lr, samples).as_dict())

    FakePool.runs = []
    monkeypatch.setattr(pools, "TrialPool", FakePool)
    monkeypatch.setattr(FakePool, "parity_run", parity_run)
    return asked


def test_the_baseline_s_run_is_stopped_at_the_share_and_a_loader_config_still_wins(busy: list[Any]) -> None:
    fixes = {"batch_size": (16, 256), "placement": ("stream",), "num_workers": (0, 1), "amp": ("off",),
             "channels_last": (False,), "pin_memory": (False,), "cudnn_benchmark": (False,)}
    lines: list[str] = []
    options = SearchOptions(trials=6, fixes=fixes, finalists=2, rounds=1, cpu_share=1, time_budget_s=60.0)
    profile = search("random_labels", options, echo=lines.append).profile

    assert busy == [(16, 9.0)], "the baseline's run alone, given the check's 9 s: no candidate's run follows it"
    assert "parity: inconclusive: the baseline's run was stopped: timeout: no result within 9 s, what was left of " \
           "the check's share (9 s, 15% of the search's budget). Only configs that leave the math unchanged may " \
           "win" in lines
    # Batch 256 changes the math and cannot be judged; a worker at the workload's batch keep it, and win.
    assert profile["knobs"]["batch_size"] == 16 and profile["knobs"]["num_workers"] == 1
    assert profile["parity"]["passed"] is True and profile["parity"]["conclusive"] is False


def test_a_search_whose_contenders_no_run_could_judge_says_so_not_that_they_were_rejected(
    busy: list[Any],
) -> None:
    # A 20 s search: a 3 s share, 0.75 s of it for the baseline's run at its 1,600/s: batch 150 at most. The one
    # faster config is batch 256: not run, unjudged, and the workload's own settings are the answer, for that reason.
    fixes = {"batch_size": (16, 256), "placement": ("stream",), "num_workers": (0,), "amp": ("off",),
             "channels_last": (False,), "pin_memory": (False,), "cudnn_benchmark": (False,)}
    options = SearchOptions(trials=4, fixes=fixes, finalists=2, rounds=1, cpu_share=1, time_budget_s=20.0)
    profile = search("random_labels", options, echo=lambda line: None).profile
    assert busy == [], "no parity run: batch 256's shortest run does not fit the share"
    assert profile["knobs"]["batch_size"] == 16
    assert profile["parity"]["reason"] == (
        "kept the workload's own settings: no config faster than the baseline could be judged within the parity "
        "check's share of the time budget (1 config(s) checked: their runs did not fit it, or were stopped at it); "
        "a longer --time-budget gives the check more"
    )


def test_a_longer_baseline_run_stopped_at_the_share_leaves_the_short_one_standing() -> None:
    runs: list[int] = []

    def make_run(config: Config, lr: float, samples: int) -> ParityRun:
        runs.append(samples)
        if len(runs) > 1:  # the longer run, asked for because the first learned 0.5% of its loss
            raise ParityRunOutOfTime("timeout: no result within 5 s, what was left of the check's share")
        return ParityRun(config.batch_size, lr, 2.0, 1.99, (samples,), (1.99,), True, 0.01)

    check = ParityCheck(BASE, lambda c: 0.1, make_run, [], echo=lambda line: None, max_batch=128)
    larger = dataclasses.replace(BASE, batch_size=128)
    assert check.select([larger], want=1, max_runs=1) == []
    assert runs == [32768, 65536]
    assert (check.samples, check.conclusive, check.base.extended) == (32768, False, False)
    assert check.base.run is not None and check.base.run.samples == 32768
    assert check.why_inconclusive() == ("the baseline's run was stopped: timeout: no result within 5 s, what was "
                                        "left of the check's share")
    assert check.budget.baseline_seconds > 0.0
