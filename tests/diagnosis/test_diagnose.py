"""`autotune diagnose`: each verdict from fabricated numbers, CPU accounting, and a real run on the tiny workload."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.cli import main
from autotune.config import Config
from autotune.diagnosis.bottleneck import Measured, decide
from autotune.diagnosis.run import DiagnoseError, Diagnosis, Probe, diagnose
from autotune.diagnosis.tables import render
from autotune.trial.cputime import cpu_times
from autotune.trial.timing import Windows
from autotune.tuned import file as tuned_file

BS128 = Config(batch_size=128, pin_memory=True)
FAST = Windows(warmup_steps=2, window_s=0.1, min_windows=2, max_windows=3, boundaries=1)


@pytest.mark.parametrize(
    "measured,config,kind,knobs",
    [
        # The seed's MNIST CNN on an H200: the loader starves the step.
        (
            Measured(loop=14e3, input=17e3, compute=81e3, transfer=2e6, graphed=530e3, compute_gpu_util=40.0),
            BS128,
            "input-bound",
            (
                "num_workers (now 0)",
                "persistent_workers (with num_workers > 0)",
                "prefetch_factor (with num_workers > 0)",
                "placement=device (now stream)",
                "batch_size (now 128)",
            ),
        ),
        # Workers keep up, but copying unpinned batches takes most of the input side's time.
        (
            Measured(loop=9e3, input=10e3, compute=50e3, transfer=15e3),
            Config(batch_size=128, num_workers=8, prefetch_factor=2),
            "transfer-bound",
            ("pin_memory (now off)", "placement=device (now stream)", "batch_size (now 128)"),
        ),
        # The step is slower than the loader, and a captured graph runs it 4x faster: launches set the pace.
        (
            Measured(loop=20e3, input=200e3, compute=25e3, graphed=100e3, compute_gpu_util=90.0),
            BS128,
            "launch-bound",
            ("cuda_graph (now off)", "batch_size (now 128)"),
        ),
        # Already captured, and still the GPU idles on device-resident batches: the host is the limit.
        (
            Measured(loop=20e3, input=200e3, compute=25e3, compute_gpu_util=30.0),
            Config(batch_size=128, cuda_graph=True),
            "launch-bound",
            ("batch_size (now 128)",),
        ),
        # A busy GPU that a graph does not speed up: the kernels themselves set the pace.
        (
            Measured(loop=2e3, input=30e3, compute=2.1e3, graphed=2.2e3, compute_gpu_util=98.0),
            BS128,
            "compute-bound",
            ("amp (now off)", "channels_last (now off)", "cudnn_benchmark (now off)", "batch_size (now 128)"),
        ),
        # Data already on the device: no workers or pinning to advise.
        (
            Measured(loop=40e3, input=45e3, compute=90e3),
            Config(batch_size=128, placement="device"),
            "input-bound",
            ("batch_size (now 128)",),
        ),
    ],
    ids=["seed-input", "transfer", "launch-graph", "launch-util", "compute", "device-input"],
)
def test_verdict_from_measurements(measured: Measured, config: Config, kind: str, knobs: tuple[str, ...]) -> None:
    verdict = decide(measured, config)
    assert (verdict.kind, verdict.knobs) == (kind, knobs)


def test_seed_verdict_states_its_numbers_and_what_comes_next() -> None:
    verdict = decide(Measured(loop=14e3, input=17e3, compute=81e3, transfer=2e6, graphed=530e3), BS128)
    assert verdict.reason == "the loader feeds 17,000 samples/s, while the step could take 81,000 (4.8x more)"
    assert verdict.evidence == (
        "num_workers=0: loading and stepping take turns in the main process; 1/(1/17,000 + 1/81,000) = 14,051 "
        "samples/s predicts the loop's 14,000",
        "the host-to-device copy alone runs 2,000,000 samples/s: 1% of the input side's time per sample",
        "the graph-captured step on device-resident batches runs 530,000 samples/s, 6.5x the eager step",
    )
    assert verdict.next == (
        "past the loader, the eager step on device-resident batches tops out at 81,000 samples/s and is itself "
        "launch-bound: graph-captured it reaches 530,000 (6.5x), so placement=device with cuda_graph lifts both "
        "ceilings"
    )


def test_verdict_leaves_out_knobs_that_cannot_apply() -> None:
    measured = Measured(loop=250.0, input=1e5, compute=260.0, cuda=False)
    verdict = decide(
        measured,
        Config(batch_size=16),
        {"cudnn_benchmark": "needs CUDA", "channels_last": "input is not a 4-D image batch"},
    )
    assert (verdict.kind, verdict.knobs) == ("compute-bound", ("amp (now off)", "batch_size (now 16)"))


def test_verdict_without_a_ceiling_is_undetermined() -> None:
    verdict = decide(Measured(loop=1e3, input=2e3, compute=None), BS128)
    assert (verdict.kind, verdict.knobs) == ("undetermined", ())
    assert verdict.reason == "the compute ceiling (a) could not be measured; see the failures above."


def test_a_loop_stated_faster_than_its_loader_is_flagged_not_turned_into_a_verdict() -> None:
    """The streaming issue's H200 numbers: the loop at 2,144/s while its loader alone fed 943/s."""
    measured = Measured(loop=2144, input=943, compute=4661, loop_spread=0.10, input_spread=0.05, compute_spread=0.01)
    verdict = decide(measured, Config(batch_size=256, num_workers=4, pin_memory=True, prefetch_factor=2))
    assert (verdict.kind, verdict.knobs, verdict.next) == ("inconsistent", (), None)
    assert verdict.reason == (
        "the real loop (c) runs 2,144 samples/s, 227% of the input ceiling (b) (943), beyond their noise "
        "(±10%, ±5%); a loop cannot outrun its own ceiling, so one of these numbers is wrong"
    )
    # Within the feeds' noise (and 5% more), a loop a little above its ceiling is not a contradiction.
    within = Measured(loop=1000, input=943, compute=4661, loop_spread=0.02, input_spread=0.02)
    assert decide(within, BS128).kind == "input-bound"
    above_compute = Measured(loop=5200, input=9000, compute=4661)
    assert decide(above_compute, BS128).reason.startswith("the real loop (c) runs 5,200 samples/s, 112% of the compute")


