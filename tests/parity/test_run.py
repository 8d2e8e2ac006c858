"""The parity check catches configs that train differently, and passes the ones that do not.

The broken configs are real bugs, built for real: a graph-style step whose static
input is never refreshed, fp16 without a GradScaler on a workload whose gradients
underflow, the seed's MNIST CNN at batch 8192 with its learning rate unscaled (and,
on a GPU, capped by LR_MAX). CPU runs are exact: the same seed gives the same numbers.
GPU runs (`pytest -m gpu tests/trial/test_parity_run.py`) use real CUDA graphs and fp16.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from _steps import NoScalerStep, with_step

from autotune.config import Config
from autotune.loop import Step
from autotune.parity import run as parity_run
from autotune.parity import verdict as parity
from autotune.trial.runner import Runner
from autotune.workloads import load, resolve
from autotune.workloads.datasets import write_synthetic_mnist

WORKLOADS = Path(__file__).parents[1] / "fixtures"


class StaleInputStep(Step):
    """A graph step whose static input is filled once and never refreshed: it trains on its first batch forever.

    With a CUDA graph the real graph replays over the stale buffers; without one
    (on a CPU) the same bug is emulated by keeping the first batch.
    """

    def __call__(self, batch: Any) -> torch.Tensor:
        if self.use_graph:
            if self.static is not None:
                batch = self.static  # copies the buffers onto themselves: the new batch never arrives
            return super().__call__(batch)
        if not hasattr(self, "first"):
            self.first = batch
        return super().__call__(self.first)


class Bench:
    """One workload's runner, probe set and baseline run, shared by the tests that judge candidates against it."""

    def __init__(
        self, runner: Runner, largest_batch: int, placement: str = "stream", baseline_rate: float | None = None
    ) -> None:
        """`baseline_rate`: the baseline trial's samples/s, which bounds the run as a search bounds a heavy model's."""
        self.runner = runner
        self.base_config = Config(batch_size=runner.workload.defaults["batch_size"])
        self.base_lr = float(runner.workload.defaults["lr"])
        self.samples, self.window = parity.run_length(self.base_config.batch_size, largest_batch, baseline_rate)
        self.probe = parity_run.probe(self.runner.dataset)
        # The baseline's run; `placement` may put its data on the device, which changes speed only where it trains
        # bitwise alike (on a CPU, with a deterministic transform: test_same_data_order_whatever_the_loader).
        self.base = self.run(
            Config(batch_size=self.base_config.batch_size, placement=placement), self.base_lr, self.runner.build
        )

    def run(self, config: Config, lr: float, build: parity_run.Builder) -> parity_run.ParityRun:
        return parity_run.train(build, config, lr, self.samples, self.probe, self.base_config.batch_size)

    def judge(self, config: Config, lr: float, build: parity_run.Builder | None = None) -> parity.ParityVerdict:
        trace = self.run(config, lr, build or self.runner.build)
        return parity.compare(self.base, trace, parity.family(self.base_config, config), self.samples, self.window)


def runner_for(workload_path: Path | str, device: str, root: Path) -> Runner:
    """The workload's runner on `device`, its data set under `root`."""
    return Runner(load(resolve(str(workload_path))), torch.device(device), root=root)


@pytest.fixture(scope="module")
def mnist_runner(tmp_path_factory: pytest.TempPathFactory) -> Runner:
    root = tmp_path_factory.mktemp("data")
    write_synthetic_mnist(root)  # the learnable synthetic MNIST, never a download: the numbers are fixed
    return runner_for("mnist_cnn", "cpu", root)


@pytest.fixture(scope="module")
def mnist_cpu(mnist_runner: Runner) -> Bench:
    """The full run that a batch of 8192 needs: 65,536 samples, its 8 steps and the baseline's 512."""
    # Device-resident, the baseline's run takes half the time on a CPU; its numbers are the streaming run's, bitwise.
    return Bench(mnist_runner, largest_batch=8192, placement="device")


@pytest.fixture(scope="module")
def mnist_cpu_bounded(mnist_runner: Runner) -> Bench:
    """The run cut as a search cuts a slow baseline's: what it trains in PARITY_BASELINE_S (45 s) at 364/s."""
    bench = Bench(mnist_runner, largest_batch=1024, placement="device", baseline_rate=364.1)
    assert (bench.samples, bench.window) == (16384, 4096)
    return bench


@pytest.fixture(scope="module")
def underflow_cpu(tmp_path_factory: pytest.TempPathFactory) -> Bench:
    return Bench(runner_for(WORKLOADS / "underflow.py", "cpu", tmp_path_factory.mktemp("data")), largest_batch=16)


# -- the real bugs, on a CPU ----------------------------------------------------------------------


