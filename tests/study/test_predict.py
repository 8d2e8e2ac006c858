"""Configs that cannot win are not run: the loader's ceiling against the best so far, checked by the trials that ran."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import optuna
import pytest

from autotune.config import Config
from autotune.options import SearchOptions
from autotune.study import search
from autotune.study.planning.predict import LoaderModel

FIXTURES = Path(__file__).parent.parent / "fixtures"


def test_the_ceiling_is_the_cores_the_workers_can_use_over_a_samples_cpu_cost() -> None:
    model = LoaderModel(load_cpu_s=0.002, cores=4, clearly_worse=0.5)
    assert model.ceiling(Config(batch_size=64)) == pytest.approx(500.0)  # the main process loads: one core
    assert model.ceiling(Config(batch_size=64, num_workers=2)) == pytest.approx(1000.0)
    assert model.ceiling(Config(batch_size=64, num_workers=16)) == pytest.approx(2000.0)  # 4 cores, not 16
    assert model.ceiling(Config(batch_size=64, placement="device")) is None  # no loader while it trains
    assert LoaderModel(0.0, 4, 0.5).ceiling(Config(batch_size=64)) is None  # not measured: no bound


def test_a_config_is_skipped_only_below_what_the_pruner_calls_clearly_worse() -> None:
    model = LoaderModel(load_cpu_s=0.002, cores=4, clearly_worse=0.5)
    assert model.why_skip(Config(batch_size=64, num_workers=2), best=None) is None  # nothing to compare with yet
    assert model.why_skip(Config(batch_size=64, num_workers=2), best=2000.0) is None  # 1,000/s: half, not under
    why = model.why_skip(Config(batch_size=64, num_workers=1), best=2000.0)
    assert why == (
        "skipped by prediction: its loader makes at most 500/s (1 core(s) x 500 samples/s each), "
        "under 50% of the best 2,000/s"
    )
    assert model.skipped == 1


def test_a_trial_above_its_ceiling_shows_the_model_wrong_and_nothing_is_skipped_after() -> None:
    model = LoaderModel(load_cpu_s=0.002, cores=4, clearly_worse=0.5)
    assert model.check(Config(batch_size=64, num_workers=1), 480.0) is None  # under its 500/s
    assert model.check(Config(batch_size=64, num_workers=1), 600.0) is None  # within the margin
    line = model.check(Config(batch_size=64, num_workers=1), 700.0)
    assert line == (
        "  prediction: bs=64 workers=1 ran 700/s, above its predicted loader ceiling of 500/s; "
        "no config is skipped by prediction from now on"
    )
    assert model.why_skip(Config(batch_size=64, num_workers=1), best=100_000.0) is None
    assert model.summary().startswith("prediction: found wrong (bs=64 workers=1")


@pytest.mark.e2e  # a whole search in real processes
@pytest.mark.alone  # which trials are skipped follows measured rates
def test_a_search_skips_streaming_configs_whose_loader_cannot_reach_the_best(project: Path) -> None:
    shutil.copy(FIXTURES / "heavy_reads.py", project / "recipes" / "heavy_reads.py")
    lines: list[str] = []
    # The seeds alone: the baseline streams and measures a sample's CPU cost, the four device-resident ones set the
    # best, and the sixth, streaming with every loader knob on, comes after them. Batches of 64 at most: a streamed
    # batch of 128 costs two workers a quarter of a second, and its trial as long as all the others.
    options = SearchOptions(trials=6, finalists=1, rounds=1, trial_timeout_s=60, time_budget_s=None,
                            parity_check=False, fixes={"batch_size": (16, 32, 64)})
    result = search("heavy_reads", options, echo=lines.append)
    out = "\n".join(lines)
    skipped = [line for line in lines if re.search(r"trial \d+ +skipped by prediction +bs=.* its loader makes at most "
                                                     r"[\d,]+/s \(\d+ core\(s\) x [\d,]+ samples/s each\), under 50% "
                                                     r"of the best [\d,]+/s$", line)]
    assert skipped, out
    summary = [line for line in lines if line.startswith("prediction: ")]
    assert len(summary) == 1 and summary[0].startswith(f"prediction: {len(skipped)} config(s) skipped"), out
    # Every streaming trial that ran stayed under its ceiling (the baseline at least ran).
    ran = int(summary[0].split("; ")[1].split(" ")[0])
    assert ran >= 1 and "found wrong" not in out, out
    study = optuna.load_study(
        study_name="heavy_reads@cpu+batch_size=16,32,64", storage=f"sqlite:///{project}/.autotune/heavy_reads.db"
    )
    pruned = [t for t in study.trials if (t.user_attrs.get("reason") or "").startswith("skipped by prediction")]
    assert len(pruned) == len(skipped) and all(t.state == optuna.trial.TrialState.PRUNED for t in pruned)
    assert all("duration_s" not in t.user_attrs for t in pruned)  # no time spent on them
    assert result.profile["knobs"]["placement"] == "device", out
