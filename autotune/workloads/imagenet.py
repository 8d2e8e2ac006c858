"""An ImageNet-class folder of JPEGs: the real ImageNet when it is on disk, else a synthetic one written once.

``imagenet_folder(root, transform)`` is torchvision's ``ImageFolder`` over
``root/imagenet/train`` (the layout pytorch/examples' imagenet recipe reads)
when that folder exists. ImageNet cannot be downloaded; without it, a synthetic
folder of the same kind is written under ``root/imagenet-synthetic/train`` and
read the same way: 1000 class folders of JPEGs of about 500x375 pixels at
quality 90, so every sample is decoded and augmented by PIL on the CPU, as with
the real thing. Each class is a smooth random colour field, seen through a
random shift, scale and brightness, plus noise: a model can learn it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from autotune.workloads.datasets import SYNTHETIC_MARK, building, in_parallel, in_place, say_once

CLASSES = 1000
IMAGES = 51_200  # 200 steps of the recipe's batch of 256: an epoch is hundreds of steps
SIZES = ((500, 375), (375, 500), (500, 333), (500, 400))  # width x height, as ImageNet's photos mostly are
QUALITY = 90


def imagenet_folder(root: str | Path, transform: Callable | None = None, images: int | None = None,
                    classes: int = CLASSES) -> Any:
    """ImageFolder over the real ImageNet's train split if it is on disk, else over a synthetic one.

    The synthetic one has `images` JPEGs: by default AUTOTUNE_SYNTHETIC_IMAGENET_IMAGES, else 51,200.
    """
    images = images or int(os.environ.get("AUTOTUNE_SYNTHETIC_IMAGENET_IMAGES", IMAGES))
    classes = min(classes, images)  # no class folder left empty: ImageFolder refuses one
    from torchvision import datasets

    root = Path(root)
    real = root / "imagenet" / "train"
    if real.is_dir():
        return datasets.ImageFolder(str(real), transform=transform)
    folder = root / "imagenet-synthetic" / "train"
    with building(folder):
        if not (folder / SYNTHETIC_MARK).exists():
            write_synthetic(folder, images, classes)
            why = f"put the real one under {real} to use it"
        else:
            why = in_place(folder, f"put the real one under {real} to use it")
        say_once("ImageNet", folder, why)
    return datasets.ImageFolder(str(folder), transform=transform, is_valid_file=lambda p: p.endswith(".JPEG"))


def write_synthetic(folder: Path, images: int = IMAGES, classes: int = CLASSES) -> Path:
    """Write `images` JPEGs in `classes` class folders, in parallel over this machine's cores; returns `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    jobs = [(folder, c, images // classes + (c < images % classes)) for c in range(classes)]
    in_parallel(_write_class, jobs)
    mark = "synthetic ImageNet written by autotune; delete this folder to write it again\n"
    (folder / SYNTHETIC_MARK).write_text(mark)
    return folder


def _write_class(folder: Path, label: int, count: int) -> None:
    from PIL import Image

    rng = np.random.default_rng(label)
    prototype = rng.random((6, 8, 3), dtype=np.float32)  # a coarse colour field: the class
    out = folder / f"n{label:08d}"
    out.mkdir(exist_ok=True)
    for i in range(count):
        width, height = SIZES[int(rng.integers(len(SIZES)))]
        # A random window of the field, stretched to the photo's size: the class seen from elsewhere, larger or smaller.
        y0, x0 = rng.random(2) * 0.3
        h, w = 0.7 + rng.random(2) * 0.3
        window = (_crop(prototype, y0, x0, h, w) * 255).astype(np.uint8)
        small = Image.fromarray(window).resize((width // 8, height // 8))
        texture = rng.normal(0.0, 18.0, (height // 8, width // 8, 3))
        brightness = 0.7 + 0.6 * rng.random()
        pixels = np.clip(np.asarray(small, dtype=np.float32) * brightness + texture, 0, 255).astype(np.uint8)
        photo = Image.fromarray(pixels).resize((width, height), Image.BILINEAR)
        tmp = out / f".{i}.JPEG.tmp"  # whole files only: a killed writer leaves no half image under a real name
        photo.save(tmp, format="JPEG", quality=QUALITY)
        os.replace(tmp, out / f"{label}_{i}.JPEG")


def _crop(field: np.ndarray, y0: float, x0: float, h: float, w: float) -> np.ndarray:
    rows, cols = field.shape[:2]
    r0, c0 = int(y0 * rows), int(x0 * cols)
    return field[r0 : max(r0 + 1, r0 + int(h * rows)), c0 : max(c0 + 1, c0 + int(w * cols))]
