"""A seed that failed for one knob value is measured again without it (tests/study/test_search.py's FakePool fails
every config with channels_last on, as the seed's model does with its `view`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from study.test_search import FakePool, fake_pool  # noqa: F401 (fake_pool: trials without processes)

from autotune.config import Config
from autotune.options import SearchOptions
from autotune.study import search
from autotune.study.failed.hopeless import Hopeless
from autotune.study.failed.seed_retry import without
from autotune.study.setup import open_study, prepare

pytestmark = pytest.mark.steady


def test_a_hopeless_value_takes_the_baselines_value_and_the_rest_is_kept() -> None:
    hopeless = [Hopeless((("cuda_graph", True),), (3,), "host sync"), Hopeless((("channels_last", True),), (4, 5), "x")]
    seed = {"batch_size": 128, "placement": "device", "cuda_graph": True, "amp": "bf16", "channels_last": False}
    assert without(seed, hopeless, Config(batch_size=16)) == {**seed, "cuda_graph": False}
    assert without({"batch_size": 16}, hopeless, Config(batch_size=16)) == {"batch_size": 16}


@pytest.mark.usefixtures("fake_pool")
def test_seeds_that_failed_for_channels_last_are_measured_without_it(project: Path) -> None:
    lines: list[str] = []
    search("tiny", SearchOptions(trials=14, seed=3, finalists=1, rounds=1), echo=lines.append)
    setup = open_study(prepare("tiny", SearchOptions(trials=14), echo=lambda line: None))
    trials = setup.study.get_trials()
    failed_seeds = [t for t in trials if t.user_attrs.get("role") == "seed" and t.state.name == "FAIL"]
    assert len(failed_seeds) == 2, "channels_last is blamed after two failures"
    assert all(setup.config_of(t).channels_last for t in failed_seeds)
    retried = {t.user_attrs["retry_of_seed"]: setup.config_of(t) for t in trials if "retry_of_seed" in t.user_attrs}
    assert retried == {t.number: dataclasses.replace(setup.config_of(t), channels_last=False) for t in failed_seeds}
    measured = [c for c in FakePool.runs]
    assert all(c in measured for c in retried.values()), "each variant was measured"
    # The seed still queued when channels_last was blamed is queued without it, not skipped.
    assert not any(line.startswith("[") and "skipped: channels_last" in line for line in lines)
