"""The built-in streams: webdataset_resnet50's tar shards and hf_stream_text's parquet files, written on first use,
read through a Runner on the CPU as a search reads them."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest
import torch
from _small import IMAGES, SHARDS, TEXTS

from autotune.config import Config
from autotune.streams import passes
from autotune.trial.runner import Runner
from autotune.trial.steady import Windows
from autotune.workloads import load, resolve
from autotune.workloads.locate import BUILTIN_DIR, builtin_names
from autotune.workloads.parquet_text import text_shards
from autotune.workloads.shards import MARK, imagenet_shards


def test_both_are_built_ins() -> None:
    assert {"webdataset_resnet50", "hf_stream_text"} <= set(builtin_names())
    assert resolve("webdataset_resnet50").workload_path == BUILTIN_DIR / "webdataset_resnet50.py"


def test_the_tar_shards_are_written_once_whole_and_hold_every_jpeg_once(small_data: Path) -> None:
    folder = small_data / "imagenet-synthetic-shards" / "train"
    folder.mkdir(parents=True)
    for left in ("train-000099.tar", ".train-000003.tar.tmp"):  # a killed writer's: whole shards, a half one
        (folder / left).write_bytes(b"left by a writer that was killed")
    paths = imagenet_shards(small_data)
    assert paths == [str(folder / f"train-{i:06d}.tar") for i in range(SHARDS)]
    keys = []
    for path in paths:
        with tarfile.open(path) as tar:
            names = tar.getnames()
            assert names[0].endswith(".jpg") and tar.extractfile(names[0]).read(2) == b"\xff\xd8"  # a JPEG's bytes
            assert [n.rsplit(".", 1)[1] for n in names] == ["jpg", "cls"] * (len(names) // 2)
            assert int(tar.extractfile(names[1]).read()) in range(IMAGES)  # 48 images: 48 classes of one
            keys += [n.rsplit(".", 1)[0] for n in names[::2]]
    assert len(keys) == len(set(keys)) == IMAGES
    assert sorted(p.name for p in folder.iterdir()) == [MARK, *(Path(p).name for p in paths)]  # nothing else left
    written = [os.stat(p).st_mtime_ns for p in paths]
    assert imagenet_shards(small_data) == paths  # the second time: as they are, not written again
    assert [os.stat(p).st_mtime_ns for p in paths] == written
    assert (folder / MARK).read_text().splitlines()[0] == f"images {IMAGES}"


def test_the_parquet_files_are_written_once_with_texts_of_spread_lengths(small_data: Path) -> None:
    import pyarrow.parquet as pq

    paths = text_shards(small_data)
    assert [Path(p).name for p in paths] == [f"train-{i:05d}-of-00016.parquet" for i in range(16)]
    tables = [pq.read_table(p) for p in paths]
    assert sum(t.num_rows for t in tables) == TEXTS and tables[0].column_names == ["text", "label"]
    words = [len(text.split()) for t in tables for text in t.column("text").to_pylist()]
    assert min(words) >= 8 and max(words) <= 128 and max(words) > 3 * min(words)
    assert set(label for t in tables for label in t.column("label").to_pylist()) == {0, 1, 2, 3}


def test_webdataset_resnet50_is_a_stream_of_its_shards_and_yields_imagenet_batches(small_data: Path) -> None:
    workload = load(resolve("webdataset_resnet50"))
    assert workload.defaults["samples_per_epoch"] == IMAGES and "shuffle" not in workload.defaults
    runner = Runner(workload, torch.device("cpu"))
    facts = runner.facts()
    assert facts.stream == f"webdataset, {SHARDS} shard(s)" and facts.shards == SHARDS and facts.size == IMAGES
    assert facts.sample_shapes == "3x224x224 float32, - int64"
    loader, _, _ = runner.build(Config(batch_size=8, num_workers=2, prefetch_factor=2), lr=0.1)
    batches = list(loader)
    assert sum(len(y) for _, y in batches) == IMAGES  # one pass: every image once, over both workers
    x, y = batches[0]
    assert x.shape == (8, 3, 224, 224) and x.dtype == torch.float32 and y.dtype == torch.int64


def test_hf_stream_text_is_a_stream_of_its_files_and_a_search_can_measure_it(small_data: Path) -> None:
    workload = load(resolve("hf_stream_text"))
    assert workload.defaults["samples_per_epoch"] == TEXTS
    runner = Runner(workload, torch.device("cpu"))
    facts = runner.facts()
    assert facts.stream == "Hugging Face datasets, 16 shard(s)" and facts.shards == 16 and facts.size == TEXTS
    assert facts.varying.startswith("batch['input_ids']: shape (8, ") and facts.pad_refused == ""
    loader, _, _ = runner.build(Config(batch_size=16, num_workers=2, pad_multiple=8), lr=5e-4)
    batches = list(loader)
    assert sum(len(b["labels"]) for b in batches) == TEXTS
    ids, mask = batches[0]["input_ids"], batches[0]["attention_mask"]
    assert ids.shape[0] == 16 and ids.shape[1] % 8 == 0 and ids.shape == mask.shape and ids.dtype == torch.int64
    result = runner.run(Config(batch_size=16), 5e-4, Windows(warmup_steps=1, window_s=0.05, min_windows=2,
                                                              max_windows=3, extra_windows=0))
    assert result["samples_per_s"] > 0 and result["first_batch_s"] is not None and result["tokens_per_sample"] > 8


@pytest.mark.parametrize("recipe", ["webdataset_resnet50", "hf_stream_text"])
def test_two_workers_keep_every_sample_of_a_pass(small_data: Path, recipe: str) -> None:
    dataset = load(resolve(recipe)).build_dataset(small_data)
    verdicts, what = passes.check(dataset, [0, 2])
    assert [(v.workers, v.passed, v.reason) for v in verdicts] == [(0, True, ""), (2, True, "")], what
