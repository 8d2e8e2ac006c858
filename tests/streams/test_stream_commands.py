"""The commands and the API on a stream workload: show, export (torch, hf, lightning), diagnose, load_tuned,
tuned_step and tuned_loader, read from a profile as a search writes it. One pass of tuned_loader yields every
sample once with the profile's worker count, over a plain stream and over real webdataset shards."""

from __future__ import annotations

import collections
import os
from pathlib import Path

import pytest
import torch
import webdataset as wds
from _streams import autotune, fixture
from click.testing import CliRunner

from autotune import cli, load_tuned, tuned_loader, tuned_step
from autotune.config import Config
from autotune.streams.keys import key_of
from autotune.tuned import file as tuned_file

TUNED = Config(batch_size=32, num_workers=2, persistent_workers=True, prefetch_factor=4)


def _profile(project: Path, recipe: str, config: Config) -> None:
    tuned_file.write_profile(project / "recipes" / f"{recipe}.tuned.toml", recipe, "cpu", {
        "samples_per_s": 4000.0, "steady_samples_per_s": 4100.0, "baseline_samples_per_s": 1000.0, "speedup": 4.0,
        "epoch_s": 0.128, "setup_s": 0.2, "first_batch_s": 0.05, "run_s": 0.456, "baseline_run_s": 1.2,
        "run_epochs": 2, "lr": 0.1, "lr_rule": "linear", "cpu_share": 2, "study": f"{recipe}@cpu",
        "knobs": tuned_file.config_to_knobs(config), "versions": {"torch": torch.__version__},
        "parity": {"checked": False},
    })


def test_show_and_every_export_read_a_streams_profile(streams: Path) -> None:
    _profile(streams, "tiny_stream", TUNED)
    runner = CliRunner()
    shown = runner.invoke(cli.main, ["show", "--recipe", "tiny_stream"])
    assert shown.exit_code == 0, shown.output
    assert "first batch, s           0.05" in shown.output.splitlines()
    expected = {"torch": ("num_workers=2,", "shuffle=False,"), "hf": ("dataloader_num_workers=2,",),
                "lightning": ("num_workers=2,", "shuffle=False,")}
    for target, said in expected.items():
        made = runner.invoke(cli.main, ["export", "--recipe", "tiny_stream", "--to", target])
        assert made.exit_code == 0, made.output
        assert all(f"    {line}" in made.output.splitlines() for line in said), (target, made.output)


def test_load_tuned_tuned_step_and_tuned_loader_train_one_pass_of_a_plain_stream(streams: Path) -> None:
    _profile(streams, "tiny_stream", TUNED)
    workload = fixture("tiny_stream")
    tuned = load_tuned("tiny_stream")
    assert (tuned.config, tuned.lr) == (TUNED, 0.1)
    model = workload.build_model()
    step = tuned_step(model, workload.build_loss(), workload.build_optimizer(model.parameters(), tuned.lr),
                      recipe="tiny_stream")
    loader = tuned_loader(workload.build_dataset(streams / "data"), recipe="tiny_stream")
    assert (loader.num_workers, loader.batch_size, loader.prefetch_factor) == (2, 32, 4)
    seen: collections.Counter[str] = collections.Counter()
    for x, y in loader:
        loss = step(x, y)
        seen.update(key_of((sample, int(label))) for sample, label in zip(x, y))
    assert len(seen) == 512 and set(seen.values()) == {1}
    assert torch.isfinite(loss)


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")  # three workers on two cores
def test_one_pass_of_tuned_loader_over_webdataset_shards_yields_every_sample_once(streams: Path) -> None:
    shards = fixture("tiny_shards").write_shards(streams / "data" / "tiny_shards", shards=8, per_shard=32)
    _profile(streams, "tiny_shards", Config(batch_size=16, num_workers=3, prefetch_factor=2))
    stream = wds.WebDataset([str(p) for p in shards], shardshuffle=False).to_tuple("__key__", "cls")
    loader = tuned_loader(stream, recipe="tiny_shards", collate_fn=list)
    assert loader.num_workers == 3
    seen = collections.Counter(key for batch in loader for key, _ in batch)
    assert seen == {f"s{s:04d}-{i:05d}": 1 for s in range(8) for i in range(32)}


@pytest.mark.slow
def test_diagnose_reads_a_stream(streams: Path) -> None:
    run = autotune(streams, "diagnose", "--recipe", "tiny_stream", OMP_NUM_THREADS="1")
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    lines = run.stdout.splitlines()
    cores = len(os.sched_getaffinity(0))
    assert lines[0] == f"tiny_stream on cpu ({cores} CPU cores), the workload's own settings: bs=16 workers=0"
    assert any(line.startswith("verdict: ") for line in lines) and lines[-1].startswith("diagnosed in ")
