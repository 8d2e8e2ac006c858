"""The benchmark scripts' loops run on a CPU: they only run on a GPU host otherwise, where a broken one costs a call.

Seen on an H200: `benchmarks/speed.py` ran its three searches (288 s), then failed at its first row, because
its seed loop still took `(x, y)` where a measurement hands a step one batch.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import re
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from autotune.config import Config
from autotune.trial.timing import Windows
from autotune.workloads import load, resolve

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _script(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("BENCH_DEVICE", "cpu")
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def _truth(module: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A module of truth.py's package (benchmarks/truthbench), imported as truth.py imports it: by its folder."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module(f"truthbench.{module}")


def test_speed_times_the_seeds_loop_as_written_and_runs_it_end_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    speed = _script("speed", monkeypatch)
    monkeypatch.setattr(speed, "WINDOWS", Windows(warmup_steps=2, window_s=0.05, min_windows=3, max_windows=4))
    images = TensorDataset(torch.rand(512, 1, 28, 28), torch.randint(0, 10, (512,)))
    assert speed.rate_of(*speed.seed_loop_as_written(images)) > 0
    step, loader = speed.seed_loop_as_written(images)
    assert speed.whole_run(step, loader, epochs=1) > 0
    assert loader.batch_size == 128 and loader.num_workers == 0  # the seed's loop, as written


def test_truth_times_a_config_by_hand(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loop = _truth("loop", monkeypatch)
    config = Config(batch_size=32, num_workers=2, prefetch_factor=2, persistent_workers=True)
    result = loop.by_hand(load(resolve("tiny")), config, 0.05, 0.5, torch.device("cpu"))
    assert result["seconds"] >= 0.5
    assert result["samples"] > 0 and result["samples"] % 32 == 0  # whole batches of 32 (of a data set of 512)
    assert result["samples_per_s"] == pytest.approx(result["samples"] / result["seconds"])
    # Epochs of 16 batches, far shorter than the loop: it stops after whole epochs' worth of them.
    epochs = result["epochs_worth"]
    assert epochs is not None and epochs >= 1 and result["samples"] == epochs * 512


def test_truth_times_on_to_whole_epochs_worth_of_batches_unless_that_takes_too_long(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = _truth("loop", monkeypatch)
    # 15 workers on an H200: 117 of 200 batches in 10 s; the other 83 take about 7 s more, under 30 s in all.
    assert loop.more_batches(10.0, 117, 200, longest=30.0) == 83
    assert loop.more_batches(10.0, 200, 200, longest=30.0) == 0  # already one epoch's worth
    assert loop.more_batches(10.5, 201, 200, longest=30.0) == 199  # to two epochs' worth, by about 21 s
    # The workload's own settings: 36 of 200 batches in 10 s; an epoch's worth would take 56 s, past 30 s.
    assert loop.more_batches(10.0, 36, 200, longest=30.0) == 0
    assert loop.more_batches(20.0, 201, 200, longest=30.0) == 0  # two epochs' worth by about 40 s: past 30 s
    # 8 workers, prefetch 8: 62 of 200 batches in 10 s, an epoch's worth by about 32 s. A slice of a 30 s row may run
    # on for up to 3x the row's 30 s: 90 s.
    assert loop.more_batches(10.0, 62, 200, longest=30.0) == 0
    assert loop.more_batches(10.0, 62, 200, longest=90.0) == 138
    # By default, a loop timed for `seconds` runs on for at most LONGEST times them.
    assert loop.LONGEST == 3.0


def test_truth_joins_the_hand_loops_slices_over_all_their_times_and_states_how_far_the_host_moved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    timings = _truth("timings", monkeypatch)
    # 15 s at 900/s before autotune's measurement (one boundary), 15 s at 1,100/s after it (none).
    before = {"samples": 13500, "seconds": 15.0, "samples_per_s": 900.0, "within_samples": 12000,
              "within_seconds": 12.5, "boundaries": 1, "timeline": [900.0, 900.0, 900.0], "epochs_worth": None,
              "workers_cpu_ms": 4.4, "main_cpu_ms": 0.5}
    after = {"samples": 16500, "seconds": 15.0, "samples_per_s": 1100.0, "within_samples": 15000,
             "within_seconds": 13.5, "boundaries": 0, "timeline": [1100.0, 1100.0, 1100.0], "epochs_worth": None,
             "workers_cpu_ms": 3.6, "main_cpu_ms": 0.5}
    hand = timings.joined([before, after])
    assert hand["samples_per_s"] == 1000.0 and hand["seconds"] == 30.0
    assert hand["steady_samples_per_s"] == pytest.approx(27000 / 26.0)
    assert hand["boundary_s"] == pytest.approx(30.0 - 30000 / (27000 / 26.0))  # the one boundary's cost
    assert hand["slices"] == [900.0, 1100.0] and hand["drift"] == pytest.approx(2 / 9)
    assert hand["timeline"] == [900.0] * 3 + [1100.0] * 3
    # A third slice between them, at 1,000/s: the host moved by the fastest over the slowest, in whichever order.
    middle = {**before, "samples": 15000, "samples_per_s": 1000.0, "boundaries": 0}
    three = timings.joined([after, middle, before])
    assert three["samples_per_s"] == 1000.0 and three["seconds"] == 45.0 and three["drift"] == pytest.approx(2 / 9)


def test_truth_times_the_hand_loop_in_a_process_of_its_own(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    processes = _truth("processes", monkeypatch)  # the child imports it by name, as truth.py's children do
    config = Config(batch_size=32, num_workers=2)  # its DataLoader workers start as a script's do, by fork
    result = processes.in_a_fresh_process(resolve("tiny").workload_path, config, 0.05, 0.5, torch.device("cpu"))
    assert result["seconds"] >= 0.5 and result["samples"] > 0 and result["samples"] % 32 == 0
    assert result["samples_per_s"] == pytest.approx(result["samples"] / result["seconds"])
    assert result["steady_samples_per_s"] is not None and result["boundaries"] >= 1  # 512 samples: 16 batches an epoch


class SlowStart(Dataset):
    """`n` samples at `sample_s` each; a worker's first sample waits 0.3 s more: without persistent workers, every
    epoch's workers start afresh and pay it, at the epoch's boundary."""

    def __init__(self, n: int = 64, sample_s: float = 0.002) -> None:
        self.n, self.sample_s = n, sample_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if not getattr(self, "started", False):
            time.sleep(0.3)
            self.started = True
        time.sleep(self.sample_s)
        return torch.zeros(4), i % 2


def _slow_start_workload(dataset: Dataset) -> SimpleNamespace:
    return SimpleNamespace(build_model=lambda: nn.Linear(4, 2), build_loss=nn.CrossEntropyLoss,
                           build_optimizer=lambda params, lr: torch.optim.SGD(params, lr=lr),
                           build_dataset=lambda root: dataset)


# Not `alone`: its loader sleeps, and it passed 5 of 5 beside two busy cores (it needs 20 batches of 60 in 0.6 s).
def test_truth_times_an_epoch_a_little_longer_than_its_seconds_whole_boundary_included(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = _truth("loop", monkeypatch)
    # 60 batches an epoch of 16 ms each (two workers, 4 ms a sample), the first 18 taken untimed: the other 42 take
    # 0.67 s, so a loop stopped on the clock at 0.6 s never pays the 0.3 s its fresh workers cost at the boundary
    # (it read 1.33x autotune's measurement of it on the 2-core machine; whole epochs' worth, 0.97-0.99x).
    config = Config(batch_size=8, num_workers=2, prefetch_factor=2)
    result = loop.by_hand(_slow_start_workload(SlowStart(480, 0.004)), config, 0.1, 0.6, torch.device("cpu"))
    assert result["epochs_worth"] == 1.0 and result["samples"] == 480 and result["boundaries"] == 1
    assert result["seconds"] >= 0.6 + 0.3  # the boundary's start-up paid within the timed part


# Not `alone`: its loader sleeps (one core idles while it runs). A slice of the row runs on if its first 0.67 s put an
# epoch's worth within 6 s; on the 2-core machine they put it at 2.0-2.8 s, beside two busy loops too.
def test_truth_times_every_slice_of_a_row_to_whole_epochs_worth_where_the_first_can_within_3x_the_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop, rows = _truth("loop", monkeypatch), _truth("rows", monkeypatch)
    # As for 8 workers with prefetch 8 on an H200, each slice's first timed batch is near its epoch's end: 50 batches
    # an epoch, 16 ms each at best; 38 taken untimed (10 warm-up, twice the 14 held ready), so it is the 39th. Its
    # 12 batches to the boundary, then the 0.3 s and more that its fresh workers take to start, take about 0.65 s:
    # cut on the clock there, a slice pays a boundary that a training run pays once in about 1.5 s. A 0.5 s slice's
    # 13 batches put an epoch's worth at about 2.5 s, past 3x its share; a row's may run on for 3x the row (6 s).
    workload = _slow_start_workload(SlowStart(400, 0.004))
    config = Config(batch_size=8, num_workers=2, prefetch_factor=7)
    limits: list[float | None] = []

    def hand_loop(path: Path, config: Config, lr: float, seconds: float, device: torch.device, *limit) -> dict:
        limits.append(limit[0] if limit else None)
        return loop.by_hand(workload, config, lr, seconds, device, *limit)

    measured = {"samples_per_s": 300.0, "steady_samples_per_s": 400.0, "spread": 0.02, "window_rates": [400.0]}
    monkeypatch.setattr(rows, "in_a_fresh_process", hand_loop)
    monkeypatch.setattr(rows, "by_autotune", lambda *args: measured)  # a trial process on the real workload
    args = SimpleNamespace(seconds=2.0, rounds=2, no_bracket=False, out=Path("."))
    row = rows.compared("2 workers", config, 0.1, Path("unused"), args, torch.device("cpu"))
    assert row["hand_whole_epochs"] is True and row["hand_boundaries"] == 3  # one epoch's worth a slice, as a run
    assert row["hand"] == pytest.approx(3 * 400 / row["hand_seconds"])
    assert row["autotune"] == 300.0 and row["ratio"] == pytest.approx(300.0 / row["hand"])
    # The first slice may run on for 3x the row's seconds; the others do as it did, however long that takes them.
    assert limits == [6.0, math.inf, math.inf]
    # A slice allowed 3x its own share only, as a row's slices were: cut on the clock just past the boundary.
    cut = loop.by_hand(workload, config, 0.1, 0.5, torch.device("cpu"))
    assert cut["epochs_worth"] is None and cut["boundaries"] == 1 and cut["samples"] < 400


def _slice(epochs_worth: float | None) -> dict:
    return {"samples": 4000, "seconds": 10.0, "samples_per_s": 400.0, "within_samples": 0, "within_seconds": 0.0,
            "boundaries": 0, "timeline": [400.0, 400.0], "epochs_worth": epochs_worth, "workers_cpu_ms": None,
            "main_cpu_ms": 0.5}


@pytest.mark.parametrize(("first", "then"), [(2.0, math.inf), (None, 0.0)])
def test_truth_slices_after_the_first_run_on_to_whole_epochs_worth_as_it_did_or_stop_on_the_clock_as_it_did(
    monkeypatch: pytest.MonkeyPatch, first: float | None, then: float,
) -> None:
    rows = _truth("rows", monkeypatch)
    limits: list[float | None] = []

    def hand_loop(path: Path, config: Config, lr: float, seconds: float, device: torch.device,
                  longest: float | None = None) -> dict:
        limits.append(longest)
        return _slice(first if len(limits) == 1 else None)

    measured = {"samples_per_s": 400.0, "steady_samples_per_s": 400.0, "spread": 0.02, "window_rates": [400.0]}
    monkeypatch.setattr(rows, "in_a_fresh_process", hand_loop)
    monkeypatch.setattr(rows, "by_autotune", lambda *args: measured)
    args = SimpleNamespace(seconds=30.0, rounds=2, no_bracket=False, out=Path("."))
    rows.compared("own", Config(batch_size=256, num_workers=4), 0.1, Path("unused"), args, torch.device("cpu"))
    assert limits == [90.0, then, then]
    # In one piece after autotune's measurements: as a lone hand loop, up to 3x its seconds.
    limits.clear()
    args = SimpleNamespace(seconds=30.0, rounds=2, no_bracket=True, out=Path("."))
    rows.compared("own", Config(batch_size=256, num_workers=4), 0.1, Path("unused"), args, torch.device("cpu"))
    assert limits == [90.0]


def test_truth_states_a_trials_epoch_boundary_as_it_reads_the_hand_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hand loop's boundary is its epoch's time less its samples at the rate within epochs: the start and the
    drain of the last batches together. A trial's `epoch_overhead_s` is the start alone: call 62's 8-worker row
    printed 0.49 s against 1.86 s by hand, where its rates end to end and within epochs (1,910/s and 1,871/s, an
    epoch of 51,200 samples) put it at -0.56 s read the hand loop's way: a gap of 2.4 s, not 1.4 s."""
    timings = _truth("timings", monkeypatch)
    trial = {"samples_per_s": 1910.0, "steady_samples_per_s": 1871.0, "epoch_s": 51200 / 1910.0,
             "epoch_overhead_s": 0.49, "whole_epochs": False}
    # A hand loop over that one epoch, at those rates, crossing one boundary: its cost as the hand loop's is read.
    by_hand = timings._boundary_cost(51200 / 1910.0, 51200, 1871.0, 1)
    assert timings.boundary_as_by_hand(trial) == pytest.approx(by_hand) == pytest.approx(-0.559, abs=1e-3)
    assert timings.boundary_as_by_hand({**trial, "whole_epochs": True}) is None  # no rate within epochs to read by


