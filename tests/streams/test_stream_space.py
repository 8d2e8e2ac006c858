"""The knobs that apply to a stream: its shards bound the workers of every rank, before any trial, with the reason in
the search's output; WORLD_SIZE is the world a search assumes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from _streams import Shards, fixture

from autotune.knobs import DataFacts, Machine, SpaceError
from autotune.options import SearchOptions
from autotune.streams.facts import FIXED_ORDER, describe, with_pass_check
from autotune.streams.shares import shards_per_rank
from autotune.study.setup import announce, prepare
from autotune.study.space.domains import build_space
from autotune.trial.facts import read_facts
from autotune.workloads import load, resolve

CPU = Machine("cpu", cuda=False, cpu_share=8, amp_dtypes=("bf16",), memory_bytes=24 * 2**30)
STREAM = DataFacts(size=256, sample_bytes=264, image_4d=True, static_shapes=True, deterministic=False,
                   device_dataset=False, stream="webdataset, 4 shard(s)", shards=4, world_size=2, stream_declared=256,
                   stream_checked="its first 2 of 4 shards, read up to their samples' keys, not decoded")
RULE = "num_workers x world size <= shards"


def test_workers_times_ranks_within_the_shards_and_the_reason_in_the_banner() -> None:
    assert build_space(16, CPU, STREAM).domains["num_workers"] == (0, 1, 2)
    assert build_space(16, CPU, dataclasses.replace(STREAM, world_size=1)).domains["num_workers"] == (0, 1, 2, 3, 4)
    assert describe(STREAM, cores_most=8) == [
        "stream: webdataset, 4 shard(s); its order is its own (autotune never shuffles it)",
        "num_workers: at most 2: the stream's 4 shard(s) over 2 rank(s), a worker beyond them reads nothing",
        "pass check (its first 2 of 4 shards, read up to their samples' keys, not decoded): every worker count keeps "
        "the stream's samples",
        f"stream order: {FIXED_ORDER}",
    ]
    reordering = describe(dataclasses.replace(STREAM, stream_reorders=True), cores_most=8)
    assert reordering[-1] == (
        "stream order: it changes from pass to pass (its shuffle is unseeded), so each epoch of its own run sees "
        "another; a worker count that keeps its samples reorders them as an epoch does and is judged as a loader knob")


def test_a_fixed_worker_count_beyond_the_shards_is_refused_naming_the_rule() -> None:
    with pytest.raises(SpaceError) as raised:
        build_space(16, CPU, STREAM, fixes={"num_workers": (2, 3)})
    assert str(raised.value) == (
        f"--fix num_workers: 3 is outside its domain {{0, 1, 2}} (num_workers is narrowed here: the stream's 4 "
        f"shard(s) over 2 rank(s) bound its workers: {RULE})."
    )


def test_more_ranks_than_shards_leaves_no_config_to_search() -> None:
    with pytest.raises(SpaceError) as raised:
        build_space(16, CPU, dataclasses.replace(STREAM, world_size=8))
    assert str(raised.value) == (
        "the search assumes WORLD_SIZE=8 ranks (torchrun's): 1 reader(s) per rank (num_workers=0) x world size 8 = "
        "8 readers, but the stream has 4 shard(s): readers beyond the shards read nothing, or ranks read the same "
        f"shards. The rule: {RULE}; run at most 4 rank(s) or write the data in at least 8 shards."
    )


def test_worker_counts_the_pass_check_ruled_out_leave_the_domain_with_their_reason() -> None:
    duplicated = "duplicated samples: each worker yields the whole stream; shard by `get_worker_info()`"
    facts = dataclasses.replace(STREAM, shards=None, world_size=1, stream="IterableDataset, shards not stated",
                                stream_refused=((2, duplicated), (3, duplicated)), stream_checked="one whole pass")
    machine = dataclasses.replace(CPU, cpu_share=3)
    assert build_space(16, machine, facts).domains["num_workers"] == (0, 1)
    assert describe(facts, cores_most=3)[1:] == [f"num_workers 2, 3 ruled out: {duplicated}",
                                                 "pass check (one whole pass): the other worker counts keep the "
                                                 "stream's samples", f"stream order: {FIXED_ORDER}"]
    with pytest.raises(SpaceError, match=r"num_workers is narrowed here: num_workers=2: duplicated samples"):
        build_space(16, machine, facts, fixes={"num_workers": (2,)})


def test_world_size_from_the_environment_is_the_world_a_search_assumes(
    streams: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fixture("tiny_shards").write_shards(streams / "data" / "tiny_shards", shards=4)
    monkeypatch.setenv("WORLD_SIZE", "2")
    workload = load(resolve("tiny_shards"))
    facts = read_facts(workload.build_dataset(streams / "data"), workload)
    assert (facts.stream, facts.shards, facts.world_size, facts.size) == ("webdataset, 4 shard(s)", 4, 2, 256)
    lines: list[str] = []
    # Eight cores: without the shards, eight workers would be tried.
    announce(prepare("tiny_shards", SearchOptions(cpu_share=8, fixes={"amp": ("off",)}), echo=lines.append))
    bound = "  num_workers: at most 2: the stream's 4 shard(s) over 2 rank(s), a worker beyond them reads nothing"
    assert "  num_workers: 0..2" in lines and bound in lines
    monkeypatch.setenv("WORLD_SIZE", "8")
    with pytest.raises(SpaceError, match=r"^the search assumes WORLD_SIZE=8 ranks \(torchrun's\): 1 reader\(s\)"):
        prepare("tiny_shards", SearchOptions(cpu_share=8), echo=lines.append)


def test_the_pass_check_reads_the_counts_a_fix_allows_and_a_shorter_pass_becomes_the_pass(
    streams: Path,
) -> None:
    workload = load(resolve("tiny_stream"))
    stream = Shards(shards=2, per_shard=64)
    facts = read_facts(stream, workload)
    assert (facts.size, facts.stream_declared, facts.shards) == (512, 512, 2)  # DEFAULTS' samples_per_epoch
    checked = with_pass_check(stream, workload, facts, most=8, fixed=(0, 1))
    assert checked.size == 128 and checked.stream_refused == ()
    assert describe(checked, cores_most=8)[1:3] == [
        "stream: one pass yields 128 samples, fewer than the 512 its workload declares: each trial times the pass "
        "the stream yields; declare samples_per_epoch=128 to say so",
        "num_workers: at most 2: the stream's 2 shard(s) over 1 rank(s), a worker beyond them reads nothing",
    ]
    unsharded = Shards(shards=2, per_shard=64, split="none")
    assert with_pass_check(unsharded, workload, facts, most=8, fixed=(0, 1)).stream_refused == ()  # 2 not allowed
    assert [w for w, _ in with_pass_check(unsharded, workload, facts, most=8).stream_refused] == [2]
    # Shard 2 of 4 goes to no worker; the pass is the one process's 256 samples, not the 192 two workers read.
    lossy = with_pass_check(Shards(shards=4, per_shard=64, split="skips"), workload, facts, most=8, fixed=(2,))
    assert (lossy.size, lossy.stream_refused) == (256, ((2, "64 of 256 sample(s) lost"),))



def test_each_ranks_workers_split_the_ranks_share_of_the_shards() -> None:
    assert shards_per_rank(STREAM) == 2  # 4 shards over 2 ranks: the valuation's pass share is over these
    assert shards_per_rank(dataclasses.replace(STREAM, world_size=1)) == 4
    assert shards_per_rank(dataclasses.replace(STREAM, stream="", shards=None)) is None  # read by index
