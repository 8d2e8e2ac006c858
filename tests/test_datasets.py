"""Offline, the built-in data sets are synthetic files in torchvision's own layout, loaded by torchvision."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torchvision import datasets, transforms

from autotune import datasets as ours


def test_synthetic_mnist_loads_through_torchvision(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
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
    ds = ours.cifar10(tmp_path, train=True, transform=transforms.Compose([transforms.RandomCrop(32, padding=4), transforms.ToTensor()]))
    assert isinstance(ds, datasets.CIFAR10) and len(ds) == 500
    x, _ = ds[3]
    assert x.shape == (3, 32, 32)