@pytest.mark.alone
def test_truth_splits_the_hand_loop_into_its_rate_within_epochs_and_what_each_boundary_costs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = _truth("loop", monkeypatch)
    workload = _slow_start_workload(SlowStart())
    config = Config(batch_size=8, num_workers=2, prefetch_factor=2)  # 8 batches an epoch, 4 held ready
    result = loop.by_hand(workload, config, 0.1, 3.0, torch.device("cpu"))
    # Within an epoch two workers make a batch of 8 in 16 ms each: about 1,000 samples/s; each boundary adds 0.3 s.
    assert result["boundaries"] >= 4
    assert 0.25 <= result["boundary_s"] <= 0.6
    assert result["steady_samples_per_s"] > 3 * result["samples_per_s"]
    # Per 5 s: the 3 s of the loop in one bin, at the loop's own rate.
    assert result["timeline"] == [pytest.approx(result["samples_per_s"], rel=0.05)]


def test_truth_hands_the_device_uint8_pixels_and_normalises_there_as_the_pipeline_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torchvision import datasets
    from torchvision import transforms as T

    data, loop = _truth("data", monkeypatch), _truth("loop", monkeypatch)
    pipeline = T.Compose([T.RandomResizedCrop(8), T.ToTensor(), T.Normalize((0.5, 0.4, 0.3), (0.2, 0.3, 0.4))])
    images = datasets.FakeData(size=16, image_size=(3, 20, 12), num_classes=2, transform=pipeline)
    pixels, collate, finish = data.uint8_pixels(images, torch.device("cpu"))
    assert collate is None and images.transform is pipeline  # the workload's data set keeps its own transform
    torch.manual_seed(5)
    want = torch.stack([images[i][0] for i in range(4)])
    torch.manual_seed(5)
    got = finish(torch.stack([pixels[i][0] for i in range(4)]))
    assert torch.equal(got, want)
    workload = SimpleNamespace(build_model=lambda: nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 2)),
                               build_loss=nn.CrossEntropyLoss, build_dataset=lambda root: images,
                               build_optimizer=lambda params, lr: torch.optim.SGD(params, lr=lr))
    config = Config(batch_size=4, num_workers=2, prefetch_factor=2, device_normalize=True)
    result = loop.by_hand(workload, config, 0.1, 0.5, torch.device("cpu"))
    assert result["samples"] > 0 and result["samples"] % 4 == 0


