"""Parity inside the search: a family judged once, never measured again once rejected, and the batch sizes between.

The trials and the parity runs are faked (tests/study/test_search.py's FakePool, with a fake rate table: a larger
batch runs faster); the family gate, the check and the search are the real ones.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from study.test_search import FakePool

from autotune.config import Config
from autotune.options import SearchOptions
from autotune.parity.run import ParityRun
from autotune.procs.trial_process import Outcome
from autotune.study import pools, search, standing
from autotune.study.checks.families import SKIPPED, math_family
from autotune.study.setup import open_study, prepare

pytestmark = pytest.mark.steady
TOO_LARGE = 64  # batches above this train too differently at every learning rate


def _rate(config: Config) -> float:
    return config.batch_size * 100.0 + (50.0 if config.placement == "device" else config.num_workers * 10.0)


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Config]]:
    """("trial", config) and ("parity", config) in the order the search made them."""
    seen: list[tuple[str, Config]] = []
    FakePool.runs = []
    monkeypatch.setattr(pools, "TrialPool", FakePool)
    monkeypatch.setattr(FakePool, "rate", staticmethod(_rate))
    measure = FakePool.run

    def run(self: FakePool, config: Config, *args: object, **kwargs: object) -> Outcome:
        seen.append(("trial", config))
        return measure(self, config, *args, **kwargs)

    def parity_run(self: FakePool, config: Config, lr: float, samples: int, probe_batch: int,
                   timeout_s: float, probe_samples: int | None = None) -> Outcome:
        seen.append(("parity", config))
        loss = 1.6 if config.batch_size > TOO_LARGE else 1.0
        return Outcome("complete", result=ParityRun(config.batch_size, lr, 2.0, loss, (samples,), (loss,), True,
                                                    0.1).as_dict())

    monkeypatch.setattr(FakePool, "run", run)
    monkeypatch.setattr(FakePool, "parity_run", parity_run)
    return seen


def test_a_rejected_family_is_never_checked_or_measured_again_and_the_batches_between_are_tried(
    project: Path, events: list[tuple[str, Config]]
) -> None:
    lines: list[str] = []
    made = search("tiny", SearchOptions(trials=24, seed=1, finalists=1, rounds=1), echo=lines.append).profile
    baseline = Config(batch_size=16)
    checked = [c for kind, c in events if kind == "parity" and c != baseline]
    rejected = {math_family(c) for c in checked if c.batch_size > TOO_LARGE}
    assert rejected, "a batch above 64 became a contender and was checked"
    for family in rejected:
        runs = [i for i, (kind, c) in enumerate(events) if kind == "parity" and math_family(c) == family]
        # One check of the family: its runs (one per learning rate) back to back, once; no trial of it after them.
        assert runs == list(range(runs[0], runs[0] + len(runs))) and len(runs) <= 3, family
        assert not [c for kind, c in events[runs[-1]:] if kind == "trial" and math_family(c) == family]
    setup = open_study(prepare("tiny", SearchOptions(trials=24), echo=lambda line: None))
    trials = setup.study.get_trials()
    skipped = [t for t in trials if str(t.user_attrs.get("reason") or "").startswith(SKIPPED)]
    assert all(t.state.name == "PRUNED" and "duration_s" not in t.user_attrs for t in skipped)
    # The first batch rejected at every rate sends the search to the batch sizes between it and 16, nearest first.
    between = [t for t in trials if "between_of" in t.user_attrs]
    said = [line for line in lines if line.startswith("  parity: batch ") and "fails at every rate" in line]
    assert said and said[0].endswith("; trying batch 32, 64 next")
    assert [setup.config_of(t).batch_size for t in between][:2] == [32, 64]
    assert all(t.state.name == "COMPLETE" for t in between[:2])
    assert made["knobs"]["batch_size"] == 64 and made["parity"]["passed"] is True
    # From the first rejection on, the best each trial line states is one that can still win: none above batch 64.
    first = next(i for i, line in enumerate(lines) if "fails at every rate" in line)
    can_win = max(_rate(setup.config_of(t)) for t in trials
                  if t.state.name == "COMPLETE" and setup.config_of(t).batch_size <= TOO_LARGE)
    said = [re.search(r"best ([\d,]+)/s", line) for line in lines[first:]]
    said_best = [float(m.group(1).replace(",", "")) for m in said if m]
    assert said_best and max(said_best) <= can_win
    # The tuned file written, the next run of the same command judges every family afresh.
    assert standing.rejected_families(setup.study) == []


def test_an_inconclusive_check_sends_the_search_to_same_math_twins_of_the_skipped_seeds(
    project: Path, events: list[tuple[str, Config]], monkeypatch: pytest.MonkeyPatch
) -> None:
    def flat(self: FakePool, config: Config, lr: float, samples: int, probe_batch: int, timeout_s: float,
             probe_samples: int | None = None) -> Outcome:
        # Random labels: nothing is learned, so the check can judge no other math.
        return Outcome("complete", result=ParityRun(config.batch_size, lr, 1.386, 1.386, (samples,), (1.386,), True,
                                                    0.1).as_dict())

    def no_numerics(self: FakePool, *args: object) -> Outcome:
        return Outcome("failed", reason="error: RuntimeError: no gradients here")  # amp cannot pass either

    monkeypatch.setattr(FakePool, "parity_run", flat)
    monkeypatch.setattr(FakePool, "numerics_check", no_numerics, raising=False)
    made = search("tiny", SearchOptions(trials=8, finalists=1, rounds=1), echo=lambda line: None).profile
    setup = open_study(prepare("tiny", SearchOptions(trials=8), echo=lambda line: None))
    trials = setup.study.get_trials()
    skipped = [setup.config_of(t) for t in trials if str(t.user_attrs.get("reason") or "").startswith(SKIPPED)]
    assert Config(batch_size=128, placement="device") in skipped
    twins = {t.user_attrs["same_math_of"]: setup.config_of(t) for t in trials if "same_math_of" in t.user_attrs}
    # bf16 at the baseline's batch is judged by its gradients, with no run, so the baseline's parity run waits for
    # batch 128 on the device in bf16, measured by then. The first seed skipped (batch 128 on the device in fp32)
    # sends the search to the data set on the device, in fp32, at the baseline's batch: measured next, and the
    # winner (1,650/s over 1,600).
    assert twins == {"bs=128 device-resident": Config(batch_size=16, placement="device")}
    assert ("trial", Config(batch_size=16, placement="device")) in events
    assert made["knobs"]["placement"] == "device" and made["knobs"]["batch_size"] == 16
    assert made["knobs"]["amp"] == "off" and made["parity"]["conclusive"] is False
