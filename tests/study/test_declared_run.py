"""The declared run decides when one-time costs matter: a data set read once costs as much as a one-epoch run."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from autotune.options import SearchOptions
from autotune.study import search
from autotune.tuned import file as tuned_file

SLOW_READS = Path(__file__).parents[1] / "fixtures" / "slow_reads.py"


@pytest.mark.e2e
@pytest.mark.alone  # the choice follows measured one-time costs and rates
@pytest.mark.slow
def test_materialising_costs_more_than_the_declared_run_saves_so_streaming_wins(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(SLOW_READS, project / "recipes" / "slow_reads.py")
    # An epoch of this loader holds about one 0.2 s window, so each window would cost an epoch and its workers'
    # restart; the choice below rests on a twofold gap, not on how precisely a rate is timed.
    monkeypatch.setenv("AUTOTUNE_WINDOW_S", "0.05")
    lines: list[str] = []
    # Two cores: the device copy is materialised by at most two processes, the stream read by four workers.
    # The seeds alone (the workload's own loop, every knob on at its batch, two device-resident ones, a larger
    # streaming batch), in fp32; batches of 64 at most, since one of 256 takes two workers a quarter of a second.
    options = SearchOptions(
        trials=5,
        parity_check=False,
        rounds=1,
        cpu_share=2,
        time_budget_s=None,
        fixes={"amp": ("off",), "batch_size": (32, 64)},
    )
    profile = search("slow_reads", options, echo=lines.append).profile

    config = tuned_file.knobs_to_config(profile["knobs"])
    steady = profile["steady_choice"]
    assert (config.placement, config.num_workers >= 1, profile["run_epochs"]) == ("stream", True, 1)
    assert "device-resident" in steady["config"]
    assert steady["samples_per_s"] > profile["samples_per_s"] and steady["run_s"] > profile["run_s"]
    assert steady["setup_s"] > 0.5  # 1,024 reads of 1 ms by at most two processes, before the first step
    said = [line for line in lines if "steady samples/s would pick" in line]
    # The line states its seconds to 0.1 from the unrounded times; the profile keeps them to 0.01.
    seconds = r"(\d+\.\d) s"
    assert len(said) == 1, lines
    # The rates too are stated from the unrounded ones: 2,416.5/s in the profile was 2,417/s in the line.
    found = re.fullmatch(
        re.escape(f"finalists: {config.describe()} finishes the declared run (1 epoch(s) of 1,024 samples) first: ")
        + seconds + r" at ([\d,]+)/s; steady samples/s would pick " + re.escape(f"{steady['config']}: ")
        + r"([\d,]+)/s, but " + seconds + " with " + seconds + " of one-time costs",
        said[0],
    )
    assert found, (said[0], config.describe())
    run_s, our_rate, steady_rate, steady_run_s, setup_s = found.groups()
    for stated, kept in ((run_s, profile["run_s"]), (steady_run_s, steady["run_s"]), (setup_s, steady["setup_s"])):
        assert abs(float(stated) - kept) <= 0.051
    for stated, kept in ((our_rate, profile["samples_per_s"]), (steady_rate, steady["samples_per_s"])):
        assert abs(float(stated.replace(",", "")) - kept) <= 0.51
