"""The parity check catches configs that train differently, and passes the ones that do not.

The broken configs are real bugs, built for real: a graph-style step whose static
input is never refreshed, fp16 without a GradScaler on a workload whose gradients
underflow, the seed's MNIST CNN at batch 8192 with its learning rate unscaled (and,
on a GPU, capped by LR_MAX). CPU runs are exact: the same seed gives the same numbers.
GPU runs (`pytest -m gpu tests/test_parity.py`) use real CUDA graphs and fp16.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from autotune import parity
from autotune.config import Config
from autotune.datasets import write_synthetic_mnist
from autotune.loop import Step
from autotune.runner import Runner
from autotune.workload import load, resolve

WORKLOADS = Path(__file__).parent / "workloads"


class StaleInputStep(Step):
    """A graph step whose static input is filled once and never refreshed: it trains on its first batch forever.

    With a CUDA graph the real graph replays over the stale buffers; without one
    (on a CPU) the same bug is emulated by keeping the first batch.
    """

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.use_graph:
            if self.static is not None:
                x, y = self.static  # copies the buffers onto themselves: the new batch never arrives
            return super().__call__(x, y)
        if not hasattr(self, "first"):
            self.first = (x, y)
        return super().__call__(*self.first)


class NoScalerStep(Step):
    """fp16 autocast without the GradScaler that fp16 needs."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.scaler = None


def with_step(runner: Runner, step_cls: type[Step]) -> parity.Builder:
    """Runner.build, with the step replaced by `step_cls` over the same model, loss and optimizer."""

    def build(config: Config, lr: float) -> tuple[Any, Step, float]:
        loader, step, seconds = runner.build(config, lr)
        return loader, step_cls(step.model, step.loss_fn, step.optimizer, config, step.device), seconds

    return build


class Bench:
    """One workload's runner, probe set and baseline run, shared by the tests that judge candidates against it."""

    def __init__(self, workload_path: Path | str, device: str, root: Path, largest_batch: int, placement: str = "stream") -> None:
        self.workload = load(resolve(str(workload_path)))
        self.runner = Runner(self.workload, torch.device(device), root=root)
        self.base_config = Config(batch_size=self.workload.defaults["batch_size"])
        self.base_lr = float(self.workload.defaults["lr"])
        self.samples, self.window = parity.run_length(self.base_config.batch_size, largest_batch)
        self.probe = parity.probe(self.runner.dataset)
        # The baseline's run; `placement` may put its data on the device, which changes speed only where it trains
        # bitwise alike (on a CPU, with a deterministic transform: test_same_data_order_whatever_the_loader).
        self.base = self.run(Config(batch_size=self.base_config.batch_size, placement=placement), self.base_lr, self.runner.build)

    def run(self, config: Config, lr: float, build: parity.Builder) -> parity.Trace:
        return parity.run_trace(build, config, lr, self.samples, self.probe, self.base_config.batch_size)

    def judge(self, config: Config, lr: float, build: parity.Builder | None = None) -> parity.Verdict:
        trace = self.run(config, lr, build or self.runner.build)
        return parity.compare(self.base, trace, parity.family(self.base_config, config), self.samples, self.window)


@pytest.fixture(scope="module")
def mnist_cpu(tmp_path_factory: pytest.TempPathFactory) -> Bench:
    root = tmp_path_factory.mktemp("data")
    write_synthetic_mnist(root)  # the learnable synthetic MNIST, never a download: the numbers are fixed
    # Device-resident, the baseline's run takes half the time on a CPU; its numbers are the streaming run's, bit for bit.
    return Bench("mnist_cnn", "cpu", root, largest_batch=8192, placement="device")


@pytest.fixture(scope="module")
def underflow_cpu(tmp_path_factory: pytest.TempPathFactory) -> Bench:
    return Bench(WORKLOADS / "underflow.py", "cpu", tmp_path_factory.mktemp("data"), largest_batch=16)


# -- the real bugs, on a CPU ----------------------------------------------------------------------