def _burn_then_sleep() -> None:
    t = time.process_time()
    while time.process_time() - t < 0.4:
        pass
    time.sleep(60)


def test_cpu_times_count_live_and_reaped_children() -> None:
    """Children forked from this process (as DataLoader workers are); not one with a command line of its own."""
    import multiprocessing

    before = cpu_times()
    assert before.children_s is not None  # Linux: /proc is there
    other = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: pass"])  # a fork server, say
    child = multiprocessing.get_context("fork").Process(target=_burn_then_sleep)
    child.start()
    try:
        deadline = time.monotonic() + 20
        while (cpu_times().children_s or 0) - before.children_s < 0.35 and time.monotonic() < deadline:
            time.sleep(0.05)
        live = cpu_times().children_s - before.children_s  # type: ignore[operator]
    finally:
        child.kill()
        child.join()
    reaped = cpu_times().children_s - before.children_s  # type: ignore[operator]
    other.kill()
    other.wait()
    # The busy loop of the other ran all along, and is not counted while it lives.
    assert 0.35 <= live < 0.6 and reaped >= live - 0.02  # a reaped child's time comes in 10 ms ticks


def test_diagnose_on_a_cpu_runs_what_applies_and_says_what_it_skipped(project: Path) -> None:
    lines: list[str] = []
    d = diagnose("tiny", windows=FAST, echo=lines.append)
    assert (d.recipe, d.hardware, d.config, d.lr) == ("tiny", "cpu", Config(batch_size=16), 0.05)
    assert list(d.probes) == ["loop", "input", "compute"] and d.failed == {}
    assert d.skipped == {
        "GPU utilisation, peak GPU memory": "no CUDA device here",
        "host-to-device copy alone": "no host-to-device copy on a CPU",
        "graph-captured step": "CUDA graphs need a CUDA device",
    }
    # Without CUDA the verdict is the slower of the two ceilings; which one depends on this CPU. A shared CPU
    # can time the loop faster than a ceiling beyond the windows' noise: then the feeds are flagged, no verdict.
    m = d.measured
    if d.verdict.kind == "inconsistent":
        assert m.loop > min(m.input, m.compute), m  # type: ignore[type-var]
    else:
        assert d.verdict.kind == ("compute-bound" if m.input > m.compute else "input-bound")  # type: ignore[operator]
    assert not {"pin_memory", "cudnn_benchmark", "cuda_graph"} & {k.split()[0] for k in d.verdict.knobs}
    loop = d.probes["loop"]
    assert loop.gpu_util is None and loop.peak_memory_bytes is None and loop.main_cpu > 0.1 and loop.worker_cpu < 0.05  # type: ignore[operator]
    assert lines[
        0
    ] == "autotune diagnose: tiny on cpu (2 CPU cores), the workload's own settings: bs=16 workers=0".replace(
        "2 CPU cores", f"{d.cpu_cores} CPU cores"
    )
    assert [line.strip() for line in lines[1::2]] == [
        "[1/3] the real loop ...",
        "[2/3] the real loader with the model removed, batches copied to the device ...",
        "[3/3] the same step on synthetic batches already on the device ...",
    ]
    text = render(d)
    assert f"verdict: {d.verdict.title}" in text
    assert "  graph-captured step: CUDA graphs need a CUDA device" in text


