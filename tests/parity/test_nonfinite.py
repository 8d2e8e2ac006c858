"""A parity run whose loss became NaN: the baseline's ends the check with the workload's own settings kept and why; a
candidate's rejects that candidate, naming the step.

The trials are faked (tests/study/test_search.py's FakePool: only another batch size runs faster); the parity runs
are real ones, made in this process on tests/fixtures/tiny.py with TINY_FAIL=nan, whose output becomes NaN from a
given training step on. The check, the choice and the profile are the real ones.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
from study.test_search import FakePool

from autotune.config import Config
from autotune.options import SearchOptions
from autotune.parity.run import PROBE_SAMPLES, probe, train
from autotune.procs.trial_process import Outcome
from autotune.study import SearchError, pools, search
from autotune.trial.runner import Runner
from autotune.tuned import file as tuned_file
from autotune.workloads import load, resolve

pytestmark = pytest.mark.steady  # a tiny model in this process, on one thread
BASELINE = Config(batch_size=16)
DIVERGED = ("the baseline's loss became NaN at step 37: the workload's own settings diverge; fix the workload (its "
            "learning rate, its data)")


PARITY_RUNS: list[Config] = []


@functools.cache
def _runner(folder: str) -> Runner:  # noqa: ARG001 (one per project folder: its data set)
    return Runner(load(resolve("tiny")), torch.device("cpu"))


def _real_parity_run(self: FakePool, config: Config, lr: float, samples: int, probe_batch: int,
                     timeout_s: float, probe_samples: int | None = None) -> Outcome:
    """The parity run a trial process makes, made here: the workload's real losses, NaN where it diverges."""
    runner = _runner(str(Path.cwd()))
    probe_set = probe(runner.dataset, samples=probe_samples or PROBE_SAMPLES)
    made = train(runner.build, config, lr, samples, probe_set, probe_batch, runner.workload.count)
    PARITY_RUNS.append(config)
    return Outcome("complete", result=made.as_dict())


@pytest.fixture
def real_parity(project: Path, monkeypatch: pytest.MonkeyPatch) -> type[FakePool]:
    FakePool.runs = []
    PARITY_RUNS.clear()
    monkeypatch.setattr(pools, "TrialPool", FakePool)
    monkeypatch.setattr(FakePool, "rate", staticmethod(lambda c: 2000.0 if c.batch_size != 16 else 1000.0))
    monkeypatch.setattr(FakePool, "parity_run", _real_parity_run)
    monkeypatch.setenv("TINY_FAIL", "nan")
    monkeypatch.setenv("TINY_NAN_STEP", "37")
    return FakePool


def test_a_baseline_whose_loss_becomes_nan_ends_the_check_and_the_search_keeps_its_settings(
    real_parity: type[FakePool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TINY_NAN_BATCH", "1")  # every batch size diverges at its 37th step: the workload's own too
    lines: list[str] = []
    options = SearchOptions(trials=4, finalists=1, rounds=1, fixes={"batch_size": (16, 64)})
    made = search("tiny", options, echo=lines.append).profile
    assert tuned_file.knobs_to_config(made["knobs"]) == BASELINE and made["speedup"] == 1.0
    assert made["parity"]["conclusive"] is False
    why = f"the parity check could not judge any faster config: {DIVERGED}"
    assert made["parity"]["reason"] == f"kept the workload's own settings: {why}"
    assert f"parity: kept the workload's own settings (1.0x is the answer): {why}" in lines
    assert [c.batch_size for c in PARITY_RUNS] == [16], "the baseline ran once: not longer, and no candidate"
    assert not [line for line in lines if "nan%" in line or "learned" in line], lines


def test_a_candidate_whose_loss_becomes_nan_is_rejected_naming_the_step(real_parity: type[FakePool]) -> None:
    lines: list[str] = []
    options = SearchOptions(trials=4, finalists=1, rounds=1, fixes={"batch_size": (16, 64)})
    made = search("tiny", options, echo=lines.append).profile
    assert tuned_file.knobs_to_config(made["knobs"]) == BASELINE and made["speedup"] == 1.0
    rejected = [line for line in lines if line.startswith("  parity REJECT")]
    # Batch 64 trains 128 steps of 64 samples: NaN from the 37th, at each of the rates it is tried at.
    assert rejected and all(line.startswith("  parity REJECT  its loss became NaN at step 37 (2,368 samples in)")
                            for line in rejected), lines
    assert made["parity"]["reason"].startswith("kept the workload's own settings: no config faster than the baseline "
                                               "trains like it")


def test_a_search_whose_baseline_trial_diverged_names_the_step_and_stops(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def run(self: FakePool, config: Config, *args: object, **kwargs: object) -> Outcome:
        return Outcome("failed", reason=f"the loss became NaN at step 3 ({config.describe()})")

    monkeypatch.setattr(pools, "TrialPool", FakePool)
    monkeypatch.setattr(FakePool, "run", run)
    with pytest.raises(SearchError, match=r"^the workload's own settings \(bs=16 workers=0\) fail: the loss became NaN "
                                          r"at step 3 \(bs=16 workers=0\)\. Fix the workload first; "):
        search("tiny", SearchOptions(trials=3), echo=lambda line: None)
