"""A text-like workload's few-shapes hooks, end to end: facts, trials, parity runs, tuned_loader and a real search."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from torch.utils.data import SequentialSampler

from autotune import tuned_loader
from autotune.config import Config
from autotune.loop.buckets import LengthBuckets
from autotune.options import SearchOptions
from autotune.parity import run as parity_run
from autotune.study import search
from autotune.trial.facts import read_facts
from autotune.trial.runner import Runner
from autotune.trial.timing import Windows
from autotune.tuned import file as tuned_file
from autotune.workloads import load, resolve
from autotune.workloads.locate import WorkloadError

FIXTURES = Path(__file__).parent.parent / "fixtures"
QUICK = Windows(warmup_steps=1, window_s=0.02, min_windows=2, max_windows=3, boundaries=1)


@pytest.fixture
def texts(project: Path) -> Path:
    for name in ("lengths", "tokens"):
        shutil.copy(FIXTURES / f"{name}.py", project / "recipes" / f"{name}.py")
    return project


def _facts(name: str):
    workload = load(resolve(name))
    return read_facts(workload.build_dataset(Path("data")), workload)


def _variant(project: Path, name: str, source: str, old: str, new: str) -> None:
    text = (FIXTURES / f"{source}.py").read_text()
    assert old in text
    (project / "recipes" / f"{name}.py").write_text(text.replace(old, new))


def test_the_knobs_are_offered_exactly_when_the_hook_and_the_keyword_exist(texts: Path) -> None:
    facts = _facts("lengths")
    assert (facts.pad_refused, facts.bucket_refused) == ("", "")
    facts = _facts("tokens")  # its own sampler, and a collate_fn without the keyword
    assert facts.pad_refused == "the workload's collate_fn takes no keyword argument pad_to_multiple_of"
    assert facts.bucket_refused == "the workload gives no sample_lengths(dataset)"
    facts = _facts("tiny")  # (x, y) images through default_collate
    assert facts.pad_refused == "the workload gives no collate_fn, and DataLoader's default_collate pads nothing"
    _variant(texts, "sampled", "tokens", "def build_sampler", "def sample_lengths(dataset):\n"
             "    return dataset.lengths\n\n\ndef build_sampler")
    assert _facts("sampled").bucket_refused == (
        "the workload's build_sampler() orders the samples, and bucketing would replace its order"
    )
    _variant(texts, "ordered", "lengths", "shuffle=True", "shuffle=False")
    assert _facts("ordered").bucket_refused == (
        "the workload does not shuffle (DEFAULTS shuffle=False), and bucketing draws a random order"
    )


def test_wrong_sample_lengths_fail_before_the_search_naming_the_rule(texts: Path) -> None:
    _variant(texts, "short", "lengths", "return dataset.lengths.numpy()", "return dataset.lengths.numpy()[:-1]")
    with pytest.raises(WorkloadError, match=r"sample_lengths\(dataset\) must give one length per sample, but gave "
                                            r"511 for 512 samples"):
        _facts("short")
    _variant(texts, "floats", "lengths", "return dataset.lengths.numpy()", "return dataset.lengths.float().numpy()")
    with pytest.raises(WorkloadError, match=r"sample_lengths\(dataset\) must give one int per sample, but gave an "
                                            r"array of shape \(512,\) and dtype float32"):
        _facts("floats")


def test_trials_and_parity_runs_build_the_bucketed_padded_loader_reproducibly(texts: Path) -> None:
    runner = Runner(load(resolve("lengths")), torch.device("cpu"))
    config = Config(batch_size=16, bucketing=True, pad_multiple=8)
    loader, _, _ = runner.build(config, 0.05)
    assert isinstance(loader.batch_sampler, LengthBuckets) and len(loader) == 32
    widths = [batch["ids"].shape[1] for batch in loader]
    assert all(w % 8 == 0 for w in widths)
    probe, count = parity_run.probe(runner.dataset, runner.workload.collate_fn), runner.workload.count
    first, again = (parity_run.train(runner.build, config, 0.05, 768, probe, 16, count) for _ in range(2))
    assert first.losses == again.losses  # the check's runs see one order of batches, epoch after epoch
    plain = parity_run.train(runner.build, Config(batch_size=16), 0.05, 768, probe, 16, count)
    assert plain.initial_loss == first.initial_loss and plain.losses != first.losses


def test_the_padding_share_is_that_of_the_padded_batches(texts: Path) -> None:
    runner = Runner(load(resolve("lengths")), torch.device("cpu"))
    # Lengths 4..60 padded to a multiple of 64 (capped at 64): every batch is 64 positions wide.
    measured = runner.run(Config(batch_size=16, pad_multiple=64), 0.05, QUICK)
    assert measured["padding"] == pytest.approx(1 - measured["tokens_per_sample"] / 64)
    bucketed = runner.run(Config(batch_size=16, bucketing=True), 0.05, QUICK)
    plain = runner.run(Config(batch_size=16), 0.05, QUICK)
    assert bucketed["padding"] < plain["padding"] / 3 < measured["padding"] / 3


def _write(project: Path, config: Config) -> None:
    tuned_file.write_profile(
        project / "recipes" / "lengths.tuned.toml", "lengths", "cpu",
        {
            "samples_per_s": 1000.0, "baseline_samples_per_s": 100.0, "speedup": 10.0, "lr": 0.05,
            "knobs": tuned_file.config_to_knobs(config), "versions": {"torch": torch.__version__},
        },
    )


def test_tuned_loader_applies_both_from_the_tuned_file(texts: Path) -> None:
    _write(texts, Config(batch_size=32, bucketing=True, pad_multiple=8))
    dataset = load(resolve("lengths")).build_dataset(Path("data"))
    loader = tuned_loader(dataset, recipe="lengths", device="cpu")
    assert isinstance(loader.batch_sampler, LengthBuckets) and loader.batch_sampler.batch_size == 32
    batches = list(loader)
    assert len(batches) == 16 and all(b["ids"].shape[1] % 8 == 0 for b in batches)
    assert sum(int(b["mask"].sum()) for b in batches) == int(dataset.lengths.sum())
    with pytest.raises(ValueError, match=r"sampler= and lengths's profile \(bucketing=True: batches of similar "
                                         r"length\) both choose the order; pass bucketing=False to keep your sampler"):
        tuned_loader(dataset, recipe="lengths", device="cpu", sampler=SequentialSampler(dataset), shuffle=False)
    mine = tuned_loader(dataset, recipe="lengths", device="cpu", sampler=SequentialSampler(dataset), shuffle=False,
                        bucketing=False)
    assert [len(s["ids"]) for s in [dataset[i] for i in range(32)]] == next(iter(mine))["mask"].sum(1).tolist()


@pytest.mark.e2e
@pytest.mark.slow
def test_a_search_with_both_knobs_runs_end_to_end_and_writes_a_profile(texts: Path) -> None:
    lines: list[str] = []
    # fp32, batch sizes near the workload's own: as the other batch-structure searches (tests/workloads).
    options = SearchOptions(
        trials=5, finalists=1, rounds=1, trial_timeout_s=60, time_budget_s=None,
        fixes={"batch_size": (16, 32), "amp": ("off",)},
    )
    result = search("lengths", options, echo=lines.append)
    out = "\n".join(lines)
    assert result is not None and result.tuned_path == texts / "recipes" / "lengths.tuned.toml", out
    assert "  bucketing: off/on" in lines and "  pad_multiple: off/8/64" in lines, out
    assert not any(line.startswith(("  bucketing: left out", "  pad_multiple: left out")) for line in lines), out
    trials = [line for line in lines if line.startswith("[")]
    assert any(" bucketed pad=64 " in line for line in trials), out  # the seeds measure the few-shapes loop
    profile = tuned_file.read(result.tuned_path)["profiles"]["cpu"]
    assert profile["trials_failed"] == 0, out
    assert {"bucketing", "pad_multiple"} <= set(profile["knobs"]) and not {"bucketing", "pad_multiple"} & set(
        profile["excluded"]
    )
    assert profile["tokens_per_s"] > 0 and 0 <= profile["padding"] < 1
    knobs = profile["knobs"]
    if knobs["bucketing"] or knobs["pad_multiple"] or knobs["batch_size"] != 16:
        assert profile["parity"]["checked"], out
