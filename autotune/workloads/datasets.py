"""torchvision data sets that fall back to learnable synthetic data offline.

A workload asks for MNIST or CIFAR-10 the way its author would; when the files
are absent and cannot be downloaded, we write synthetic files of the same shape
in the data set's own on-disk layout, so torchvision loads them through its
normal per-sample PIL path and the loop being tuned is the same code path.
The synthetic images are class-dependent patterns plus noise: a model can learn
them, so loss curves (and the parity check) mean something.
"""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing
import os
import pickle
import socket
import struct
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import numpy as np
from torchvision import datasets

SYNTHETIC_MARK = "AUTOTUNE_SYNTHETIC"
DOWNLOAD_TIMEOUT_S = 20.0  # per connection attempt
_announced: set[str] = set()


def say_once(name: str, folder: Path, why: str) -> None:
    # Trial child processes inherit AUTOTUNE_QUIET: the user hears it once, from the parent.
    if name in _announced or os.environ.get("AUTOTUNE_QUIET"):
        return
    _announced.add(name)
    print(
        f"autotune: {name} is not on disk and could not be downloaded ({why}); "
        f"using a synthetic {name} of the same shape in {folder}",
        file=sys.stderr,
    )


def in_place(folder: Path, instead: str) -> str:
    """Why synthetic files are used though nothing was tried now: when they were written; `instead`: the way out.

    Not "from an earlier run": a search's trial processes build the data set while the search itself starts, so
    the first search on an empty data folder finds files one of its own processes wrote a moment before.
    """
    written = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime((folder / SYNTHETIC_MARK).stat().st_mtime))
    return f"synthetic files written {written} are in place; {instead}"


def _patterns(n: int, shape: tuple[int, ...], classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n uint8 images: a smooth random prototype per class, shifted a little, plus noise."""
    rng = np.random.default_rng(seed)
    protos = rng.random((classes, *shape), dtype=np.float32)
    # Smooth the prototypes so they look like blobs, not salt; a shifted blob is still its class.
    for axis in (-1, -2):
        protos = (protos + np.roll(protos, 1, axis) + np.roll(protos, -1, axis)) / 3
    protos = (protos - protos.min()) / (protos.max() - protos.min())
    labels = rng.integers(0, classes, n, dtype=np.int64)
    images = np.empty((n, *shape), dtype=np.uint8)
    chunk = 10_000
    for start in range(0, n, chunk):
        idx = slice(start, min(n, start + chunk))
        base = protos[labels[idx]]
        shift = rng.integers(-2, 3)
        base = np.roll(base, shift, axis=-1)
        noisy = 0.7 * base + 0.3 * rng.random(base.shape, dtype=np.float32)
        images[idx] = np.clip(noisy * 255, 0, 255).astype(np.uint8)
    return images, labels


def _write_idx_images(path: Path, images: np.ndarray) -> None:
    with open(path, "wb") as f:
        f.write(struct.pack(">IIII", 2051, images.shape[0], images.shape[1], images.shape[2]))
        f.write(images.tobytes())


def _write_idx_labels(path: Path, labels: np.ndarray) -> None:
    with open(path, "wb") as f:
        f.write(struct.pack(">II", 2049, labels.shape[0]))
        f.write(labels.astype(np.uint8).tobytes())


def write_synthetic_mnist(root: Path, n_train: int = 60_000, n_test: int = 10_000) -> Path:
    """Write MNIST's four raw IDX files under root/MNIST/raw; returns that folder."""
    raw = Path(root) / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    tmp = ".tmp"  # a writer killed halfway leaves one; the next one overwrites it
    for split, n, seed in (("train", n_train, 0), ("t10k", n_test, 1)):
        images, labels = _patterns(n, (28, 28), 10, seed)
        _write_idx_images(raw / f"{split}-images-idx3-ubyte{tmp}", images)
        _write_idx_labels(raw / f"{split}-labels-idx1-ubyte{tmp}", labels)
        os.replace(raw / f"{split}-images-idx3-ubyte{tmp}", raw / f"{split}-images-idx3-ubyte")
        os.replace(raw / f"{split}-labels-idx1-ubyte{tmp}", raw / f"{split}-labels-idx1-ubyte")
    (raw / SYNTHETIC_MARK).write_text("synthetic MNIST written by autotune; delete this folder to retry the download\n")
    return raw


@contextlib.contextmanager
def _download_timeout(seconds: float = DOWNLOAD_TIMEOUT_S) -> Iterator[None]:
    # torchvision opens URLs without a timeout; on a network that drops packets that would hang forever.
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


@contextlib.contextmanager
def building(folder: Path) -> Iterator[None]:
    """One process at a time checks, downloads or writes a data set's files.

    A search starts its trial processes while it loads; each builds the data set,
    and two downloads or writes into one folder would corrupt it. The rest wait,
    then find it. The lock is a small hidden file beside the folder, kept.
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def in_parallel(work: Callable[..., Any], jobs: list[tuple[Any, ...]]) -> None:
    """`work(*job)` for each of `jobs`, in processes forked over this machine's cores (at most 32).

    The pool is closed and joined, never terminated: its workers, forked from a search, keep the search's signal
    handlers, and each one terminated would print a KeyboardInterrupt.
    """
    workers = max(1, min(len(os.sched_getaffinity(0)), 32, len(jobs)))
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        pool.starmap(work, jobs, chunksize=max(1, len(jobs) // (workers * 4)))
        pool.close()
        pool.join()


def _real_or_synthetic(
    name: str, folder: Path, real: Callable[[], Any], write: Callable[[], Any], synthetic: Callable[[], Any]
) -> Any:
    """The real data set if it is on disk or can be downloaded, else synthetic files written in its layout."""
    with building(folder):
        return _real_or_synthetic_unlocked(name, folder, real, write, synthetic)


def _real_or_synthetic_unlocked(
    name: str, folder: Path, real: Callable[[], Any], write: Callable[[], Any], synthetic: Callable[[], Any]
) -> Any:
    if (folder / SYNTHETIC_MARK).exists():
        say_once(name, folder, in_place(folder, f"delete {folder} to try the download again"))
        return synthetic()
    try:
        with _download_timeout():
            return real()
    except (OSError, RuntimeError) as exc:
        why = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        write()
        say_once(name, folder, why)
        return synthetic()


def mnist(root: str | Path, train: bool = True, transform: Callable | None = None) -> datasets.MNIST:
    """torchvision's MNIST, downloaded if possible, else synthetic in the same layout."""
    root = Path(root)
    return _real_or_synthetic(
        "MNIST",
        root / "MNIST" / "raw",
        lambda: datasets.MNIST(root, train=train, transform=transform, download=True),
        lambda: write_synthetic_mnist(root),
        lambda: datasets.MNIST(root, train=train, transform=transform, download=False),
    )


class _SyntheticCIFAR10(datasets.CIFAR10):
    """CIFAR10 over our synthetic batch files: same loading and __getitem__, no md5 check."""

    def _check_integrity(self) -> bool:
        folder = Path(self.root) / self.base_folder
        return (folder / SYNTHETIC_MARK).exists()

    def _load_meta(self) -> None:
        with open(Path(self.root) / self.base_folder / self.meta["filename"], "rb") as f:
            self.classes = pickle.load(f, encoding="latin1")[self.meta["key"]]
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}


