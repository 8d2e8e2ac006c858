"""The inputs check, inside a trial process: the device decode path's images against the host pipeline's.

`decode = gpu` changes no arithmetic of training; it changes where and how the
images are made: nvJPEG instead of libjpeg, one ``roi_align`` instead of PIL's
crop and resize, crops drawn on the device. What it must keep is the
distribution of the images the model sees. That is checked here directly, with
no training, so it holds even where a short run learns too little to judge by
(ResNet-50 on ImageNet, whose first minute of training is the move to guessing
evenly).

``host_draws`` and ``device_draws`` take IMAGES images of the data set (a seeded
random sample) and make each of them DRAWS times through a pipeline, each time with its own random crop
and flip. Every output is reduced to a coarse GRID x GRID picture per channel
(block means: robust to the few pixel levels by which two JPEG decoders and two
resampling kernels differ, sensitive to which part of the image was taken and
which way it faces). ``compare`` runs the host pipeline twice and the device
path once; ``autotune.parity.inputs`` judges the distances.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
from torch.nn import functional
from torch.utils.data import DataLoader, Dataset, Subset

IMAGES = 64  # images of the data set, each drawn DRAWS times through each pipeline
DRAWS = 32
GRID = 4  # each output becomes GRID x GRID block means per channel
BATCH = 256  # images per decoded batch on the device, and per host batch
SEED = 0  # picks the images; the device path's crops draw from a generator seeded with it


def chosen(dataset: Any, images: int = IMAGES) -> list[int]:
    """`images` indices of the data set, a seeded random sample: every class of a class-sorted folder may show."""
    generator = torch.Generator().manual_seed(SEED)
    return torch.randperm(len(dataset), generator=generator)[: min(images, len(dataset))].tolist()


def features(images: torch.Tensor) -> torch.Tensor:
    """N x C x H x W images as N x (C * GRID * GRID) block means, in float64 on the CPU."""
    return functional.adaptive_avg_pool2d(images.float(), GRID).flatten(1).double().cpu()


def host_draws(dataset: Any, indices: Sequence[int], draws: int, workers: int) -> torch.Tensor:
    """Each image `draws` times through the data set's own transform: len(indices) x draws x features.

    DataLoader workers decode in parallel, each with its own random stream, as in training.
    """
    repeated = [i for i in indices for _ in range(draws)]
    loader = DataLoader(Subset(dataset, repeated), batch_size=BATCH, num_workers=workers, shuffle=False)
    out = torch.cat([features(x) for x, _ in loader])
    return out.view(len(indices), draws, -1)


def device_draws(
    pipeline: Any, files: Any, indices: Sequence[int], draws: int, device: torch.device, seed: int = SEED
) -> torch.Tensor:
    """Each image `draws` times through the device path (`pipeline` over `files`, ``derive``'s pair)."""
    return decoded_draws(pipeline, [files[i][0] for i in indices], draws, device, seed)  # each file read once


def decoded_draws(pipeline: Any, read: Sequence[torch.Tensor], draws: int, device: torch.device,
                  seed: int = SEED) -> torch.Tensor:
    """Each JPEG of `read` (its bytes) decoded `draws` times through the device path: len(read) x draws x features."""
    from autotune.loop.device_decode import decode_batch

    generator = torch.Generator(device=device).manual_seed(seed)
    repeated = [data for data in read for _ in range(draws)]
    parts = []
    for lo in range(0, len(repeated), BATCH):
        parts.append(features(decode_batch(pipeline, repeated[lo : lo + BATCH], device, generator)))
    return torch.cat(parts).view(len(read), draws, -1)


class StreamDraws(Dataset):
    """A stream's first JPEGs, each `draws` times through the stream's own decode and augmentation: a stream has no
    index to draw an image again by, so its images are read once (``stream_jpegs.first_jpegs``) and kept here."""

    def __init__(self, dataset: Any, read: Sequence[torch.Tensor], draws: int) -> None:
        from autotune.workloads.stages import image_transform
        from autotune.workloads.stream_jpegs import image_handler

        self.read, self.draws = [data.numpy().tobytes() for data in read], draws
        self.decode, self.transform = image_handler(dataset), image_transform(dataset)

    def __len__(self) -> int:
        return len(self.read) * self.draws

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.transform(self.decode(".jpg", self.read[index // self.draws])), 0


def stream_draws(dataset: Any, read: Sequence[torch.Tensor], draws: int, workers: int) -> torch.Tensor:
    """Each JPEG of `read` `draws` times through the stream's own pipeline, in DataLoader workers as in training."""
    loader = DataLoader(StreamDraws(dataset, read, draws), batch_size=BATCH, num_workers=workers, shuffle=False)
    return torch.cat([features(x) for x, _ in loader]).view(len(read), draws, -1)


def compare_stream(dataset: Any, device: torch.device, workers: int, images: int = IMAGES, draws: int = DRAWS,
                   pipeline: Any = None) -> dict[str, Any]:
    """``compare`` for a webdataset stream: its first `images` JPEGs, read once through the bytes copy. `pipeline`
    replaces the one derived from the stream (a test gives a wrong one)."""
    from autotune.parity.inputs import distance
    from autotune.workloads.stream_jpegs import derive_stream, first_jpegs

    start = time.perf_counter()
    if pipeline is None:
        pipeline, _ = derive_stream(dataset)
    read = first_jpegs(dataset, images)
    host, again = stream_draws(dataset, read, draws, workers), stream_draws(dataset, read, draws, workers)
    on_device = decoded_draws(pipeline, read, draws, device)
    return {"host_to_host": distance(host, again), "host_to_device": distance(host, on_device),
            "images": len(read), "draws": draws, "seconds": time.perf_counter() - start}


def compare(dataset: Any, device: torch.device, workers: int, pipeline: Any = None, files: Any = None,
            images: int = IMAGES, draws: int = DRAWS) -> dict[str, Any]:
    """The distances ``autotune.parity.inputs.judge`` reads: two host draws apart, and host from device.

    `pipeline` and `files`, given together, replace what ``derive`` makes of the data set (a test gives a wrong
    pipeline); a webdataset stream's JPEGs are read once, its first `images` (``compare_stream``).
    """
    from autotune.parity.inputs import distance
    from autotune.workloads.decode import derive
    from autotune.workloads.stages import is_webdataset

    if is_webdataset(dataset):
        return compare_stream(dataset, device, workers, images, draws, pipeline)
    if pipeline is None or files is None:
        pipeline, files = derive(dataset)
    start = time.perf_counter()
    indices = chosen(dataset, images)
    host = host_draws(dataset, indices, draws, workers)
    again = host_draws(dataset, indices, draws, workers)
    on_device = device_draws(pipeline, files, indices, draws, device)
    return {
        "host_to_host": distance(host, again),
        "host_to_device": distance(host, on_device),
        "images": len(indices),
        "draws": draws,
        "seconds": time.perf_counter() - start,
    }
