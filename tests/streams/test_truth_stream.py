"""benchmarks/truth.py times a stream by hand: no sampler, its declared pass, its first batch apart; device_normalize
written out on a webdataset stream's last stage."""

from __future__ import annotations

import importlib
import math
import os
import random
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest
import torch
import webdataset as wds
from PIL import Image
from torch import nn
from torchvision import transforms as T

from autotune.config import Config
from autotune.tuned import file as tuned_file
from autotune.workloads import load, resolve
from autotune.workloads.shards import write_shards

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
TINY_STREAM = REPO / "tests" / "fixtures" / "tiny_stream.py"


def _truth(module: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A module of truth.py's package, imported as truth.py imports it: by its folder."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module(f"truthbench.{module}")


def test_a_plain_stream_is_timed_by_its_declared_pass_with_its_first_batch_apart(
    project: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = _truth("loop", monkeypatch)
    # 8 shards of 64, two workers of 4 shards each: 16 batches of 32 a pass, as DEFAULTS' samples_per_epoch says.
    config = Config(batch_size=32, num_workers=2, prefetch_factor=2)
    # On to whole passes however long that takes: a busy host must not stop it on the clock short of a pass.
    result = loop.by_hand(load(resolve(str(TINY_STREAM))), config, 0.05, 0.5, torch.device("cpu"), longest=math.inf)
    assert result["seconds"] >= 0.5 and result["first_batch_s"] > 0
    epochs = result["epochs_worth"]
    assert epochs is not None and epochs >= 1 and result["samples"] == epochs * 512  # whole passes, none repeated
    assert result["boundaries"] >= 1 and result["steady_samples_per_s"] is not None


def test_the_hand_loop_warms_up_through_a_streams_first_pass_end_and_its_short_batches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 2 workers over 8 shards of 64, 256 samples each: in batches of 48, each ends its pass on a short batch of 16,
    # a shape the run has not seen before, which the warm-up must step before any timing.
    loop = _truth("loop", monkeypatch)
    dataset = load(resolve(str(TINY_STREAM))).build_dataset(None)
    loader = torch.utils.data.DataLoader(dataset, batch_size=48, num_workers=2, prefetch_factor=2)
    passes, sizes = loop.Passes(loader), []
    feed = iter(passes)
    for _ in range(2):  # the warm-up's own batches, into the first pass
        sizes.append(len(next(feed)[0]))
    assert loop.through_a_pass_end(feed, passes, lambda batch: sizes.append(len(batch[0])), 3, math.inf)
    # The first pass whole (512 samples, its short batches among them), then the next pass's first and 3 more.
    assert sum(sizes[:-4]) == 512 and sorted(set(sizes[:-4])) == [16, 48] and sizes[-4:] == [48] * 4
    assert passes.place == 3
    assert not loop.through_a_pass_end(feed, passes, lambda batch: None, 3, 0.0)  # the clock already past: no end


@pytest.fixture
def stream(tmp_path: Path) -> wds.WebDataset:
    """16 JPEGs in 4 tar shards, through a webdataset pipeline ending in the augmentation and its normalisation."""
    rng = np.random.default_rng(0)
    samples = []
    for i in range(16):
        path = tmp_path / f"{i}.jpg"
        Image.fromarray(rng.integers(0, 256, (30 + i, 40, 3), dtype=np.uint8)).save(path)
        samples.append((str(path), i % 2))
    urls = [str(tmp_path / "shards" / name) for name in write_shards(samples, tmp_path / "shards", 4)]
    augment = T.Compose([T.RandomResizedCrop(8), T.ToTensor(), T.Normalize((0.5, 0.4, 0.3), (0.2, 0.3, 0.4))])
    return (wds.WebDataset(urls, shardshuffle=False, workersplitter=wds.split_by_worker)
            .decode("pil").to_tuple("jpg", "cls").map_tuple(augment, int))


def test_the_hand_loop_cuts_a_webdataset_streams_last_stage_and_normalises_on_the_device_to_the_bit(
    stream: wds.WebDataset, monkeypatch: pytest.MonkeyPatch,
) -> None:
    data, loop = _truth("data", monkeypatch), _truth("loop", monkeypatch)
    stages = list(stream.pipeline)
    pixels, collate, finish = data.uint8_pixels(stream, torch.device("cpu"))
    assert collate is None and stream.pipeline == stages  # the workload's stream keeps its own stages

    def first(dataset: object) -> torch.Tensor:
        torch.manual_seed(5)
        random.seed(5)
        return torch.stack([x for x, _ in list(dataset)[:4]])

    raw = first(pixels)
    assert raw.dtype == torch.uint8 and torch.equal(finish(raw), first(stream))
    workload = SimpleNamespace(build_model=lambda: nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 2)),
                               build_loss=nn.CrossEntropyLoss, build_dataset=lambda root: stream,
                               build_optimizer=lambda params, lr: torch.optim.SGD(params, lr=lr),
                               defaults={"samples_per_epoch": 16})
    config = Config(batch_size=4, num_workers=2, prefetch_factor=2, device_normalize=True)
    result = loop.by_hand(workload, config, 0.1, 0.5, torch.device("cpu"), longest=math.inf)
    assert result["samples"] > 0 and result["first_batch_s"] > 0 and result["epochs_worth"] is not None