def test_the_health_check_names_a_loss_that_became_nan_and_where(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TINY_FAIL", "nan")  # tests/fixtures/tiny.py: its output is NaN from the 37th training step on
    monkeypatch.setenv("TINY_NAN_BATCH", "1")
    monkeypatch.setenv("TINY_NAN_STEP", "37")
    result = CliRunner().invoke(main, ["diagnose", "--recipe", "tiny"])
    assert result.exit_code == 0, result.output
    loss = [line for line in result.stdout.splitlines() if line.startswith("  loss ")]
    assert len(loss) == 1 and re.fullmatch(
        r"  loss +became NaN at step 37 of [\d,]+: these settings diverge; fix the workload \(its learning rate, its "
        r"data\), or they train nothing, however fast", loss[0]), result.stdout
    monkeypatch.delenv("TINY_FAIL")
    healthy = diagnose("tiny", windows=FAST, echo=lambda _: None)
    assert re.fullmatch(r"finite at every one of its [\d,]+ steps", healthy.loss), healthy.loss


def _probe(label: str, rate: float, util: float, low: float, memory: int | None = None) -> Probe:
    return Probe(label, rate, rate * 0.98, 0.012, 0.05, util, low, 1.0, 0.0, memory, 2.0)


def test_render_of_a_gpu_diagnosis_reads_at_a_glance() -> None:
    probes = {
        "loop": _probe("(c) the real loop", 14_210, 23, 0.88, 47 * 2**20),
        "input": _probe("(b) the real loader, no model", 17_050, 5, 1.0),
        "transfer": _probe("    the host-to-device copy alone", 3.1e6, 40, 0.6),
        "compute": _probe("(a) synthetic batches on the device", 81_000, 61, 0.3),
        "graphed": _probe("    the same step, graph-captured", 530_000, 97, 0.0),
    }
    measured = Measured(loop=14_210, input=17_050, compute=81_000, transfer=3.1e6, graphed=530_000, compute_gpu_util=61)
    d = Diagnosis(
        "mnist_cnn",
        "NVIDIA H200",
        "cuda:0",
        16,
        "the workload's own settings",
        BS128,
        0.01,
        probes,
        {},
        {"graphed": "error: RuntimeError: capture failed"},
        measured,
        decide(measured, BS128),
        21.0,
    )
    lines = render(d).splitlines()
    assert "  samples/s, end to end  13,926 (a fresh epoch costs 0.05 s more)" in lines
    probes["loop"] = dataclasses.replace(probes["loop"], whole_epochs=True)
    whole = "epochs timed whole, each start included: too short for steady windows beside the prefetched batches"
    assert f"  samples/s, end to end  13,926 ({whole})" in render(d).splitlines()
    assert lines[0] == "mnist_cnn on NVIDIA H200 (16 CPU cores), the workload's own settings: bs=128 workers=0 pinned"
    assert "  GPU utilisation        mean 23%; 88% of samples under 50%" in lines
    assert "  peak GPU memory        47 MiB allocated by tensors" in lines
    assert "  CPU, loader workers    none (num_workers=0: the main process loads)" in lines
    assert "  (b) the real loader, no model           17,050    1.20x        5%      1.00         0.00" in lines
    assert "      the same step, graph-captured      530,000   37.30x       97%      1.00         0.00" in lines
    assert "verdict: input-bound: the loader cannot feed the step" in lines
    assert "  the same step on the device, captured in a CUDA graph: error: RuntimeError: capture failed" in lines
    assert lines[-1] == "diagnosed in 21 s"


def _write_profile(project: Path, hardware: str, config: Config) -> None:
    profile = {
        "samples_per_s": 1000.0,
        "baseline_samples_per_s": 500.0,
        "speedup": 2.0,
        "lr": 0.1,
        "knobs": tuned_file.config_to_knobs(config),
        "versions": {"torch": "test"},
    }
    tuned_file.write_profile(project / "recipes" / "tiny.tuned.toml", "tiny", hardware, profile)


def test_diagnose_command_with_the_tuned_profile(project: Path) -> None:
    _write_profile(project, "cpu", Config(batch_size=32, num_workers=2, persistent_workers=True, prefetch_factor=2))
    result = CliRunner().invoke(main, ["diagnose", "--recipe", "tiny", "--profile"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.startswith("tiny on cpu (")
    assert "the tuned profile for cpu: bs=32 workers=2 persistent prefetch=2" in out.splitlines()[0]
    assert "cores over 2 workers" in out and "stage 2, attribution" in out and "verdict: " in out
    assert "[1/3] the real loop ..." in result.stderr and "[1/3]" not in out


def test_diagnose_profile_needs_a_tuned_recipe(project: Path) -> None:
    with pytest.raises(
        DiagnoseError,
        match=r"--profile: there is no tuned file at .*tiny\.tuned\.toml; run `autotune search --recipe tiny` first",
    ):
        diagnose("tiny", profile=True, echo=lambda _: None)
    _write_profile(project, "NVIDIA H200", Config(batch_size=32))
    with pytest.raises(DiagnoseError, match=r"has no profile for 'cpu' \(profiles: 'NVIDIA H200'\)"):
        diagnose("tiny", profile=True, echo=lambda _: None)


def test_diagnose_command_rejects_an_unknown_recipe(project: Path) -> None:
    result = CliRunner().invoke(main, ["diagnose", "--recipe", "nope"])
    assert result.exit_code == 2 and "unknown recipe 'nope'" in result.output and "Traceback" not in result.output


@pytest.mark.gpu
def test_diagnose_mnist_on_a_gpu_finds_the_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # keeps AUTOTUNE_DATA (or ./data) as the caller set it
    d = diagnose("mnist_cnn", echo=lambda _: None)
    assert d.verdict.kind == "input-bound" and d.failed == {} and d.seconds < 60
    assert d.measured.graphed > 2 * d.measured.compute > 2 * d.measured.loop  # type: ignore[operator]