def test_truth_keeps_a_device_placed_data_set_on_the_device_and_slices_a_fresh_permutation_each_epoch(
    project: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before, a placement = device config was timed by hand through a DataLoader reading sample by sample: on the
    # 2-core CPU, mnist_cnn's winner read 2.18 times its hand loop, two different loops compared.
    data, loop = _truth("data", monkeypatch), _truth("loop", monkeypatch)
    resident = data.OnDevice(TensorDataset(torch.arange(10.0).unsqueeze(1), torch.arange(10)), 4, torch.device("cpu"))
    torch.manual_seed(0)
    first = list(resident)
    assert len(resident) == 3 and [len(y) for _, y in first] == [4, 4, 2]
    assert sorted(torch.cat([y for _, y in first]).tolist()) == list(range(10))  # each sample once an epoch
    assert all(torch.equal(x.squeeze(1), y.float()) for x, y in first)  # inputs and targets stay paired
    assert torch.cat([y for _, y in first]).tolist() != torch.cat([y for _, y in resident]).tolist()  # reshuffled
    config = Config(batch_size=32, placement="device")
    result = loop.by_hand(load(resolve("tiny")), config, 0.05, 0.5, torch.device("cpu"))
    assert result["samples"] > 0 and result["epochs_worth"] is not None
    augmented = SimpleNamespace(path=Path("augmented.py"), deterministic_transform=None)
    with pytest.raises(ValueError, match=r"DETERMINISTIC_TRANSFORM = True\), but augmented.py does not declare it"):
        loop.hand_loader(augmented, None, config, torch.device("cpu"))


# A package's modules (truthbench/, truth.py's parts) are imported by their script, not run: they are checked apart.
PACKAGES = sorted(path.parent for path in BENCHMARKS.rglob("__init__.py"))
MODULES = sorted(path for path in BENCHMARKS.rglob("*.py") if any(package in path.parents for package in PACKAGES))
SCRIPTS = sorted(path for path in BENCHMARKS.rglob("*.py") if path not in MODULES)
SHELL_SCRIPTS = sorted(BENCHMARKS.glob("*.sh"))


def test_benchmarks_holds_only_what_a_user_runs_and_the_lab_holds_the_rest() -> None:
    names = {path.relative_to(BENCHMARKS).as_posix() for path in BENCHMARKS.rglob("*") if path.is_file()}
    assert not {name for name in names if name.startswith(("probes/", "results/"))}
    assert {"speed.py", "truth.py"} <= names


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda path: path.relative_to(BENCHMARKS).as_posix())
def test_every_benchmark_script_imports_without_running(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing a script defines its functions and runs nothing: each starts its work under `__main__`."""
    monkeypatch.setenv("BENCH_DEVICE", "cpu")
    monkeypatch.setattr(sys, "argv", [str(path)])  # a script that parsed arguments on import would find none
    monkeypatch.syspath_prepend(str(path.parent))
    spec = importlib.util.spec_from_file_location(f"bench_import_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    source = path.read_text()
    assert 'if __name__ == "__main__":' in source or not hasattr(module, "main")


@pytest.mark.parametrize("path", MODULES, ids=lambda path: path.relative_to(BENCHMARKS).as_posix())
def test_every_module_of_a_benchmark_package_imports_as_its_script_imports_it(
    path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # a script's own folder is first on its path
    importlib.import_module(".".join(path.relative_to(BENCHMARKS).with_suffix("").parts).removesuffix(".__init__"))


def test_no_benchmark_module_is_over_400_lines() -> None:
    """One job a module: a script that outgrows that becomes a small package beside it (truth.py's truthbench/)."""
    lengths = {path.relative_to(BENCHMARKS).as_posix(): len(path.read_text().splitlines())
               for path in SCRIPTS + MODULES}
    assert not {name: n for name, n in lengths.items() if n > 400}
    assert "truthbench/loop.py" in lengths


@pytest.mark.parametrize("path", SHELL_SCRIPTS, ids=lambda path: path.name)
def test_every_benchmark_shell_script_parses(path: Path) -> None:
    result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_runners_name_only_scripts_that_exist() -> None:
    repo = BENCHMARKS.parent
    for path in SHELL_SCRIPTS:
        for name in re.findall(r"\$REPO/([\w/.-]+\.py)", path.read_text()):
            assert (repo / name).is_file(), f"{path.name} runs {name}, which is not there"


def test_the_package_imports_nothing_from_the_lab() -> None:
    package = BENCHMARKS.parent / "autotune"
    for path in package.rglob("*.py"):
        assert not re.search(r"^\s*(from|import)\s+lab\b", path.read_text(), re.MULTILINE), path


def test_truth_s_hybrid_hand_loop_gives_its_workers_uint8_pixels_as_autotune_s_loader_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its workers once ran the pipeline's float tail: on an H100 that hand loop ran 3,046/s beside autotune's
    4,483/s for the same config. Now the host half is uint8, finished on the device into the pipeline's floats."""
    from torchvision import datasets
    from torchvision import transforms as T
    from torchvision.io import encode_jpeg

    data = _truth("data", monkeypatch)
    for cls in range(2):
        (tmp_path / f"c{cls}").mkdir()
        for i in range(6):
            image = (torch.rand(3, 40, 48, generator=torch.Generator().manual_seed(10 * cls + i)) * 255).byte()
            (tmp_path / f"c{cls}" / f"{i}.JPEG").write_bytes(encode_jpeg(image).numpy().tobytes())
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(mean, std)])
    folder = datasets.ImageFolder(str(tmp_path), transform=tf)
    host, finish = data.hybrid_host(folder, torch.device("cpu"))
    torch.manual_seed(3)
    pixels, target = host[5]
    torch.manual_seed(3)
    floats, _ = folder[5]
    assert pixels.dtype == torch.uint8 and target == folder.targets[5]
    assert torch.allclose(finish(pixels[None])[0], floats, atol=1e-5)
    # A pipeline with a tail of the user's own: the workers run all of it, and the device does nothing more.
    own = datasets.ImageFolder(str(tmp_path), transform=T.Compose([T.RandomResizedCrop(32), T.ToTensor()]))
    assert data.hybrid_host(own, torch.device("cpu")) == (own, None)


