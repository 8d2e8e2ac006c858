"""torchrun over a stream: each rank reads a disjoint share of the shards (webdataset's node splitter in a copy of
the pipeline, Hugging Face's split_dataset_by_node), and tuned_loader refuses a world size whose workers would
outnumber the shards, with the rule. Ranks are set as torchrun sets them (RANK, WORLD_SIZE), and in a real job."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import webdataset as wds
from _procs import child_env
from _streams import fixture, write_parquet
from datasets import load_dataset

from autotune import tuned_loader
from autotune.config import Config
from autotune.streams import passes, ranks
from autotune.tuned import file as tuned_file

JOB = Path(__file__).parent / "stream_torchrun_job.py"


def _names(stream: object) -> list[str]:
    return [getattr(stage, "__name__", type(stage).__name__) for stage in stream.pipeline]


def _profile(project: Path, num_workers: int) -> None:
    tuned_file.write_profile(project / "recipes" / "tiny_shards.tuned.toml", "tiny_shards", "cpu", {
        "samples_per_s": 1000.0, "baseline_samples_per_s": 500.0, "speedup": 2.0, "lr": 0.05, "lr_rule": "linear",
        "cpu_share": 2, "versions": {"torch": torch.__version__},
        "knobs": tuned_file.config_to_knobs(Config(batch_size=16, num_workers=num_workers, prefetch_factor=2)),
    })


def test_the_rule_names_the_readers_the_shards_and_what_fits() -> None:
    assert ranks.refusal(8, 2, 4) is None and ranks.refusal(None, 64, 64) is None
    assert ranks.refusal(4, 0, 4) is None  # the loop's own process reads: one reader a rank
    assert ranks.refusal(8, 3, 4) == (
        "3 reader(s) per rank (num_workers=3) x world size 4 = 12 readers, but the stream has 8 shard(s): readers "
        "beyond the shards read nothing, or ranks read the same shards. The rule: num_workers x world size <= "
        "shards; pass num_workers=2 or write the data in at least 12 shards")
    assert ranks.refusal(2, 0, 4).endswith("; run at most 2 rank(s) or write the data in at least 4 shards")


def test_torchruns_environment_names_the_rank_where_no_process_group_is_initialised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")  # a search's world, with no rank of its own
    assert ranks.rank_and_world((0, 1)) == (0, 1)
    monkeypatch.setenv("RANK", "1")
    assert ranks.rank_and_world((0, 1)) == (1, 2)
    assert ranks.rank_and_world((3, 4)) == (3, 4)  # an initialised group wins


def test_webdataset_ranks_read_disjoint_shards_covering_all_in_a_copy_of_the_pipeline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    urls = [str(p) for p in fixture("tiny_shards").write_shards(tmp_path, shards=8, per_shard=4)]
    stream = wds.WebDataset(urls, shardshuffle=False).decode()
    split = ranks.split_for_rank(stream, rank=0, world=2)
    assert _names(stream)[1] == "single_node_only" and _names(split)[1] == "split_by_node"
    assert "single_node_only" not in _names(split) and split is not stream
    seen = []
    for rank in (0, 1):  # as torchrun sets them; webdataset's node splitter reads them
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        seen.append({key for _, key in passes.read(ranks.split_for_rank(stream, rank, 2), workers=2)})
        with pytest.raises(ValueError, match="you need to add an explicit nodesplitter"):
            passes.read(stream, workers=0)  # the user's pipeline, unsplit, refuses two ranks itself
    assert len(seen[0]) == len(seen[1]) == 16 and not seen[0] & seen[1]
    assert seen[0] | seen[1] == {f"{url}#s{s:04d}-{i:05d}" for s, url in enumerate(urls) for i in range(4)}
    assert ranks.split_for_rank(split, 1, 2) is split  # split by node already: as it is


def test_hugging_face_ranks_read_disjoint_rows_covering_all(tmp_path: Path) -> None:
    files = write_parquet(tmp_path, files=4, rows=5)
    stream = load_dataset("parquet", data_files=files, split="train", streaming=True)
    rows = [[row["text"] for row in ranks.split_for_rank(stream, rank, 2)] for rank in (0, 1)]
    assert len(rows[0]) == len(rows[1]) == 10 and not set(rows[0]) & set(rows[1])
    assert set(rows[0]) | set(rows[1]) == {f"file {f} row {r}" for f in range(4) for r in range(5)}


def test_tuned_loader_refuses_ranks_whose_workers_outnumber_the_shards(
    streams: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fixture("tiny_shards").write_shards(streams / "data" / "tiny_shards", shards=4, per_shard=4)
    workload = fixture("tiny_shards")
    _profile(streams, num_workers=2)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(ValueError) as raised:
        tuned_loader(workload.build_dataset(streams / "data"), recipe="tiny_shards")
    assert str(raised.value) == (
        "tuned_loader: tiny_shards's profile on this stream: 2 reader(s) per rank (num_workers=2) x world size 4 = 8 "
        "readers, but the stream has 4 shard(s): readers beyond the shards read nothing, or ranks read the same "
        "shards. The rule: num_workers x world size <= shards; pass num_workers=1 or write the data in at least 8 "
        "shards.")
    loader = tuned_loader(workload.build_dataset(streams / "data"), recipe="tiny_shards", num_workers=1)
    assert loader.num_workers == 1 and sum(len(y) for _, y in loader) == 4  # rank 0's shard of 4: one shard


@pytest.mark.e2e  # a real torchrun job: two ranks in processes of their own, a gloo process group
@pytest.mark.slow
def test_two_ranks_of_a_torchrun_job_read_disjoint_shards_and_refuse_too_few(streams: Path) -> None:
    shards = fixture("tiny_shards")
    written = shards.write_shards(streams / "data" / "tiny_shards", shards=8, per_shard=4)
    shards.write_shards(streams / "data" / "two_shards", shards=2, per_shard=4)
    _profile(streams, num_workers=2)
    out = streams / "out"
    out.mkdir()
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(JOB), str(out)],
        cwd=streams, env=child_env(OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    got = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    keys = [set(rank["keys"]) for rank in got]
    assert [len(rank["keys"]) for rank in got] == [16, 16] and not keys[0] & keys[1]
    assert keys[0] | keys[1] == {f"s{s:04d}-{i:05d}" for s in range(len(written)) for i in range(4)}
    assert [rank["workers"] for rank in got] == [2, 2]
    assert [rank["refused"] for rank in got] == [
        "tuned_loader: tiny_shards's profile on this stream: 2 reader(s) per rank (num_workers=2) x world size 2 = 4 "
        "readers, but the stream has 2 shard(s): readers beyond the shards read nothing, or ranks read the same "
        "shards. The rule: num_workers x world size <= shards; pass num_workers=1 or write the data in at least 4 "
        "shards."] * 2
