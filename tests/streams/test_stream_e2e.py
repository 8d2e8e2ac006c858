"""Whole searches on streams in a fresh project: a plain IterableDataset workload (tests/fixtures/tiny_stream.py)
with the parity check on, then every command that reads its workload or its study; and a webdataset workload over
real tar shards, whose answer tuned_loader reads once per pass."""

from __future__ import annotations

import collections
import re
from pathlib import Path

import pytest
import webdataset as wds
from _streams import QUICK_ENV, autotune, fixture

from autotune import tuned_loader
from autotune.tuned import file as tuned_file

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_a_plain_stream_is_searched_with_the_parity_check_and_every_command_reads_it(streams: Path) -> None:
    search = ("search", "--recipe", "tiny_stream", "--trials", "4", "--fix", "amp=off", "--finalists", "1",
              "--rounds", "1")
    run = autotune(streams, *search, **QUICK_ENV)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    lines = run.stdout.splitlines()
    assert "  stream: IterableDataset, 8 shard(s); its order is its own (autotune never shuffles it)" in lines
    assert any(line.startswith("  pass check (one whole pass): every worker count keeps") for line in lines), lines
    assert re.match(r"wrote .*tiny_stream\.tuned\.toml: .*first batch \d+\.\d\d s\), search \d+ s$",
                    next(line for line in lines if line.startswith("wrote "))), lines
    data = tuned_file.read(streams / "recipes" / "tiny_stream.tuned.toml")
    profile = data["profiles"]["cpu"]
    assert profile["excluded"]["placement"] == "a stream (IterableDataset) is read as it comes, not kept on the device"
    assert profile["run_epochs"] == 2 and profile["first_batch_s"] >= 0 and profile["run_s"] > 0

    shown = autotune(streams, "show", "--recipe", "tiny_stream")
    assert shown.returncode == 0 and "first batch, s" in shown.stdout, shown.stderr
    reported = autotune(streams, "report", "--recipe", "tiny_stream")
    assert reported.returncode == 0 and "Traceback" not in reported.stderr, reported.stderr
    assert (streams / "recipes" / "tiny_stream.cpu-amp-off.report.md").exists()
    for target in ("torch", "hf", "lightning"):
        made = autotune(streams, "export", "--recipe", "tiny_stream", "--to", target)
        assert made.returncode == 0 and f"num_workers={profile['knobs']['num_workers']}," in made.stdout, made.stderr


def test_a_webdataset_stream_is_searched_and_its_answer_reads_each_sample_once(streams: Path) -> None:
    shards = fixture("tiny_shards").write_shards(streams / "data" / "tiny_shards")
    run = autotune(streams, "search", "--recipe", "tiny_shards", "--trials", "3", "--fix", "amp=off",
                   "--finalists", "1", "--rounds", "1", "--no-parity-check", **QUICK_ENV)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert "  stream: webdataset, 8 shard(s); its order is its own (autotune never shuffles it)" in run.stdout
    workers = tuned_file.read(streams / "recipes" / "tiny_shards.tuned.toml")["profiles"]["cpu"]["knobs"]["num_workers"]
    stream = wds.WebDataset([str(p) for p in shards], shardshuffle=False).to_tuple("__key__", "cls")
    loader = tuned_loader(stream, recipe="tiny_shards", collate_fn=list)
    assert loader.num_workers == workers
    seen = collections.Counter(key for batch in loader for key, _ in batch)
    assert seen == {f"s{s:04d}-{i:05d}": 1 for s in range(8) for i in range(32)}