@pytest.mark.gpu
def test_gpu_the_hand_loops_graph_trains_as_its_eager_step_and_steps_a_short_batch_eagerly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two copies of one model from one init, on the same batches: one by the eager step, one through the hand loop's
    # CUDA graph (three warm-up steps, the capture, replays), then a short batch each. The parameters agree.
    loop = _truth("loop", monkeypatch)
    device = torch.device("cuda")
    torch.manual_seed(0)
    made = [torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(), torch.nn.LazyLinear(4)).to(device)
            for _ in range(2)]
    made[0](torch.zeros(1, 3, 8, 8, device=device))
    made[1](torch.zeros(1, 3, 8, 8, device=device))
    made[1].load_state_dict(made[0].state_dict())
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in made]
    criterion = torch.nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(n, 3, 8, 8, generator=g), torch.randint(0, 4, (n,), generator=g)) for n in [16] * 8 + [5]]

    def eager(model: torch.nn.Module, optimizer: torch.optim.Optimizer, set_to_none: bool = True) -> Any:
        def step(batch: Any) -> None:
            x, y = (t.to(device) for t in batch)
            optimizer.zero_grad(set_to_none=set_to_none)
            criterion(model(x), y).backward()
            optimizer.step()
        return step

    graphed = loop.Graphed(made[1], criterion, optimizers[1], None, eager(made[1], optimizers[1], set_to_none=False))
    step = graphed.step_from(lambda batch: tuple(t.to(device) for t in batch))
    for batch in batches:
        eager(made[0], optimizers[0])(batch)
        step(batch)
    torch.cuda.synchronize()
    assert graphed.graph is not None and graphed.warmed == loop.Graphed.WARMUP
    for a, b in zip(made[0].parameters(), made[1].parameters()):
        assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()
