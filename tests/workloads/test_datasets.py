"""Offline, the built-in data sets are synthetic files in torchvision's own layout, loaded by torchvision."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torchvision import datasets, transforms

from autotune.workloads import datasets as ours


def test_synthetic_mnist_loads_through_torchvision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ours, "_announced", set())
    monkeypatch.setattr(datasets.MNIST, "mirrors", ["http://127.0.0.1:9/"])  # nothing listens on the discard port
    ds = ours.mnist(tmp_path, train=True, transform=transforms.ToTensor())
    assert type(ds) is datasets.MNIST and len(ds) == 60_000
    x, y = ds[0]
    assert x.shape == (1, 28, 28) and x.dtype == torch.float32 and 0 <= y < 10
    assert (tmp_path / "MNIST" / "raw" / ours.SYNTHETIC_MARK).exists()
    assert capsys.readouterr().err.count("using a synthetic MNIST of the same shape") == 1
    ours.mnist(tmp_path)  # the second time: the files are there, and it was said already
    assert capsys.readouterr().err == ""


def test_synthetic_data_is_learnable_classes_differ() -> None:
    images, labels = ours._patterns(2000, (8, 8), 4, seed=0)
    means = torch.stack([torch.from_numpy(images[labels == c]).float().mean(0) for c in range(4)])
    assert (means[0] - means[1]).abs().mean() > 10  # class prototypes, in grey levels, far above the noise of a mean


def test_synthetic_cifar10_keeps_the_pil_path(tmp_path: Path) -> None:
    ours.write_synthetic_cifar10(tmp_path, n_train=500, n_test=100)
    ds = ours.cifar10(
        tmp_path,
        train=True,
        transform=transforms.Compose([transforms.RandomCrop(32, padding=4), transforms.ToTensor()]),
    )
    assert isinstance(ds, datasets.CIFAR10) and len(ds) == 500
    x, _ = ds[3]
    assert x.shape == (3, 32, 32)


@pytest.mark.slow
def test_processes_building_one_data_set_at_once_all_get_it_whole(tmp_path: Path) -> None:
    """A search's trial processes start while it loads: each builds the data set, and none may see half of it."""
    import subprocess
    import sys

    script = (
        "import sys; from torchvision import datasets; from autotune.workloads import datasets as ours; "
        "datasets.MNIST.mirrors = ['http://127.0.0.1:9/']; "
        "ds = ours.mnist(sys.argv[1]); print(len(ds), int(ds.targets.sum()))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    assert len({out for out, _ in outs}) == 1 and outs[0][0].startswith("60000 ")
    assert not list((tmp_path / "MNIST" / "raw").glob("*.tmp")), "no half-written file left"


@pytest.mark.slow
def test_a_process_waits_while_another_builds_the_data_set(tmp_path: Path) -> None:
    """The lock itself: while this test holds it, a process asking for MNIST waits; released, it gets it."""
    import fcntl
    import subprocess
    import sys
    import time

    script = (
        "import sys; from torchvision import datasets; from autotune.workloads import datasets as ours; "
        "datasets.MNIST.mirrors = ['http://127.0.0.1:9/']; print(len(ours.mnist(sys.argv[1])))"
    )
    (tmp_path / "MNIST").mkdir()
    with open(tmp_path / "MNIST" / ".raw.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and not waiting_for_a_lock(proc.pid):
            time.sleep(0.2)  # torch imports first; then it asks for the lock
        assert waiting_for_a_lock(proc.pid), proc.communicate()
        assert not (tmp_path / "MNIST" / "raw").exists(), "nothing written while another process holds the lock"
        fcntl.flock(lock, fcntl.LOCK_UN)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert out.strip() == "60000"


def waiting_for_a_lock(pid: int) -> bool:
    """Linux lists a process blocked on a flock() in /proc/locks, marked `->`."""
    return any(
        line.split()[1:3] == ["->", "FLOCK"] and str(pid) in line.split()
        for line in Path("/proc/locks").read_text().splitlines()
    )
