"""Real searches on streams gone wrong, one clear outcome each: exit status and message, never a traceback.

A truncated tar shard (a real shard cut in half), a stream that ends long before its declared pass over one shard,
a stream that raises in one worker only, a stream that does not shard by worker, and one that never ends and
declares no pass. Each search is as short as a search can be (`_streams.QUICK`).
"""

from __future__ import annotations

import collections
import re
from pathlib import Path

import pytest
from _streams import QUICK, QUICK_ENV, autotune, fixture

from autotune import tuned_loader
from autotune.streams.keys import key_of
from autotune.tuned import file as tuned_file

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
DUPLICATED = "duplicated samples: each worker yields the whole stream; shard by `get_worker_info()`"


def _cut(path: Path) -> None:
    """Cut a shard's bytes in half, as a copy that died midway leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _damaged(shard: Path) -> str:
    return rf"ReadError: [^,\n]+, in shard {re.escape(str(shard))} \(a truncated or damaged tar file\)"


def _profile(project: Path, recipe: str) -> dict:
    return tuned_file.read(project / "recipes" / f"{recipe}.tuned.toml")["profiles"]["cpu"]


def test_a_truncated_shard_read_before_the_trials_ends_the_search_naming_it(streams: Path) -> None:
    shards = fixture("tiny_shards").write_shards(streams / "data" / "tiny_shards", shards=4)
    _cut(shards[0])
    run = autotune(streams, "search", "--recipe", "tiny_shards", *QUICK, **QUICK_ENV)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    said = f"Error: workload {streams / 'recipes' / 'tiny_shards.py'}: reading its stream's first samples failed: "
    assert re.fullmatch(re.escape(said) + _damaged(shards[0]) + "\n", run.stderr), run.stderr


def test_a_truncated_shard_only_the_trials_reach_fails_the_baseline_with_its_name(streams: Path) -> None:
    shards = fixture("tiny_shards").write_shards(streams / "data" / "tiny_shards", shards=4)
    _cut(shards[3])  # one worker at most: the pass check reads the first shard, the trials read them all
    run = autotune(streams, "search", "--recipe", "tiny_shards", *QUICK, "--fix", "num_workers=0", **QUICK_ENV)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert re.search(r"trial 0   failed: error: ReadError: ", run.stdout), run.stdout
    said = re.escape("Error: the workload's own settings (bs=16 workers=0) fail: error: ") + _damaged(shards[3])
    assert re.fullmatch(said + re.escape(". Fix the workload first; trial process logs are in .autotune/logs.\n"),
                        run.stderr), run.stderr
    assert not (streams / "recipes" / "tiny_shards.tuned.toml").exists()


def test_a_stream_of_one_short_shard_is_timed_by_its_pass_and_refuses_a_second_worker(streams: Path) -> None:
    one = {**QUICK_ENV, "TINY_SHARDS": "1"}  # one shard of 64 samples; DEFAULTS declare 512
    refused = autotune(streams, "search", "--recipe", "tiny_stream", *QUICK, "--fix", "num_workers=2", **one)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr == (
        "Error: --fix num_workers: 2 is outside its domain {0, 1} (num_workers is narrowed here: the stream's 1 "
        "shard(s) over 1 rank(s) bound its workers: num_workers x world size <= shards).\n")
    run = autotune(streams, "search", "--recipe", "tiny_stream", *QUICK, **one)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert "  num_workers: 0/1" in lines
    assert ("  stream: one pass yields 64 samples, fewer than the 512 its workload declares: each trial times the "
            "pass the stream yields; declare samples_per_epoch=64 to say so") in lines
    assert ("  num_workers: at most 1: the stream's 1 shard(s) over 1 rank(s), a worker beyond them reads "
            "nothing") in lines
    profile = _profile(streams, "tiny_stream")
    # A pass of 64 samples, not 512: the epoch is 64 samples at the stated rate, as far as the file rounds them.
    assert 64 / profile["samples_per_s"] == pytest.approx(profile["epoch_s"], abs=1.5e-4)
    assert profile["run_epochs"] == 2 and profile["first_batch_s"] >= 0


def test_a_stream_that_raises_in_one_worker_rules_out_the_counts_that_start_it_and_the_search_goes_on(
    streams: Path,
) -> None:
    run = autotune(streams, "search", "--recipe", "tiny_stream", *QUICK, **QUICK_ENV, TINY_STREAM="worker_fails",
                   TINY_SHARDS="2")
    assert run.returncode == 0, run.stderr
    assert ("  num_workers 2 ruled out: ValueError: worker 1 cannot read shard 1 in DataLoader worker process 1; one "
            "process reads the same samples without error") in run.stdout.splitlines()
    assert "  num_workers: 0/1" in run.stdout.splitlines()
    assert _profile(streams, "tiny_stream")["knobs"]["num_workers"] <= 1


@pytest.mark.parametrize("own_workers", ["0", "2"])
def test_an_unsharded_stream_is_named_and_its_answer_yields_each_sample_once_a_pass(
    streams: Path, monkeypatch: pytest.MonkeyPatch, own_workers: str
) -> None:
    switches = {**QUICK_ENV, "TINY_STREAM": "unsharded", "TINY_STREAM_WORKERS": own_workers}
    run = autotune(streams, "search", "--recipe", "tiny_stream", *QUICK, **switches)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    ruled = [line for line in run.stdout.splitlines() if line.endswith(f" ruled out: {DUPLICATED}")]
    assert len(ruled) == 1 and re.fullmatch(r"  num_workers 2(, 3|\.\.\d+)? ruled out: .*", ruled[0]), ruled
    if own_workers == "2":  # the workload's own loader repeats every sample: it cannot be the answer
        assert (f"finalists: the workload's own settings (bs=16 workers=2 prefetch=2) cannot be the answer: "
                f"{DUPLICATED}; the answer is the fastest config that keeps the stream's samples"
                ) in run.stdout.splitlines()
    profile = _profile(streams, "tiny_stream")
    monkeypatch.setenv("TINY_STREAM", "unsharded")
    loader = tuned_loader(fixture("tiny_stream").build_dataset(streams / "data"), recipe="tiny_stream")
    assert loader.num_workers == profile["knobs"]["num_workers"] <= 1
    seen = collections.Counter(key_of((x, int(y))) for xs, ys in loader for x, y in zip(xs, ys))
    assert len(seen) == 512 and set(seen.values()) == {1}


def test_an_endless_stream_without_a_declared_pass_is_ranked_by_its_rate_and_told_how_to_declare_it(
    streams: Path,
) -> None:
    run = autotune(streams, "search", "--recipe", "tiny_stream", *QUICK, **QUICK_ENV, TINY_STREAM="endless",
                   TINY_STREAM_UNDECLARED="1")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert ("  stream: its pass is unknown (no len(), no DEFAULTS['samples_per_epoch']): configs are ranked by steady "
            "samples/s; declare samples_per_epoch in DEFAULTS to rank them by the whole declared run") in lines
    assert ("stream: the declared run is unknown: the stream declares no pass (samples_per_epoch); the winner was "
            "ranked by its steady samples/s. Declare samples_per_epoch in DEFAULTS to rank configs by the whole "
            "declared run") in lines
    assert not any(re.search(r"\d{6,}\.\d s", line) for line in lines), "a declared run of absurd seconds"
    trials = [line for line in lines if re.match(r"\[ *\d+/2\] ", line) and "/s ±" in line]
    assert trials and all(re.search(r"; first batch \d+\.\d s$", line) for line in trials), trials
    profile = _profile(streams, "tiny_stream")
    assert not {"run_s", "baseline_run_s", "epoch_s", "run_epochs"} & set(profile) and "first_batch_s" in profile
    shown = autotune(streams, "show", "--recipe", "tiny_stream")
    assert "declared run, s          unknown" in shown.stdout.splitlines()