def test_stale_static_input_fails(mnist_cpu: Bench) -> None:
    # Data on the device, as a graph step has it (and no PIL per step: the test runs in half the time).
    config = Config(batch_size=128, placement="device")
    verdict = mnist_cpu.judge(config, 0.01, with_step(mnist_cpu.runner, StaleInputStep))
    assert not verdict.passed
    assert verdict.family == "numerics"
    # Memorising one batch: its reported loss falls far below the baseline's, and the probe shows it too.
    assert verdict.deviation is not None and verdict.deviation < -1.0
    assert verdict.probe_deviation is not None and verdict.probe_deviation < -0.2


def test_mnist_batch_8192_unscaled_lr_fails(mnist_cpu: Bench) -> None:
    verdict = mnist_cpu.judge(Config(batch_size=8192, placement="device"), 0.01)
    assert not verdict.passed
    assert verdict.family == "batch_size" and verdict.samples == 65536 and verdict.window == 16384
    # It learned nothing the baseline learned: a deviation of one full unit of progress.
    assert verdict.deviation is not None and verdict.deviation > 0.9
    assert verdict.probe_deviation is not None and verdict.probe_deviation > 0.9


def test_mnist_correct_config_passes(mnist_cpu: Bench) -> None:
    # 8x the batch at 8x the learning rate (LR_MAX), data on the device: trains like the baseline to the end.
    verdict = mnist_cpu.judge(Config(batch_size=1024, placement="device"), 0.08)
    assert verdict.passed and verdict.family == "batch_size", verdict.summary()
    assert verdict.lr == 0.08 and verdict.baseline_lr == 0.01


def test_fp16_without_a_scaler_fails_on_a_workload_that_underflows(underflow_cpu: Bench) -> None:
    config = Config(batch_size=16, amp="fp16")
    broken = underflow_cpu.judge(config, underflow_cpu.base_lr, with_step(underflow_cpu.runner, NoScalerStep))
    assert not broken.passed
    assert broken.probe_deviation is not None and broken.probe_deviation > 50  # nothing learned at all
    scaled = underflow_cpu.judge(config, underflow_cpu.base_lr)
    assert scaled.passed, scaled.summary()
    bf16 = underflow_cpu.judge(Config(batch_size=16, amp="bf16"), underflow_cpu.base_lr)  # fp32's range: no underflow
    assert bf16.passed and bf16.family == "numerics", bf16.summary()


def test_nan_loss_fails_with_where_it_happened(underflow_cpu: Bench) -> None:
    verdict = underflow_cpu.judge(Config(batch_size=16, amp="bf16"), underflow_cpu.base_lr * 1e25)  # weights overflow
    assert not verdict.passed
    assert verdict.reason == "loss is nan after 32 samples"
    assert verdict.deviation is None


def test_other_initial_weights_are_not_the_same_start(underflow_cpu: Bench) -> None:
    def reseeded(config: Config, lr: float) -> tuple[Any, Step, float]:
        loader, step, seconds = underflow_cpu.runner.build(config, lr)
        torch.manual_seed(1)
        for p in step.model.parameters():
            torch.nn.init.normal_(p, std=0.1)
        return loader, step, seconds

    verdict = underflow_cpu.judge(Config(batch_size=16, amp="bf16"), underflow_cpu.base_lr, reseeded)
    assert not verdict.passed
    assert verdict.reason is not None and verdict.reason.startswith("not the same start")


# -- the run itself ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        Config(batch_size=16, placement="device"),
        Config(batch_size=16, num_workers=2, persistent_workers=True, prefetch_factor=2),
    ],
    ids=["device-resident", "persistent-workers"],
)
def test_same_data_order_whatever_the_loader(project: Path, config: Config) -> None:
    # The tiny workload shuffles; 8,192 samples are 16 epochs, so every epoch's order must agree.
    runner = Runner(load(resolve("tiny")), torch.device("cpu"))
    probe_set = parity.probe(runner.dataset)
    base = parity.run_trace(runner.build, Config(batch_size=16), 0.05, 8192, probe_set, 16)
    other = parity.run_trace(runner.build, config, 0.05, 8192, probe_set, 16)
    assert other.ends == base.ends and other.losses == base.losses
    assert (other.initial_loss, other.final_loss) == (base.initial_loss, base.final_loss)


def test_run_length_gives_a_large_batch_eight_steps() -> None:
    assert parity.run_length(128, 128) == (65536, 16384)
    assert parity.run_length(128, 8192) == (65536, 16384)
    assert parity.run_length(16, 4096) == (32768, 8192)


