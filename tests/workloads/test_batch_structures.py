"""Batches that are not (x, y): dicts with a padding collate_fn, detection targets, two inputs; real searches."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, SequentialSampler

from autotune import tuned_loader, tuned_step
from autotune.config import Config
from autotune.knobs import Machine
from autotune.options import SearchOptions
from autotune.study import search
from autotune.study.space.domains import build_space
from autotune.trial.facts import read_facts
from autotune.tuned import file as tuned_file
from autotune.workloads import load, resolve
from autotune.workloads.locate import WorkloadError

FIXTURES = Path(__file__).parent.parent / "fixtures"
GPU = Machine("NVIDIA H200", True, 16, ("bf16", "fp16"), 140 * 2**30)


@pytest.fixture
def structured(project: Path) -> Path:
    for name in ("tokens", "detection", "two_inputs"):
        shutil.copy(FIXTURES / f"{name}.py", project / "recipes" / f"{name}.py")
    return project


def _facts(name: str):
    workload = load(resolve(name))
    return read_facts(workload.build_dataset(Path("data")), workload)


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("name", ["tokens", "detection", "two_inputs"])
def test_a_search_runs_end_to_end_and_writes_a_profile(structured: Path, name: str) -> None:
    lines: list[str] = []
    # Batch sizes near the workload's own: these tiny models learn fast, and parity judges them on little progress.
    # fp32: bf16 on a CPU is emulated (slow), casts no batch, and its parity margin on these models is thin.
    options = SearchOptions(
        trials=5,
        finalists=1,
        rounds=1,
        trial_timeout_s=60,
        time_budget_s=None,
        fixes={"batch_size": (16, 32), "amp": ("off",)},
    )
    result = search(name, options, echo=lines.append)
    out = "\n".join(lines)
    assert result is not None and result.tuned_path == structured / "recipes" / f"{name}.tuned.toml", out
    profile = tuned_file.read(result.tuned_path)["profiles"]["cpu"]
    assert profile["trials_failed"] == 0, out
    assert profile["samples_per_s"] > 0 and profile["baseline_samples_per_s"] > 0
    if profile["knobs"]["batch_size"] != 16:
        assert profile["parity"]["checked"], out
    if name == "tokens":  # it counts tokens: the profile states them beside samples, and the padding
        assert profile["tokens_per_s"] > 0 and profile["baseline_tokens_per_s"] > 0, out
        assert 0 < profile["padding"] < 1
        assert any(line.startswith("tokens: ") and "real tokens against the baseline's" in line for line in lines)
    else:
        assert "tokens_per_s" not in profile and "padding" not in profile
    placement = profile["excluded"].get("placement", "")
    if name == "detection":
        assert placement == (
            "a batch cannot be kept on the device as rows of tensors: the batch holds a list of 8 per-sample items"
        )
    elif name == "tokens":
        assert placement.startswith("a batch cannot be kept on the device as rows of tensors: rows differ in shape")
    else:  # every leaf stacks: device placement applies (on a CPU, the data set in host memory)
        assert placement == "", profile["excluded"]


def test_facts_of_padded_batches_leave_graphs_and_placement_out_naming_the_shapes(structured: Path) -> None:
    facts = _facts("tokens")
    assert not facts.static_shapes and not facts.image_4d
    space = build_space(16, GPU, facts)
    assert space.excluded["cuda_graph"].startswith("batches differ in shape (batch['ids']: shape (8, ")
    assert space.excluded["cuda_graph"].endswith("); a graph replays one shape")
    assert space.excluded["placement"].startswith(
        "a batch cannot be kept on the device as rows of tensors: rows differ in shape from batch to batch"
    )
    assert space.excluded["channels_last"] == "input is not a 4-D image batch"
    # Two inputs of fixed shapes: a graph can replay them, and channels_last finds the 4-D image.
    two = build_space(16, GPU, _facts("two_inputs"))
    assert "cuda_graph" not in two.excluded and "channels_last" not in two.excluded and "placement" not in two.excluded


def test_the_workloads_sampler_orders_trials_and_parity_runs_alike_and_keeps_batches_off_the_device(
    structured: Path,
) -> None:
    from autotune.parity import run as parity_run
    from autotune.trial.runner import Runner

    sampled = structured / "recipes" / "sampled.py"
    sampled.write_text(
        (FIXTURES / "two_inputs.py").read_text().replace("shuffle=True", "shuffle=False")
        + "\n\ndef build_sampler(dataset):\n    return torch.utils.data.SequentialSampler(dataset)\n"
    )
    assert _facts("sampled").unstackable == (
        "the workload's build_sampler() orders the samples, and the device slices its own order"
    )
    runner = Runner(load(resolve("tokens")), torch.device("cpu"))
    loader, _, _ = runner.build(Config(batch_size=16), 0.05)
    assert type(loader.sampler).__name__ == "Buckets"
    # Sorted within runs of 64: a batch's lengths rise, so it pads less than a random batch.
    lengths = next(iter(loader))["mask"].sum(1).tolist()
    assert lengths == sorted(lengths)
    probe, count = parity_run.probe(runner.dataset, runner.workload.collate_fn), runner.workload.count
    first, again = (
        parity_run.train(runner.build, Config(batch_size=16, num_workers=w), 0.05, 512, probe, 16, count)
        for w in (0, 1)
    )
    assert first.losses == again.losses  # one order, whatever the loader's workers


def test_a_batch_counted_wrong_by_default_asks_for_samples_in(structured: Path) -> None:
    path = structured / "recipes" / "listed.py"
    # Images as a list, torchvision-detection style: the first tensor is one image, 3 x 12 x 12.
    path.write_text(
        (FIXTURES / "detection.py").read_text().replace(
            "return torch.stack([image for image, _ in samples]), [target for _, target in samples]",
            "return [image for image, _ in samples], [target for _, target in samples]",
        )
    )
    with pytest.raises(WorkloadError, match=r"a batch of 8 samples counts 3 by the first tensor's leading dimension; "
                                            r"declare samples_in\(batch\)"):
        _facts("listed")
    path.write_text(path.read_text() + "\n\ndef samples_in(batch):\n    return len(batch[0])\n")
    assert _facts("listed").unstackable == "the batch holds a list of 8 per-sample items"


def _write(project: Path, name: str, config: Config) -> None:
    tuned_file.write_profile(
        project / "recipes" / f"{name}.tuned.toml",
        name,
        "cpu",
        {
            "samples_per_s": 1000.0,
            "baseline_samples_per_s": 100.0,
            "speedup": 10.0,
            "lr": 0.05,
            "lr_rule": "none",
            "knobs": tuned_file.config_to_knobs(config),
            "versions": {"torch": torch.__version__},
        },
    )


def test_tuned_loader_yields_the_workloads_batches_and_keeps_the_users_loader_arguments(structured: Path) -> None:
    _write(structured, "tokens", Config(batch_size=32, num_workers=1, prefetch_factor=2))
    dataset = load(resolve("tokens")).build_dataset(Path("data"))
    loader = tuned_loader(dataset, recipe="tokens", device="cpu")
    assert isinstance(loader, DataLoader) and (loader.batch_size, loader.num_workers) == (32, 1)
    assert type(loader.sampler).__name__ == "Buckets"  # the workload's own order, as its search measured it
    batch = next(iter(loader))
    assert sorted(batch) == ["ids", "label", "mask"] and batch["ids"].shape[0] == 32
    # The user's own collate_fn and sampler are kept, with the tuned batch size and workers.
    seen: list[int] = []

    def mine(samples: list[dict]) -> tuple[list[int], torch.Tensor]:
        return [len(s["ids"]) for s in samples], torch.tensor([s["label"] for s in samples])

    loader = tuned_loader(dataset, recipe="tokens", device="cpu", collate_fn=mine, shuffle=False,
                          sampler=SequentialSampler(dataset), worker_init_fn=seen.append)
    lengths, labels = next(iter(loader))
    assert lengths == [len(dataset[i]["ids"]) for i in range(32)] and labels.shape == (32,)
    assert loader.worker_init_fn == seen.append
    # What the profile cannot honour is one error naming both sides.
    with pytest.raises(ValueError, match=r"sampler= and shuffle=True both choose the order"):
        tuned_loader(dataset, recipe="tokens", device="cpu", sampler=SequentialSampler(dataset), shuffle=True)
    with pytest.raises(ValueError, match=r"batch_sampler fixes the batch size, which tokens's profile tunes"):
        tuned_loader(dataset, recipe="tokens", device="cpu", batch_sampler=[[0, 1]], shuffle=False)
    with pytest.raises(TypeError, match=r"unknown argument\(s\) \['colate_fn'\]"):
        tuned_loader(dataset, recipe="tokens", device="cpu", colate_fn=mine)


def test_a_device_placed_profile_refuses_a_sampler_and_tuned_step_uses_the_workloads_loss(structured: Path) -> None:
    _write(structured, "two_inputs", Config(batch_size=64, placement="device"))
    workload = load(resolve("two_inputs"))
    dataset = workload.build_dataset(Path("data"))
    with pytest.raises(ValueError, match=r"sampler cannot apply: two_inputs's profile keeps the data set on the dev"):
        tuned_loader(dataset, recipe="two_inputs", device="cpu", sampler=SequentialSampler(dataset), shuffle=False)
    loader = tuned_loader(dataset, recipe="two_inputs", device="cpu")
    image, side, label = next(iter(loader))
    assert (image.shape, side.shape, label.shape) == ((64, 1, 8, 8), (64, 4), (64,))
    model = workload.build_model()
    step = tuned_step(model, None, workload.build_optimizer(model.parameters(), 0.05), recipe="two_inputs",
                      device="cpu")
    first = float(step((image, side, label)))
    for _ in range(20):
        last = float(step((image, side, label)))
    assert last < first