def write_synthetic_cifar10(root: Path, n_train: int = 50_000, n_test: int = 10_000) -> Path:
    """Write CIFAR-10's python batch files under root/cifar-10-batches-py."""
    folder = Path(root) / datasets.CIFAR10.base_folder
    folder.mkdir(parents=True, exist_ok=True)
    images, labels = _patterns(n_train + n_test, (3, 32, 32), 10, 2)
    flat = images.reshape(len(images), -1)
    per = n_train // 5
    files = [(f"data_batch_{i + 1}", slice(i * per, (i + 1) * per)) for i in range(5)]
    files.append(("test_batch", slice(n_train, n_train + n_test)))
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    entries: list[tuple[str, dict[str, Any]]] = [
        (name, {"data": flat[idx], "labels": labels[idx].tolist(), "batch_label": name}) for name, idx in files
    ]
    for name, entry in [*entries, ("batches.meta", {"label_names": names})]:
        tmp = folder / f"{name}.tmp"  # whole files only, as in write_synthetic_mnist
        with open(tmp, "wb") as f:
            pickle.dump(entry, f)
        os.replace(tmp, folder / name)
    (folder / SYNTHETIC_MARK).write_text(
        "synthetic CIFAR-10 written by autotune; delete this folder to retry the download\n"
    )
    return folder


def cifar10(root: str | Path, train: bool = True, transform: Callable | None = None) -> datasets.CIFAR10:
    """torchvision's CIFAR10, downloaded if possible, else synthetic in the same layout."""
    root = Path(root)
    return _real_or_synthetic(
        "CIFAR-10",
        root / datasets.CIFAR10.base_folder,
        lambda: datasets.CIFAR10(root, train=train, transform=transform, download=True),
        lambda: write_synthetic_cifar10(root),
        lambda: _SyntheticCIFAR10(root, train=train, transform=transform),
    )