@pytest.mark.parametrize("share", [1.0, 0.5])
def test_the_hand_loop_decodes_a_webdataset_streams_jpegs_on_the_device_whole_or_in_part(
    stream: wds.WebDataset, monkeypatch: pytest.MonkeyPatch, share: float,
) -> None:
    # The hand loop's workers read each sample's bytes (a hybrid's decode the rest by hand, with PIL); the device
    # decodes, crops and normalises: a pass gives every sample once, as float images of the augmentation's size.
    data, loop = _truth("data", monkeypatch), _truth("loop", monkeypatch)
    config = Config(batch_size=4, num_workers=2, prefetch_factor=2, decode="gpu", decode_share=share)
    files, collate, finish = data.worker_data(stream, config, torch.device("cpu"))
    assert (finish is None) == (share == 1)
    loader = torch.utils.data.DataLoader(files, batch_size=4, num_workers=2, collate_fn=collate)
    fed = list(data.decoded_ahead(iter(loader), loop.translate(data.last_stage(stream).args[0]),
                                  torch.device("cpu"), torch.contiguous_format, finish))
    images, targets = torch.cat([x for x, _ in fed]), torch.cat([y for _, y in fed])
    assert images.shape == (16, 3, 8, 8) and images.dtype == torch.float32
    assert sorted(targets.tolist()) == [0] * 8 + [1] * 8
    workload = SimpleNamespace(build_model=lambda: nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 2)),
                               build_loss=nn.CrossEntropyLoss, build_dataset=lambda root: stream,
                               build_optimizer=lambda params, lr: torch.optim.SGD(params, lr=lr),
                               defaults={"samples_per_epoch": 16})
    result = loop.by_hand(workload, config, 0.1, 0.5, torch.device("cpu"), longest=math.inf)
    assert result["samples"] > 0 and result["epochs_worth"] is not None