@pytest.mark.parametrize(
    ("candidate", "expected"),
    [
        (Config(batch_size=128, num_workers=4, pin_memory=True, prefetch_factor=2), "loader"),
        (Config(batch_size=128, placement="device"), "numerics"),
        (Config(batch_size=128, amp="bf16"), "numerics"),
        (Config(batch_size=1024), "batch_size"),
        (Config(batch_size=1024, amp="bf16", cuda_graph=True), "batch_size"),
    ],
)
def test_family_is_the_loosest_that_applies(candidate: Config, expected: str) -> None:
    assert parity.family(Config(batch_size=128), candidate) == expected


def test_deviation_is_measured_in_the_baseline_s_progress_or_what_it_has_left() -> None:
    assert parity.deviation(2.30, 2.26, 2.30) == pytest.approx(1.0)  # plateau: progress 0.04 is the unit
    assert parity.deviation(1.40, 0.01, 0.024) == pytest.approx(1.0)  # converged: 1% of 1.4, above the 0.01 left, is the unit
    assert parity.deviation(1.40, 0.70, 0.35) == pytest.approx(-0.5)  # learned more: progress 0.7 is the unit
    assert parity.deviation(1.40, 0.01, 0.0) == pytest.approx(-0.01 / 1.39)  # converged a little further: fine


def trace(losses: list[float], batch: int = 4, initial: float = 2.0, final: float | None = None, finite: bool = True) -> parity.Trace:
    ends = tuple(batch * (i + 1) for i in range(len(losses)))
    return parity.Trace(batch, 0.1, initial, losses[-1] if final is None else final, ends, tuple(losses), finite, 0.5)


def test_compare_weights_steps_by_the_samples_they_overlap() -> None:
    base = trace([2.0, 1.8, 1.6, 1.4, 1.2, 1.0, 1.0, 1.0], batch=4)  # 32 samples; window = the last 8
    big = trace([2.0, 1.0], batch=16)
    assert base.window_loss(24, 32) == pytest.approx(1.0)
    assert big.window_loss(24, 32) == pytest.approx(1.0)
    verdict = parity.compare(base, big, "batch_size", 32, 8)
    assert verdict.passed and verdict.deviation == pytest.approx(0.0) and verdict.loss == pytest.approx(1.0)


def test_compare_rejects_non_finite_parameters_and_a_non_finite_baseline() -> None:
    base = trace([2.0, 1.5, 1.0, 1.0])
    assert parity.compare(base, trace([2.0, 1.5, 1.0, 1.0], finite=False), "loader", 16, 4).reason == "parameters are NaN or inf after the run"
    inf = parity.compare(base, trace([2.0, math.inf, 1.0, 1.0]), "loader", 16, 4)
    assert inf.reason == "loss is inf after 8 samples"
    with pytest.raises(parity.ParityError, match="the baseline's own parity run is not finite"):
        parity.compare(trace([2.0, math.nan, 1.0, 1.0]), base, "loader", 16, 4)
    with pytest.raises(ValueError, match="both runs must reach 32 samples"):
        parity.compare(base, base, "loader", 32, 8)


# -- the gate the search uses --------------------------------------------------------------------


def fake_runs(losses: dict[int, float], fail: dict[int, str] | None = None) -> tuple[Callable[..., parity.Trace], list[Config]]:
    """A trace function whose final loss depends on the batch size; no training, every number chosen."""
    calls: list[Config] = []

    def run(config: Config, lr: float, samples: int) -> parity.Trace:
        calls.append(config)
        if fail and config.batch_size in fail:
            raise parity.TraceFailed(fail[config.batch_size])
        loss = losses[config.batch_size]
        return parity.Trace(config.batch_size, lr, 2.0, loss, (samples,), (loss,), True, 0.25)

    return run, calls


