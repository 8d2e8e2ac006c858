"""The `device_normalize` knob in the space, the seeds, the tuned file, parity's same-math knobs, a search's setup."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import optuna
import pytest

from autotune.config import Config
from autotune.knobs import DataFacts, Machine, SpaceError
from autotune.options import SearchOptions
from autotune.parity.verdict import changes_math
from autotune.study.setup import prepare
from autotune.study.space.domains import build_space, parse_fix
from autotune.study.space.seeds import seed_configs
from autotune.tuned.schema import SCHEMA_VERSION, validate
from autotune.workloads import load, resolve

GPU = Machine("NVIDIA H200", cuda=True, cpu_share=16, amp_dtypes=("bf16", "fp16"), memory_bytes=140 * 2**30)
CPU = Machine("cpu", cuda=False, cpu_share=2, amp_dtypes=("bf16",), memory_bytes=24 * 2**30)
JPEGS = DataFacts(
    size=51_200, sample_bytes=3 * 224 * 224 * 4 + 8, image_4d=True, static_shapes=True, deterministic=False,
    device_dataset=False, gpu_decode="decode JPEG on the device, then ...",
    device_normalize="the workers hand over uint8 pixels; the device runs ToTensor's /255 -> Normalize on each batch",
    device_normalize_refused="",
)
FLAGS = dict(cudnn_benchmark=True, channels_last=True, amp="bf16", cuda_graph=False, compile="off")


def test_it_is_asked_for_only_where_the_workers_decode() -> None:
    space = build_space(256, GPU, JPEGS)
    assert space.domains["device_normalize"] == (False, True) and "device_normalize: off/on" in space.describe()
    stream = dict(placement="stream", batch_size=256, num_workers=15, pin_memory=True, persistent_workers=True,
                  prefetch_factor=4, **FLAGS)
    trial = optuna.trial.FixedTrial(dict(stream, decode="cpu", device_normalize=True))
    config = space.suggest(trial)
    assert config.device_normalize and "device_normalize" in trial.params
    assert config.describe() == ("bs=256 workers=15 device-normalize pinned persistent prefetch=4 cudnn.benchmark "
                                 "channels_last bf16")
    assert space.suggest(optuna.trial.FixedTrial(space.params(config))) == config
    trial = optuna.trial.FixedTrial(dict(stream, decode="gpu", decode_share=1.0))  # the device makes its images
    assert not space.suggest(trial).device_normalize and "device_normalize" not in trial.params
    assert not space.normalise(Config(batch_size=256, decode="gpu", device_normalize=True)).device_normalize
    assert not space.normalise(Config(batch_size=256, placement="device", device_normalize=True)).device_normalize


@pytest.mark.parametrize(
    "machine,facts,reason",
    [
        (CPU, JPEGS, "needs CUDA"),
        (GPU, dataclasses.replace(JPEGS, device_normalize="", device_normalize_refused="RandomErasing runs after ..."),
         "RandomErasing runs after ..."),
        (GPU, dataclasses.replace(JPEGS, device_normalize="", device_normalize_refused=""),
         "the data set's transform was not read"),
    ],
)
def test_it_is_left_out_with_its_reason(machine: Machine, facts: DataFacts, reason: str) -> None:
    space = build_space(256, machine, facts)
    assert space.excluded["device_normalize"] == reason and space.domains["device_normalize"] == (False,)
    with pytest.raises(SpaceError, match=r"--fix device_normalize: on is outside its domain \{off\}"):
        build_space(256, machine, facts, {"device_normalize": parse_fix("device_normalize=on")[1]})


def test_the_all_cores_seed_hands_over_uint8_where_the_space_has_the_knob_and_stays_plain_where_not(
        project: Path) -> None:
    workload = load(resolve("tiny"))
    with_knob = seed_configs(workload, GPU, build_space(16, GPU, dataclasses.replace(JPEGS, size=4096)))
    assert [c.describe() for c in with_knob if c.device_normalize] == [
        "bs=16 workers=15 device-normalize pinned persistent prefetch=4 cudnn.benchmark channels_last bf16",
        "bs=16 workers=15 device-normalize pinned persistent prefetch=4 cudnn.benchmark channels_last graph bf16 "
        "compile=default"]
    facts = dataclasses.replace(JPEGS, size=4096, device_normalize="", device_normalize_refused="no ToTensor")
    without = seed_configs(workload, GPU, build_space(16, GPU, facts))
    assert not any(c.device_normalize for c in without)
    assert "bs=16 workers=15 pinned persistent prefetch=4 cudnn.benchmark channels_last bf16" in [
        c.describe() for c in without]


def test_it_keeps_the_math_and_the_tuned_file_takes_it_or_its_absence() -> None:
    assert changes_math(Config(batch_size=256), Config(batch_size=256, num_workers=8, device_normalize=True)) == []
    knobs = dict(batch_size=256, num_workers=15, pin_memory=True, persistent_workers=True, prefetch_factor=4,
                 cudnn_benchmark=True, channels_last=True, amp="bf16", cuda_graph=False, placement="stream")

    def profile(**more: object) -> dict:
        return {"schema": SCHEMA_VERSION, "recipe": "imagenet_resnet50", "profiles": {"NVIDIA H200": {
            "samples_per_s": 4000.0, "baseline_samples_per_s": 1000.0, "speedup": 4.0, "cpu_share": 16,
            "knobs": {**knobs, **more}, "versions": {}}}}

    assert validate(profile(device_normalize=True)) == [] and validate(profile()) == []
    assert validate(profile(device_normalize="yes")) == [
        "profiles.'NVIDIA H200'.knobs.device_normalize must be bool, but got 'yes'"]


def test_a_search_on_the_cpu_leaves_it_out_and_reads_why_the_pipeline_has_no_tail(project: Path) -> None:
    p = prepare("tiny", SearchOptions(trials=1), echo=lambda line: None)
    assert p.space.excluded["device_normalize"] == "needs CUDA"
    assert (p.facts.device_normalize, p.facts.device_normalize_refused) == (
        "", "the data set has no transform: there is no ToTensor to move to the device")
