"""The `decode` knob (cpu / gpu) in the space, the tuned file and a search's setup, and `--cpus`."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner

from autotune import cli
from autotune.config import Config
from autotune.knobs import DataFacts, Machine, SpaceError
from autotune.options import SearchOptions
from autotune.procs.cpus import CpusError, choose
from autotune.study.setup import default_study_name, prepare
from autotune.study.space.domains import build_space, parse_fix
from autotune.tuned.schema import SCHEMA_VERSION, validate

GPU = Machine("NVIDIA H200", cuda=True, cpu_share=5, amp_dtypes=("bf16", "fp16"), memory_bytes=140 * 2**30)
CPU = Machine("cpu", cuda=False, cpu_share=2, amp_dtypes=("bf16",), memory_bytes=24 * 2**30)
JPEGS = DataFacts(
    size=51_200,
    sample_bytes=3 * 224 * 224 * 4 + 8,
    image_4d=True,
    static_shapes=True,
    deterministic=False,
    device_dataset=False,
    gpu_decode="decode JPEG on the device, then per image RandomResizedCrop(224) -> ...",
)


def test_decode_is_searched_on_cuda_when_the_pipeline_translates() -> None:
    space = build_space(256, GPU, JPEGS)
    assert space.domains["decode"] == ("cpu", "gpu") and "decode" not in space.excluded
    assert "decode: cpu/gpu" in space.describe()


@pytest.mark.parametrize(
    "machine,facts,reason",
    [
        (CPU, JPEGS, "needs CUDA"),
        (GPU, dataclasses.replace(JPEGS, gpu_decode="", gpu_decode_refused="transform ColorJitter has no device "
                                  "equivalent"), "transform ColorJitter has no device equivalent"),
        (GPU, dataclasses.replace(JPEGS, gpu_decode=""), "the data set's transform was not read"),
    ],
)
def test_decode_is_left_out_with_its_reason(machine: Machine, facts: DataFacts, reason: str) -> None:
    space = build_space(256, machine, facts)
    assert space.excluded["decode"] == reason
    assert space.domains["decode"] == ("cpu",)
    assert space.normalise(Config(batch_size=256, decode="gpu")).decode == "cpu"
    with pytest.raises(SpaceError, match=rf"--fix decode: gpu is outside its domain \{{cpu\}} \(decode is left out "
                                         rf"here: {reason}\)\."):
        build_space(256, machine, facts, {"decode": parse_fix("decode=gpu")[1]})


def test_decode_is_asked_for_only_when_the_data_streams() -> None:
    space = build_space(256, GPU, JPEGS)
    flags = dict(cudnn_benchmark=False, channels_last=True, amp="bf16", cuda_graph=False, compile="off")
    trial = optuna.trial.FixedTrial(dict(placement="stream", batch_size=256, num_workers=0, pin_memory=False,
                                         decode="gpu", decode_share=1.0, **flags))
    assert space.suggest(trial) == Config(batch_size=256, decode="gpu", channels_last=True, amp="bf16")
    assert "decode" in trial.params
    config = Config(batch_size=256, num_workers=4, pin_memory=True, prefetch_factor=2, decode="gpu")
    params = space.params(config)
    assert params is not None and params["decode"] == "gpu"
    assert space.suggest(optuna.trial.FixedTrial(params)) == config
    assert "decode" not in (space.params(Config(batch_size=256, placement="device")) or {})
    assert Config(batch_size=256, num_workers=4, decode="gpu").describe() == "bs=256 workers=4 gpu-decode"


def _profile(**knobs: object) -> dict:
    base = dict(batch_size=256, num_workers=4, pin_memory=True, persistent_workers=False, prefetch_factor=2,
                cudnn_benchmark=False, channels_last=True, amp="bf16", cuda_graph=False, placement="stream")
    return {"schema": SCHEMA_VERSION, "recipe": "imagenet_resnet50", "profiles": {"NVIDIA H200": {
        "samples_per_s": 2000.0, "baseline_samples_per_s": 615.0, "speedup": 3.25, "cpu_share": 5,
        "knobs": {**base, **knobs}, "versions": {}}}}


def test_tuned_file_takes_decode_or_its_absence_and_refuses_other_values() -> None:
    assert validate(_profile(decode="gpu")) == []
    assert validate(_profile()) == []  # a file written before the knob: decode on the CPU
    assert validate(_profile(decode="tpu")) == [
        "profiles.'NVIDIA H200'.knobs.decode must be one of cpu, gpu, but got 'tpu'"
    ]


def test_a_search_on_the_cpu_leaves_decode_out_and_reads_the_pipeline(project: Path) -> None:
    lines: list[str] = []
    p = prepare("tiny", SearchOptions(trials=1), echo=lines.append)
    assert p.space.excluded["decode"] == "needs CUDA"
    # The tiny workload's data set is tensors in memory: the reason names what is missing.
    assert (p.facts.gpu_decode, p.facts.gpu_decode_refused) == (
        "", "Blobs has no `transform`: the device path translates a torchvision pipeline"
    )


def test_cpus_picks_the_first_cores_and_names_the_rule() -> None:
    assert choose(3, [2, 3, 5, 7]) == [2, 3, 5]
    with pytest.raises(CpusError, match=r"^--cpus must be in 1\.\.4 \(the cores this process may run on\), but "
                                        r"got 0\.$"):
        choose(0, [2, 3, 5, 7])
    with pytest.raises(CpusError, match=r"but got 5\.$"):
        choose(5, [2, 3, 5, 7])


@pytest.mark.parametrize("value", ["0", "-1", str(len(os.sched_getaffinity(0)) + 1)])
def test_bad_cpus_exit_2_with_the_value_and_the_rule(project: Path, value: str) -> None:
    result = CliRunner().invoke(cli.main, ["search", "--recipe", "tiny", "--cpus", value])
    assert result.exit_code == 2, result.output
    cores = len(os.sched_getaffinity(0))
    assert result.output.splitlines()[-1] == (
        f"Error: --cpus must be in 1..{cores} (the cores this process may run on), but got {value}."
    )
    assert not (project / ".autotune").exists()


def test_a_search_on_fewer_cores_is_another_study() -> None:
    assert default_study_name("imagenet_resnet50", "NVIDIA H200", {}, 5) == "imagenet_resnet50@nvidia-h200+cpus=5"
    assert default_study_name("imagenet_resnet50", "NVIDIA H200", {}) == "imagenet_resnet50@nvidia-h200"