def test_gate_picks_the_fastest_that_pass_and_reuses_verdicts_of_equal_numerics() -> None:
    run, calls = fake_runs({16: 1.0, 64: 1.9, 32: 1.05, 8: 1.0})
    lines: list[str] = []
    fast_bad, same_numerics, same_batch, good, also_good = (
        Config(batch_size=64), Config(batch_size=64, num_workers=2, prefetch_factor=2), Config(batch_size=64, amp="bf16"),
        Config(batch_size=32), Config(batch_size=8),
    )
    ranked = [fast_bad, same_numerics, same_batch, good, also_good]
    gate = parity.Gate(Config(batch_size=16), lambda c: 0.1 * c.batch_size / 16, run, ranked, lines.append)
    assert (gate.samples, gate.window) == (8192, 2048)  # 512 baseline steps; 8 of the largest batch need less
    assert gate.select(ranked, want=2, max_runs=5) == [good, also_good]
    assert calls == [Config(batch_size=16), fast_bad, good, also_good]  # the baseline once; the twins not at all
    assert [gate.verdicts[c].passed for c in ranked] == [False, False, False, True, True]
    assert gate.verdicts[fast_bad].deviation == pytest.approx(0.9)  # (1.9 - 1.0) / progress 1.0
    assert gate.verdicts[good].lr == pytest.approx(0.2)
    assert lines[0].startswith("  parity REJECT  deviation +90.0%, probe +90.0% (tolerance ±25%, batch_size)")
    assert lines[1] == f"  parity REJECT  (same numerics as {fast_bad.describe()})  {same_numerics.describe()}"
    assert lines[2] == (f"  parity REJECT  (batch 64 at lr 0.4 is too far whatever the numerics: see {fast_bad.describe()})  "
                        f"{same_batch.describe()}")
    assert gate.summary().startswith("parity: 5 config(s) checked, 3 rejected; 3 run(s) and the baseline's took ")
    assert gate.select(ranked, want=3, max_runs=0) == [good, also_good]  # verdicts are kept: nothing runs again
    assert len(calls) == 4
    record = gate.record(good)
    assert record["checked"] and record["passed"] and record["configs_checked"] == 5 and record["configs_rejected"] == 3
    assert parity.validate_record("parity", record) == []


def test_gate_runs_a_batch_size_again_when_its_rejection_was_narrow() -> None:
    run, calls = fake_runs({16: 1.0, 64: 1.28})  # deviation 0.28: beyond 0.25, but within what numerics may move
    configs = [Config(batch_size=64), Config(batch_size=64, amp="bf16")]
    gate = parity.Gate(Config(batch_size=16), lambda c: 0.4, run, configs, lambda line: None)
    assert gate.select(configs, want=1, max_runs=5) == []
    assert len(calls) == 3


def test_gate_stops_after_max_runs_and_records_a_crashed_run() -> None:
    run, calls = fake_runs({16: 1.0, 32: 1.0}, fail={64: "oom"})
    configs = [Config(batch_size=64), Config(batch_size=32)]
    gate = parity.Gate(Config(batch_size=16), lambda c: 0.1, run, configs, lambda line: None)
    assert gate.select(configs, want=1, max_runs=1) == []
    assert gate.verdicts[Config(batch_size=64)].reason == "oom"
    assert len(calls) == 2  # the baseline and the one run allowed


def test_gate_raises_when_the_baseline_cannot_run() -> None:
    run, _ = fake_runs({}, fail={16: "crashed: trial process killed by signal SIGKILL"})
    gate = parity.Gate(Config(batch_size=16), lambda c: 0.1, run, [Config(batch_size=32)], lambda line: None)
    with pytest.raises(parity.ParityError, match="the baseline's parity run failed: crashed: trial process killed"):
        gate.select([Config(batch_size=32)], want=1, max_runs=3)


# -- the record in the tuned recipe --------------------------------------------------------------


GOOD_RECORD = {
    "checked": True, "passed": True, "family": "batch_size", "tolerance": 0.25, "samples": 65536, "window": 16384,
    "lr": 0.32, "baseline_lr": 0.01, "initial_loss": 2.30, "loss": 2.27, "baseline_loss": 2.26, "deviation": 0.155,
    "probe_loss": 2.237, "baseline_probe_loss": 2.238, "probe_deviation": -0.024, "run_s": 1.5,
    "configs_checked": 3, "configs_rejected": 1, "check_s": 12.5,
}