@pytest.mark.slow  # with the baseline's, 16,384 samples of MNIST trained on a CPU, after the data set: 8-15 s
@pytest.mark.steady  # one thread (materialising through one worker it waits for): it may run beside the alone tests
def test_stale_static_input_fails(mnist_cpu_bounded: Bench) -> None:
    # Data on the device, as a graph step has it (and no PIL per step: the test runs in half the time).
    config = Config(batch_size=128, placement="device")
    verdict = mnist_cpu_bounded.judge(config, 0.01, with_step(mnist_cpu_bounded.runner, StaleInputStep))
    assert not verdict.passed
    assert verdict.family == "numerics"
    # Memorising one batch: its reported loss falls far below the baseline's. (The probe, drawn across the data
    # set, barely tells: one batch of this easy synthetic MNIST generalises about as well as 512 of them.)
    assert verdict.deviation is not None and verdict.deviation < -1.0


@pytest.mark.slow  # with the baseline's, 65,536 samples of MNIST trained on a CPU: 12-25 s
@pytest.mark.steady  # one thread (materialising through one worker it waits for): it may run beside the alone tests
def test_mnist_batch_8192_unscaled_lr_fails(mnist_cpu: Bench) -> None:
    verdict = mnist_cpu.judge(Config(batch_size=8192, placement="device"), 0.01)
    assert not verdict.passed
    assert verdict.family == "batch_size" and verdict.samples == 65536 and verdict.window == 16384
    # It learned nothing the baseline learned: a deviation of one full unit of progress.
    assert verdict.deviation is not None and verdict.deviation > 0.9
    assert verdict.probe_deviation is not None and verdict.probe_deviation > 0.9


@pytest.mark.steady  # one thread: it may run beside the alone tests
def test_mnist_correct_config_passes(mnist_cpu_bounded: Bench) -> None:
    # 8x the batch at 8x the learning rate (LR_MAX), data on the device: trains like the baseline to the end.
    verdict = mnist_cpu_bounded.judge(Config(batch_size=1024, placement="device"), 0.08)
    assert verdict.passed and verdict.family == "batch_size", verdict.summary()
    assert verdict.lr == 0.08 and verdict.baseline_lr == 0.01


@pytest.mark.steady  # a tiny model in this process, on one thread
def test_fp16_without_a_scaler_fails_on_a_workload_that_underflows(underflow_cpu: Bench) -> None:
    config = Config(batch_size=16, amp="fp16")
    broken = underflow_cpu.judge(config, underflow_cpu.base_lr, with_step(underflow_cpu.runner, NoScalerStep))
    assert not broken.passed
    assert broken.probe_deviation is not None and broken.probe_deviation > 50  # nothing learned at all
    scaled = underflow_cpu.judge(config, underflow_cpu.base_lr)
    assert scaled.passed, scaled.summary()
    bf16 = underflow_cpu.judge(Config(batch_size=16, amp="bf16"), underflow_cpu.base_lr)  # fp32's range: no underflow
    assert bf16.passed and bf16.family == "numerics", bf16.summary()


@pytest.mark.steady  # a tiny model in this process, on one thread
def test_nan_loss_fails_with_where_it_happened(underflow_cpu: Bench) -> None:
    verdict = underflow_cpu.judge(Config(batch_size=16, amp="bf16"), underflow_cpu.base_lr * 1e25)  # weights overflow
    assert not verdict.passed
    assert verdict.reason == "its loss became NaN at step 2 (32 samples in)"
    assert verdict.deviation is None


@pytest.mark.steady  # a tiny model in this process, on one thread
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
    probe_set = parity_run.probe(runner.dataset)
    base = parity_run.train(runner.build, Config(batch_size=16), 0.05, 8192, probe_set, 16)
    other = parity_run.train(runner.build, config, 0.05, 8192, probe_set, 16)
    assert other.ends == base.ends and other.losses == base.losses
    assert (other.initial_loss, other.final_loss) == (base.initial_loss, base.final_loss)


@pytest.fixture(scope="module")
def mnist_gpu(tmp_path_factory: pytest.TempPathFactory) -> Bench:
    root = tmp_path_factory.mktemp("data")
    write_synthetic_mnist(root)
    return Bench(runner_for("mnist_cnn", "cuda", root), largest_batch=8192)


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
    bench = Bench(runner_for(WORKLOADS / "underflow.py", "cuda", tmp_path_factory.mktemp("data")), largest_batch=16)
    config = Config(batch_size=16, placement="device", amp="fp16", cuda_graph=graph)
    broken = bench.judge(config, bench.base_lr, with_step(bench.runner, NoScalerStep))
    assert not broken.passed and broken.probe_deviation is not None and broken.probe_deviation > 50, broken.summary()
    scaled = bench.judge(config, bench.base_lr)
    assert scaled.passed, scaled.summary()
