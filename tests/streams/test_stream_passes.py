"""The pass check over real streams: webdataset tar shards, a Hugging Face stream over parquet files, plain
IterableDatasets that shard right, not at all, wrongly, or over too few shards, and one that fails in a worker.

Each verdict is asserted whole: which worker counts keep the stream's samples, and the reason of each that does not.
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
import torch
import webdataset as wds
from _streams import FailsInWorker, Shards, fixture, write_parquet
from datasets import load_dataset

from autotune.streams import bounded, passes
from autotune.streams.passes import DUPLICATED, ONE_PROCESS_READS, UNKEYED, PassVerdict

IDLE = "worker(s) {} yielded nothing (fewer shards than workers, or a split that leaves them none)"


def _never_decoded(sample: object) -> object:
    raise AssertionError("the pass check decoded a sample; it reads keys only")


@pytest.fixture
def shards(tmp_path: Path) -> list[str]:
    """4 tar shards of 10 samples each, written by webdataset's TarWriter."""
    return [str(p) for p in fixture("tiny_shards").write_shards(tmp_path / "shards", shards=4, per_shard=10)]


def test_webdataset_keeps_its_samples_at_every_count_and_is_read_by_key_before_decoding(shards: list[str]) -> None:
    # A decode stage that fails if reached: the check stops where samples are grouped by key.
    stream = wds.WebDataset(shards, shardshuffle=False).decode().map(_never_decoded)
    verdicts, what = passes.check(stream, [0, 1, 2, 4])
    read = "its first 4 of 4 shards, read up to their samples' keys, not decoded"
    assert what == read
    assert verdicts == [PassVerdict(w, True, "", 40, read) for w in (0, 1, 2, 4)]
    # Each sample is known by its shard and its __key__, as TarWriter wrote them.
    part = bounded.part(stream, 2)
    assert part is not None and part.what == "its first 2 of 4 shards, read up to their samples' keys, not decoded"
    keys = [key for _, key in passes.read(part.dataset, 2)]
    assert sorted(keys) == sorted(f"{url}#s{s:04d}-{i:05d}" for s, url in enumerate(shards[:2]) for i in range(10))


def test_webdataset_without_a_worker_splitter_duplicates_and_more_workers_than_shards_idle(shards: list[str]) -> None:
    whole = wds.WebDataset(shards, shardshuffle=False, workersplitter=None)
    verdicts, what = passes.check(whole, [0, 2])  # as many shards as the most workers checked: 2 of them
    assert what == "its first 2 of 4 shards, read up to their samples' keys, not decoded"
    assert [(v.workers, v.passed, v.reason, v.samples) for v in verdicts] == [
        (0, True, "", 20), (2, False, DUPLICATED, 40)]
    split = wds.WebDataset(shards, shardshuffle=False)
    verdicts, _ = passes.check(split, [4, 5])
    assert [(v.workers, v.passed, v.reason, v.samples) for v in verdicts] == [
        (4, True, "", 40), (5, False, IDLE.format(4), 40)]


def test_a_hugging_face_stream_over_parquet_files_keeps_its_rows_until_workers_outnumber_its_files(
    tmp_path: Path,
) -> None:
    files = write_parquet(tmp_path / "parquet", files=4, rows=10)
    stream = load_dataset("parquet", data_files=files, split="train", streaming=True)
    verdicts, what = passes.check(stream, [0, 1, 2, 4, 5])
    assert what == "all 4 of its shards"
    assert [(v.workers, v.passed, v.reason, v.samples) for v in verdicts] == [
        (0, True, "", 40), (1, True, "", 40), (2, True, "", 40), (4, True, "", 40), (5, False, IDLE.format(4), 40)]
    # Rows are known by their content: 40 rows, 40 identities.
    assert len({key for _, key in passes.read(stream, 0)}) == 40
    head = bounded.part(stream, 2)
    assert head is not None and (head.shards, head.what) == (2, "its first 2 of 4 shards")
    assert len(passes.read(head.dataset, 2)) == 20


@pytest.mark.parametrize(
    "stream,workers,passed,reason,samples",
    [
        (Shards(split="by_worker"), 3, True, "", 512),
        (Shards(split="none"), 2, False, DUPLICATED, 1024),
        # Worker 0 reads shards 0, 3 and 6, worker 1 shards 1, 4 and 7: shards 2 and 5 are read by none.
        (Shards(shards=8, split="skips"), 2, False, "128 of 512 sample(s) lost", 384),
        (Shards(shards=2, split="by_worker"), 3, False, IDLE.format(2), 128),
    ],
    ids=["sharded", "unsharded", "lossy", "fewer-shards-than-workers"],
)
def test_a_plain_stream_is_read_whole_and_judged(stream: Shards, workers: int, passed: bool, reason: str,
                                                 samples: int) -> None:
    verdicts, what = passes.check(stream, [0, workers])
    assert what == passes.WHOLE_PASS
    reference = stream.num_shards * stream.per_shard
    assert verdicts == [PassVerdict(0, True, "", reference, what), PassVerdict(workers, passed, reason, samples, what)]


def test_a_stream_that_fails_in_one_worker_rules_out_the_counts_that_start_it() -> None:
    verdicts, _ = passes.check(FailsInWorker(shards=4), [0, 1, 2])
    said = f"ValueError: worker 1 cannot open its shard in DataLoader worker process 1; {ONE_PROCESS_READS}"
    assert [(v.workers, v.passed, v.reason) for v in verdicts] == [(0, True, ""), (1, True, ""), (2, False, said)]


def test_each_sample_of_an_unsharded_stream_is_counted_once_per_worker() -> None:
    got = passes.read(Shards(shards=2, per_shard=4, split="none"), 2)
    assert collections.Counter(worker for worker, _ in got) == {0: 8, 1: 8}
    assert set(collections.Counter(key for _, key in got).values()) == {2}


class Augmented(Shards):
    """A correctly sharded stream whose samples are randomly augmented: no two reads of a sample digest alike."""

    def __iter__(self):
        for x, i in super().__iter__():
            yield x + torch.rand(4), i


def test_randomly_augmented_samples_cannot_be_matched_by_content_and_a_sample_key_matches_them() -> None:
    verdicts, what = passes.check(Augmented(shards=4, per_shard=8), [0, 2])
    assert (what, [v.workers for v in verdicts]) == (UNKEYED, [0])
    verdicts, what = passes.check(Augmented(shards=4, per_shard=8), [0, 2], sample_key=lambda sample: sample[1])
    assert what == passes.WHOLE_PASS and [(v.workers, v.passed) for v in verdicts] == [(0, True), (2, True)]
    verdicts, _ = passes.check(Augmented(shards=4, per_shard=8, split="none"), [2], sample_key=lambda s: s[1])
    assert [(v.workers, v.reason) for v in verdicts] == [(2, DUPLICATED)]