def test_validate_record_accepts_a_check_and_its_absence() -> None:
    assert parity.validate_record("p", GOOD_RECORD) == []
    assert parity.validate_record("p", {"checked": False}) == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"checked": "yes"}, "p.checked must be true or false, but got 'yes'"),
        ({"family": "amp"}, "p.family must be one of loader, numerics, batch_size, but got 'amp'"),
        ({"samples": 65536.5}, "p.samples must be int, but got 65536.5"),
        ({"passed": 1}, "p.passed must be bool, but got 1"),
        ({"window": 70000}, "`window <= samples` must hold in p, but got (window=70000, samples=65536)"),
        ({"deviation": 0.48}, "p says passed, but |deviation| = 0.48 exceeds its tolerance 0.25"),
        ({"configs_rejected": 4}, "`configs_rejected <= configs_checked` must hold in p, but got (configs_rejected=4, configs_checked=3)"),
        ({"colour": "red"}, "p has unknown key 'colour'; known: checked, passed, family"),
    ],
)
def test_validate_record_names_the_key_and_the_rule(change: dict[str, Any], problem: str) -> None:
    problems = parity.validate_record("p", {**GOOD_RECORD, **change})
    assert len(problems) == 1 and problems[0].startswith(problem)


def test_validate_record_lists_every_missing_key_and_refuses_extras_when_unchecked() -> None:
    assert parity.validate_record("p", {"checked": True}) == [
        f"p lacks {key!r}" for key in ("passed", "family", "tolerance", "samples", "window", "lr", "baseline_lr",
                                        "configs_checked", "configs_rejected", "check_s")
    ]
    assert parity.validate_record("p", {"checked": False, "passed": True}) == [
        "p says checked = false, so it must hold nothing else, but has ['passed']"
    ]


# -- on a GPU: real CUDA graphs, real fp16 -------------------------------------------------------


@pytest.fixture(scope="module")
def mnist_gpu(tmp_path_factory: pytest.TempPathFactory) -> Bench:
    root = tmp_path_factory.mktemp("data")
    write_synthetic_mnist(root)
    return Bench("mnist_cnn", "cuda", root, largest_batch=8192)


@pytest.mark.gpu
def test_gpu_cuda_graph_replaying_a_stale_input_fails(mnist_gpu: Bench) -> None:
    config = Config(batch_size=128, placement="device", cuda_graph=True)
    verdict = mnist_gpu.judge(config, 0.01, with_step(mnist_gpu.runner, StaleInputStep))
    assert not verdict.passed, verdict.summary()
    assert verdict.deviation is not None and verdict.deviation < -1.0


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("config", "lr"),
    [
        (Config(batch_size=128, placement="device", cuda_graph=True, cudnn_benchmark=True, amp="bf16"), 0.01),
        (Config(batch_size=128, pin_memory=True, num_workers=4, prefetch_factor=2, amp="fp16"), 0.01),
        (Config(batch_size=1024, placement="device", cuda_graph=True, cudnn_benchmark=True, amp="bf16"), 0.08),
    ],
    ids=["bs128-graph-bf16-device", "bs128-fp16-scaler-workers", "bs1024-linear-graph-bf16-device"],
)
def test_gpu_correct_configs_pass(mnist_gpu: Bench, config: Config, lr: float) -> None:
    verdict = mnist_gpu.judge(config, lr)
    assert verdict.passed, verdict.summary()


@pytest.mark.gpu
@pytest.mark.parametrize("lr", [0.01, 0.08, 0.5], ids=["unscaled", "capped-at-LR_MAX", "linear-capped-at-0.5"])
def test_gpu_mnist_batch_8192_fails(mnist_gpu: Bench, lr: float) -> None:
    verdict = mnist_gpu.judge(Config(batch_size=8192, placement="device", cuda_graph=True, amp="bf16"), lr)
    assert not verdict.passed, verdict.summary()


@pytest.mark.gpu
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_gpu_fp16_without_a_scaler_underflows(tmp_path_factory: pytest.TempPathFactory, graph: bool) -> None:
    bench = Bench(WORKLOADS / "underflow.py", "cuda", tmp_path_factory.mktemp("data"), largest_batch=16)
    config = Config(batch_size=16, placement="device", amp="fp16", cuda_graph=graph)
    broken = bench.judge(config, bench.base_lr, with_step(bench.runner, NoScalerStep))
    assert not broken.passed and broken.probe_deviation is not None and broken.probe_deviation > 50, broken.summary()
    scaled = bench.judge(config, bench.base_lr)
    assert scaled.passed, scaled.summary()