def test_a_streams_rows_state_the_first_batch_apart(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    rows = _truth("rows", monkeypatch)
    hand = {"samples": 512, "seconds": 1.0, "samples_per_s": 512.0, "within_samples": 448, "within_seconds": 0.8,
            "boundaries": 1, "timeline": [512.0], "epochs_worth": 1.0, "workers_cpu_ms": 1.0, "main_cpu_ms": 0.5,
            "first_batch_s": 0.25}
    measured = {"samples_per_s": 500.0, "steady_samples_per_s": 560.0, "spread": 0.02, "window_rates": [560.0],
                "first_batch_s": 0.2}
    monkeypatch.setattr(rows, "in_a_fresh_process", lambda *args: hand)
    monkeypatch.setattr(rows, "by_autotune", lambda *args: measured)
    args = SimpleNamespace(seconds=1.0, rounds=1, no_bracket=True, out=Path("."))
    row = rows.compared("tuned", Config(batch_size=32, num_workers=2), 0.1, Path("unused"), args,
                        torch.device("cpu"))
    assert row["autotune_first_batch_s"] == [0.2] and row["hand_first_batch_s"] == [0.25]
    assert ("the first batch (a stream's shards opened, its buffer filled; not in the steady rate): autotune 0.20 s, "
            "by hand 0.25 s") in capsys.readouterr().out


@pytest.mark.e2e
@pytest.mark.slow
def test_truth_times_webdataset_resnet50s_tuned_config_by_hand_on_the_cpu(small_data: Path) -> None:
    config = Config(batch_size=4, num_workers=2, prefetch_factor=2, device_normalize=True)
    tuned_file.write_profile(
        small_data.parent / "recipes" / "webdataset_resnet50.tuned.toml", "webdataset_resnet50", "cpu",
        {"samples_per_s": 10.0, "baseline_samples_per_s": 5.0, "speedup": 2.0, "lr": 0.1, "lr_rule": "linear",
         "knobs": tuned_file.config_to_knobs(config), "versions": {"torch": torch.__version__}})
    command = [sys.executable, str(BENCHMARKS / "truth.py"), "--recipe", "webdataset_resnet50", "--configs", "tuned",
               "--device", "cpu", "--hand-only", "--seconds", "1", "--match", "^tuned",
               "--out", str(small_data.parent / "truth")]
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy(), timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("webdataset_resnet50 on cpu, ") and len(lines) == 2, lines
    assert lines[1].startswith("  tuned: bs=4 workers=2 device-normalize prefetch=2") and "the first batch " in lines[1]


def test_the_tuned_set_times_the_profile_then_the_workloads_own_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The profile's speed-up is its rate over the workload's own: both by hand, in one run on one host.
    configs = _truth("configs", monkeypatch)
    path = tmp_path / "w.tuned.toml"
    won = Config(batch_size=512, num_workers=15, prefetch_factor=4, pin_memory=True)
    tuned_file.write_profile(path, "w", "cpu", {
        "samples_per_s": 10.0, "baseline_samples_per_s": 5.0, "speedup": 2.0, "lr": 0.1, "lr_rule": "linear",
        "knobs": tuned_file.config_to_knobs(won), "versions": {"torch": torch.__version__}})
    own = Config(batch_size=256, num_workers=4, prefetch_factor=2, pin_memory=True)
    rows = {f"tuned: {won.describe()}": won, f"workload's own: {own.describe()}": own}
    assert configs.tuned(path, "cpu", own) == rows


@pytest.mark.e2e
def test_truth_times_a_text_stream_by_hand_with_its_own_collate_and_loss(small_data: Path) -> None:
    # hf_stream_text's batches are dicts its collate_fn pads, and its model returns its own loss: the hand loop
    # collates and trains them as a user's loop does, the pad_multiple knob passed as the collate_fn's keyword.
    config = Config(batch_size=16, pad_multiple=8)
    tuned_file.write_profile(
        small_data.parent / "recipes" / "hf_stream_text.tuned.toml", "hf_stream_text", "cpu",
        {"samples_per_s": 10.0, "baseline_samples_per_s": 5.0, "speedup": 2.0, "lr": 5e-4, "lr_rule": "sqrt",
         "knobs": tuned_file.config_to_knobs(config), "versions": {"torch": torch.__version__}})
    command = [sys.executable, str(BENCHMARKS / "truth.py"), "--recipe", "hf_stream_text", "--configs", "tuned",
               "--device", "cpu", "--hand-only", "--seconds", "1", "--out", str(small_data.parent / "truth")]
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy(), timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("hf_stream_text on cpu, ") and len(lines) == 3, lines
    assert lines[1].startswith("  tuned: bs=16 workers=0 pad=8 ") and " by hand " in lines[1]
    assert lines[2].startswith("  workload's own: bs=32 workers=0 ") and " by hand " in lines[2]
