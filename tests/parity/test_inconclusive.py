"""A parity check that cannot tell: a baseline that learned too little is run once longer, then only configs with
its math may pass; the verdict says inconclusive, the profile conclusive = false.

Runs are fabricated, then a real search on tests/fixtures/random_labels.py.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch.utils.data import default_collate

from autotune.config import Config
from autotune.options import SearchOptions
from autotune.parity import verdict as parity
from autotune.parity.check import ParityCheck
from autotune.parity.inputs import InputsVerdict, judge
from autotune.parity.reasons import inconclusive_reason
from autotune.parity.run import ParityRun, ProbeSet, probe
from autotune.study import search
from autotune.tuned import file as tuned_file
from autotune.tuned.schema import validate, validate_parity
from autotune.tuned.show import render

FIXTURES = Path(__file__).parents[1] / "fixtures"
BASE = Config(batch_size=16)


def run_of(batch: int, window_loss: float, final: float, initial: float = 2.0, samples: int = 8192) -> ParityRun:
    """A run whose every step reports `window_loss`, and whose probe goes from `initial` to `final`."""
    return ParityRun(batch, 0.1, initial, final, (samples,), (window_loss,), True, 0.0)


def test_progress_is_the_smaller_of_the_window_s_and_the_probe_s_drop() -> None:
    assert parity.progress(run_of(16, 1.0, 1.5), 8192, 2048) == pytest.approx(0.25)  # the probe fell less
    assert parity.progress(run_of(16, 1.9, 1.0), 8192, 2048) == pytest.approx(0.05)  # the window fell less
    assert parity.progress(run_of(16, 2.1, 1.0), 8192, 2048) == pytest.approx(-0.05)  # the training loss rose


@pytest.mark.parametrize(
    ("initial", "window_loss", "final", "expected"),
    [
        (1.391, 1.386, 1.384, False),  # random labels: 0.4% (measured on tests/fixtures/random_labels.py)
        (2.0, 1.97, 1.97, True),  # 1.5%, just enough
        (2.0, 1.971, 1.5, False),  # the probe fell, but the training loss on unseen batches did not: memorised
        (1.385, 0.004, 0.004, True),  # tiny.py converges
    ],
)
def test_conclusive_needs_min_progress_of_the_initial_loss(
    initial: float, window_loss: float, final: float, expected: bool
) -> None:
    assert parity.conclusive(run_of(16, window_loss, final, initial), 8192, 2048) is expected


def test_a_baseline_that_learned_only_how_the_targets_are_spread_is_inconclusive() -> None:
    # ResNet-50 after 18,377 synthetic ImageNet samples on an H200: the losses fell 2-3% from 7.109, to ln 1000 (6.908,
    # guessing evenly) and a hair below; shuffling the probe's targets raised its loss by 0.014 only.
    run = dataclasses.replace(run_of(256, 6.937, 6.891, initial=7.109, samples=18_432), shuffled_loss=6.905)
    assert parity.progress(dataclasses.replace(run, shuffled_loss=None), 18_432, 4608) == pytest.approx(0.172 / 7.109)
    assert parity.progress(run, 18_432, 4608) == pytest.approx(0.014 / 7.109)
    assert not parity.conclusive(run, 18_432, 4608)
    assert inconclusive_reason(run, 18_432, 4608, extended=False) == (
        "the baseline learned 0.2% of its initial loss 7.109 from its inputs (probe loss 6.891, and 6.905 with the "
        "targets shuffled) in 18,432 samples; a verdict needs 1.5%"
    )
    # A classifier that learned from its inputs is confidently wrong on shuffled targets: the drop decides.
    learned = dataclasses.replace(run_of(16, 0.3, 0.25, initial=2.3), shuffled_loss=6.0)
    assert parity.progress(learned, 8192, 2048) == pytest.approx(2.0 / 2.3)


def test_the_probe_s_shuffled_twin_moves_each_target_half_the_set_along() -> None:
    pairs = ProbeSet([(torch.tensor([float(i)]), i) for i in range(4)], default_collate)
    shuffled = pairs.shuffled()
    assert shuffled is not None
    assert [(float(x), y) for x, y in shuffled.samples] == [(0.0, 2), (1.0, 3), (2.0, 0), (3.0, 1)]
    assert ProbeSet([{"input_ids": torch.ones(3), "labels": 1}] * 4, default_collate).shuffled() is None
    assert ProbeSet([(torch.ones(1), 0)], default_collate).shuffled() is None  # one sample has no other target


def test_the_probe_is_drawn_across_a_class_sorted_data_set() -> None:
    sorted_by_class = [(torch.tensor([float(i)]), i // 100) for i in range(1000)]
    drawn = probe(sorted_by_class, samples=100)
    assert len({y for _, y in drawn.samples}) == 10  # every class, not the first 100 samples' one
    assert [float(x) for x, _ in drawn.samples] == [float(x) for x, _ in probe(sorted_by_class, samples=100).samples]


@pytest.mark.parametrize(
    ("candidate", "changed"),
    [
        (Config(batch_size=16, num_workers=2, prefetch_factor=4, persistent_workers=True), []),
        (Config(batch_size=16, placement="device", cudnn_benchmark=True), []),
        (Config(batch_size=64), ["batch_size"]),
        (Config(batch_size=16, amp="bf16", channels_last=True), ["amp"]),
        (Config(batch_size=16, cuda_graph=True, channels_last=True), []),
        (Config(batch_size=16, decode="gpu"), ["decode"]),
    ],
)
def test_only_batch_size_amp_and_decode_change_the_math(candidate: Config, changed: list[str]) -> None:
    assert parity.changes_math(BASE, candidate) == changed


def fake_make_run(
    learned: Callable[[int], float], candidate_loss: Callable[[Config, float], float] | None = None
) -> tuple[Callable[[Config, float, int], ParityRun], list[tuple[Config, float, int]]]:
    """The baseline learns `learned(samples)` of its initial loss 2.0; a candidate ends at `candidate_loss`
    (default: the baseline's loss)."""
    calls: list[tuple[Config, float, int]] = []

    def make_run(config: Config, lr: float, samples: int) -> ParityRun:
        calls.append((config, lr, samples))
        loss = 2.0 * (1 - learned(samples))
        if config != BASE and candidate_loss is not None:
            loss = candidate_loss(config, lr)
        return ParityRun(config.batch_size, lr, 2.0, loss, (samples,), (loss,), True, 0.0)

    return make_run, calls


def test_an_inconclusive_baseline_is_run_once_longer_then_only_configs_with_its_math_pass() -> None:
    make_run, calls = fake_make_run(lambda samples: 0.004)  # random labels: 0.4% whatever the length
    larger, bf16, device, workers = (
        Config(batch_size=64),
        Config(batch_size=16, amp="bf16"),
        Config(batch_size=16, placement="device"),
        Config(batch_size=16, num_workers=2, prefetch_factor=2),
    )
    ranked = [workers, larger, bf16, device]
    lines: list[str] = []
    gate = ParityCheck(BASE, lambda c: 0.05 * c.batch_size / 16, make_run, ranked, lines.append)
    assert gate.select(ranked, want=3, max_runs=5) == [workers, device]
    # The baseline at 8,192 samples, then once at twice that; no candidate runs: the one with other math cannot
    # pass, and a run of the one with the baseline's math would be judged in units of noise.
    assert calls == [(BASE, 0.05, 8192), (BASE, 0.05, 16384)]
    assert (gate.samples, gate.window, gate.conclusive, gate.base.extended) == (16384, 4096, False, True)
    assert [gate.verdicts[c].word for c in ranked] == ["pass", "inconclusive", "inconclusive", "pass"]
    # Loader knobs alone are judged before the baseline runs, by its numerics; the record corrects it below.
    assert [gate.verdicts[c].conclusive for c in ranked] == [True, False, False, False]
    assert lines[0].startswith("  parity pass    the baseline's own numerics")
    assert lines[1] == (
        "parity: the baseline learned 0.4% of its initial loss 2 in 8,192 samples, under the 1.5% a verdict needs; "
        "running it again for 16,384"
    )
    assert lines[2] == (
        "parity: inconclusive: the baseline learned 0.4% of its initial loss 2 in 16,384 samples, run once longer; "
        "a verdict needs 1.5%. Only configs that leave the math unchanged (loader knobs, placement, cudnn_benchmark, "
        "channels_last, cuda_graph; decode once its images are shown to match; amp once its gradients are shown "
        "within the batch's own noise) may win"
    )
    assert lines[3] == (
        "  parity inconclusive  it changes batch_size, and the baseline learned 0.4% of its initial loss 2 in 16,384 "
        "samples, run once longer; a verdict needs 1.5%: cannot be judged  bs=64 workers=0"
    )
    assert lines[4].startswith("  parity inconclusive  it changes amp, and the baseline learned 0.4%")
    assert lines[5] == (
        "  parity pass    it keeps the baseline's math, and the baseline learned 0.4% of its initial loss 2 in 16,384 "
        "samples, run once longer; a verdict needs 1.5%  bs=16 device-resident"
    )
    assert gate.summary().startswith(
        "parity: 4 config(s) checked, 2 rejected (2 of them inconclusive); 0 run(s) and the baseline's took "
    )
    assert gate.summary().endswith(
        "each compared with the baseline (bs=16 workers=0, lr 0.05) over 16,384 samples: the training loss over "
        "the last 4,096 and the probe set's after them"
    )
    for config in (device, workers):
        record = gate.record(config)
        assert (record["passed"], record["conclusive"], record["samples"]) == (True, False, 16384)
        assert validate_parity("parity", record) == []
    assert gate.record(bf16)["conclusive"] is False and not gate.record(bf16)["passed"]
    baseline_record = gate.record(BASE)  # the workload's own settings may win too: the record still says so
    assert (baseline_record["passed"], baseline_record["conclusive"], baseline_record["family"]) == (
        True, False, "loader"
    )


@pytest.mark.parametrize("matches", [True, False])
def test_an_inconclusive_check_passes_the_decode_path_by_its_images_alone(matches: bool) -> None:
    """decode = gpu changes the images, not the arithmetic: once they match the host's, it is judged as the same math.
    The inputs check runs once for every config that decodes on the device."""
    make_run, calls = fake_make_run(lambda samples: 0.004)
    on_device = Config(batch_size=16, decode="gpu", channels_last=True)
    with_bf16 = Config(batch_size=16, decode="gpu", amp="bf16")
    more_workers = Config(batch_size=16, decode="gpu", num_workers=4, prefetch_factor=2)
    checked: list[Config] = []

    def check_inputs(config: Config) -> InputsVerdict:
        checked.append(config)
        return judge({"host_to_host": 1.04, "host_to_device": 0.98 if matches else 2.83, "images": 64, "draws": 32,
                      "seconds": 3.0})

    lines: list[str] = []
    gate = ParityCheck(BASE, lambda c: 0.05, make_run, [on_device], lines.append, check_inputs=check_inputs)
    passed = gate.select([with_bf16, on_device, more_workers], want=3, max_runs=5)
    assert checked == [with_bf16] and [c for _, c, _ in calls] == [0.05, 0.05], "one inputs check; no candidate run"
    word = "match" if matches else "do not match"
    summary = (f"the device path's images {word} the host pipeline's in distribution: "
               f"{0.98 if matches else 2.83:.2f} apart against 1.04 between two host draws (limit 1.5x), "
               f"64 images x 32 draws")
    assert f"  inputs {'pass' if matches else 'FAIL':<6} {summary}  [3.0 s]" in lines
    if matches:
        assert passed == [on_device, more_workers]
        assert gate.verdicts[with_bf16].word == "inconclusive", "bf16 still changes the math"
        verdict = gate.verdicts[on_device]
        assert (verdict.passed, verdict.conclusive) == (True, False)
        assert verdict.reason is not None and verdict.reason.startswith(
            f"decode: {summary}; otherwise it keeps the baseline's math, and the baseline learned 0.4%")
        record = gate.record(on_device)
        assert (record["inputs_passed"], record["inputs_distance"], record["inputs_host_distance"]) == (
            True, 0.98, 1.04)
        assert validate_parity("parity", record) == []
    else:
        assert passed == []
        assert all(gate.verdicts[c].reason == f"decode: {summary}" for c in (with_bf16, on_device, more_workers))
        assert gate.verdicts[on_device].inputs_passed is False and gate.verdicts[on_device].conclusive


def test_a_baseline_that_learns_in_the_longer_run_makes_the_check_conclusive() -> None:
    make_run, calls = fake_make_run(lambda samples: 0.01 if samples <= 8192 else 0.1, lambda c, lr: 1.9)
    larger = Config(batch_size=64)
    lines: list[str] = []
    gate = ParityCheck(BASE, lambda c: 0.1, make_run, [larger], lines.append)
    assert gate.select([larger], want=1, max_runs=1) == []
    assert [samples for _, _, samples in calls] == [8192, 16384, 16384]
    assert gate.conclusive is True and gate.verdicts[larger].word == "REJECT"
    assert lines[1] == "parity: the baseline learned 10.0% of its initial loss in 16,384 samples"
    assert gate.record(larger)["conclusive"] is True


@pytest.mark.parametrize(
    ("budget_s", "longer"),
    [
        (None, 16384),  # no budget: twice as long
        (72.0, 16384),  # 15% of the default 8 minutes: 10 s spent, twice 10 s for the run and as much for a candidate
        (35.0, 10240),  # (35 - 10) / (2 x 10) = 1.25 times
        (30.0, None),  # 1.0 times: not worth a run
    ],
)
def test_the_extension_fits_in_the_check_s_budget(budget_s: float | None, longer: int | None) -> None:
    make_run, calls = fake_make_run(lambda samples: 0.004)
    lines: list[str] = []
    gate = ParityCheck(BASE, lambda c: 0.1, make_run, [Config(batch_size=64)], lines.append, budget_s=budget_s)
    gate.adopt_baseline(ParityRun(16, 0.1, 2.0, 1.992, (8192,), (1.992,), True, 10.0), "made elsewhere")
    gate.select([Config(batch_size=64)], want=1, max_runs=1)
    assert [samples for _, _, samples in calls] == ([longer] if longer else [])
    assert gate.conclusive is False and gate.samples == (longer or 8192)
    if longer is None:
        assert lines[0] == (
            "parity: the check's budget (30 s, 10.0 s spent) leaves no time to run the baseline longer"
        )


def test_no_candidate_run_starts_once_the_check_s_budget_is_spent() -> None:
    make_run, calls = fake_make_run(lambda samples: 0.5, lambda c, lr: 1.9)  # every candidate is rejected
    ranked = [Config(batch_size=128), Config(batch_size=64), Config(batch_size=32)]
    lines: list[str] = []
    gate = ParityCheck(BASE, lambda c: 0.1, make_run, ranked, lines.append, budget_s=15.0)
    gate.adopt_baseline(ParityRun(16, 0.1, 2.0, 1.0, (8192,), (1.0,), True, 10.0), "made elsewhere")
    assert gate.select(ranked, want=1, max_runs=9) == []
    # The first candidate always runs; the next would take the check past 15 s (10 s spent, 10 s more expected).
    assert [c.batch_size for c, _, _ in calls] == [128]
    assert lines[-1] == (
        "parity: the check's time is spent (10.0 s of its 15 s, 15% of the search's budget); of the configs not "
        "yet checked, only those that keep the baseline's math can be finalists"
    )
    assert list(gate.verdicts) == [Config(batch_size=128)]


def test_once_the_check_s_budget_is_spent_a_config_with_the_baseline_s_math_passes_without_a_run() -> None:
    """Seen on an H200: cifar10_resnet18's 150 s search rejected its fastest config (bf16) and had no time left
    for the next, the baseline's math in a graph at 13x the baseline: it ended with no config at all."""
    make_run, calls = fake_make_run(lambda samples: 0.5, lambda c, lr: 1.9)  # a run of a candidate is rejected
    bf16 = Config(batch_size=16, amp="bf16", cuda_graph=True)
    graph = Config(batch_size=16, num_workers=4, channels_last=True, cudnn_benchmark=True, cuda_graph=True)
    larger = Config(batch_size=64, cuda_graph=True)
    lines: list[str] = []
    gate = ParityCheck(BASE, lambda c: 0.1, make_run, [bf16, graph], lines.append, budget_s=15.0)
    gate.adopt_baseline(ParityRun(16, 0.1, 2.0, 1.0, (8192,), (1.0,), True, 10.0), "made elsewhere")
    assert gate.select([bf16, larger, graph], want=1, max_runs=9) == [graph]
    assert [c for c, _, _ in calls] == [bf16]
    assert list(gate.verdicts) == [bf16, graph]  # the larger batch changes the math: no verdict without a run
    assert lines[-1] == (
        "  parity pass    it keeps the baseline's math, and no run of it fit in the check's time  "
        + graph.describe()
    )
    assert gate.record(graph)["conclusive"] is False and gate.verdicts[graph].passed


def test_the_run_length_follows_the_model_s_speed_within_the_check_s_share() -> None:
    assert parity.run_seconds(None) == 45.0
    assert parity.run_seconds(480 * parity.CHECK_SHARE) == pytest.approx(18.0)
    assert parity.run_seconds(1000.0) == 45.0
    # ResNet-50 at 1,310 samples/s: 18 s of it, above 64 of its batches of 256.
    assert parity.run_length(256, 256, 1310.0, parity.run_seconds(72.0)) == (23580, 5895)
    # A model 10x slower: 64 batches, whatever the budget.
    assert parity.run_length(256, 256, 131.0, parity.run_seconds(72.0)) == (16384, 4096)


def test_the_schema_refuses_an_inconclusive_pass_that_changes_the_math() -> None:
    record = {
        "checked": True,
        "passed": True,
        "conclusive": False,
        "family": "batch_size",
        "tolerance": 0.25,
        "samples": 8192,
        "window": 2048,
        "lr": 0.4,
        "baseline_lr": 0.05,
        "configs_checked": 1,
        "configs_rejected": 0,
        "check_s": 1.0,
        "lr_rule": "cubic",
    }
    assert validate_parity("p", record) == [
        "p.lr_rule must be one of linear, sqrt, none, but got 'cubic'",
        "p says passed and conclusive = false, but family = 'batch_size': an inconclusive check passes only configs "
        "that leave the math unchanged",
    ]
    profile = {
        "samples_per_s": 2.0,
        "baseline_samples_per_s": 1.0,
        "speedup": 2.0,
        "versions": {},
        "knobs": {
            "batch_size": 16,
            "num_workers": 0,
            "pin_memory": False,
            "persistent_workers": False,
            "cudnn_benchmark": False,
            "channels_last": False,
            "amp": "bf16",
            "cuda_graph": False,
            "placement": "device",
        },
        "parity": {**record, "family": "numerics", "tolerance": 0.05, "lr": 0.05, "lr_rule": "linear"},
    }
    assert validate({"schema": 1, "profiles": {"cpu": profile}}) == [
        "profiles.'cpu'.knobs.amp must be 'off' when profiles.'cpu'.parity says passed and conclusive = false (an "
        "inconclusive check passes only configs that leave the math unchanged), but got 'bf16'"
    ]
    # Device decode keeps the math once its images matched the host pipeline's, and not otherwise.
    profile["knobs"] = {**profile["knobs"], "amp": "off", "decode": "gpu", "placement": "stream"}
    assert validate({"schema": 1, "profiles": {"cpu": profile}}) == [
        "profiles.'cpu'.knobs.decode must be 'cpu' when profiles.'cpu'.parity says passed and conclusive = false (an "
        "inconclusive check passes only configs that leave the math unchanged), but got 'gpu'"
    ]
    profile["parity"] = {**profile["parity"], "inputs_passed": True, "inputs_distance": 0.89,
                         "inputs_host_distance": 0.95}
    assert validate({"schema": 1, "profiles": {"cpu": profile}}) == []
    shown = render({"schema": 1, "profiles": {"cpu": profile}}, Path("x.tuned.toml")).splitlines()
    assert [line for line in shown if line.startswith("parity inputs")] == [
        "parity inputs (host)     match: 0.89 apart (0.95)"
    ]


@pytest.mark.e2e
@pytest.mark.slow
def test_random_labels_keep_the_workload_s_batch_size_and_the_profile_says_inconclusive(project: Path) -> None:
    shutil.copy(FIXTURES / "random_labels.py", project / "recipes" / "random_labels.py")
    # Batch 16 (the workload's) and 128, the data set on the "device" (this CPU): batch 128 runs several times faster.
    fixes = {"batch_size": (16, 128), "placement": ("device",), "amp": ("off",), "channels_last": (False,)}
    lines: list[str] = []
    # One thread per trial process: two contending for two shared cores slow a trial tenfold.
    options = SearchOptions(trials=2, fixes=fixes, finalists=1, rounds=1, cpu_share=1)
    profile = search("random_labels", options, echo=lines.append).profile
    assert profile["knobs"]["batch_size"] == 16 and profile["lr"] == 0.05
    check = profile["parity"]
    assert (check["checked"], check["passed"], check["conclusive"]) == (True, True, False)
    assert (check["samples"], check["window"]) == (16384, 4096)  # 512 baseline steps, then once twice as long
    assert "parity: inconclusive: the baseline learned " in "\n".join(lines)
    # Once the check is known inconclusive, batch 128 can win no longer: not measured, and said so.
    skipped = [line for line in lines if line.startswith("[") and "bs=128" in line]
    assert skipped and all("skipped by parity" in line and line.endswith(
        "the check is inconclusive, so no run can judge batch 128 against the baseline's 16") for line in skipped)
    path = project / "recipes" / "random_labels.tuned.toml"
    assert tuned_file.read(path)["profiles"]["cpu"]["parity"] == check
    table = render(tuned_file.read(path), path)
    assert "inconclusive: same math as the baseline" in table
