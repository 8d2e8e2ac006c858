"""How the data reaches the hand-timed loop: what its DataLoader's workers make, and what the device does after.

Written out here as a user would write it, not taken from autotune's loaders; the one autotune function it calls is
the per-batch device decode itself (``autotune.loop.device_decode.decode_batch``): what is checked is the measurement
of a loop, not the arithmetic of a crop, which the CPU tests compare with torchvision's.
"""

from __future__ import annotations

import contextlib
import copy
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import IterableDataset

from autotune.config import Config
from autotune.loop.device_decode import decode_batch
from autotune.workloads.decode import pack, unpack


def worker_data(dataset: Any, config: Config, device: torch.device) -> tuple[Any, Callable | None, Callable | None]:
    """What the loop's DataLoader reads (the data set, or what its workers make of it), how it collates a batch, and
    what the device does to a batch's host-made images after (`finish`: device_normalize's tail), if anything."""
    finish = None  # device_normalize's tail, run on the device
    if config.decode == "gpu" and isinstance(dataset, IterableDataset):
        split = config.decode_share < 1  # hybrid: the workers decode the rest, by hand (`jpeg_stream`)
        finish = hybrid_host(dataset, device)[1] if split else None
        return jpeg_stream(dataset, config.decode_share, device), by_halves if split else by_list, finish
    if config.decode == "gpu":
        files, collate = JpegFiles([path for path, _ in dataset.samples], [t for _, t in dataset.samples]), by_list
        if config.decode_share < 1:  # hybrid: the workers decode the rest through the data set's own pipeline
            host, finish = hybrid_host(dataset, device)
            files, collate = HybridFiles(host, files, config.decode_share), by_halves
    elif config.device_normalize:
        files, collate, finish = uint8_pixels(dataset, device)
    else:
        files, collate = dataset, None
    return files, collate, finish


def uint8_pixels(dataset: Any, device: torch.device) -> tuple[Any, None, Any]:
    """A device_normalize loop by hand: the workers run the pipeline up to ToTensor, then PILToTensor; the device
    divides by 255 and normalises as ToTensor and Normalize would. Written for a [..., ToTensor, Normalize] pipeline:
    a data set's `transform`, or a webdataset stream's last stage, `.map_tuple(augment, ...)`."""
    from torchvision import transforms

    stream = isinstance(dataset, IterableDataset)
    own = last_stage(dataset).args[0] if stream else dataset.transform
    *head, to_tensor, normalize = own.transforms
    assert type(to_tensor).__name__ == "ToTensor" and type(normalize).__name__ == "Normalize", own
    host = transforms.Compose([*head, transforms.PILToTensor()])
    pixels = copy.copy(dataset)
    if stream:  # the same pipeline but for its last stage, which makes uint8 images (webdataset's map_tuple)
        last = last_stage(dataset)
        pixels.pipeline = [*dataset.pipeline[:-1], type(last)(last.f, host, *last.args[1:], **last.kw)]
    else:
        pixels.transform = host
    mean = torch.tensor(normalize.mean, device=device).view(1, -1, 1, 1)
    std = torch.tensor(normalize.std, device=device).view(1, -1, 1, 1)
    return pixels, None, lambda x: x.float().div(255).sub_(mean).div_(std)


def jpeg_stream(stream: Any, share: float, device: torch.device) -> Any:
    """A gpu-decode loop's stream by hand: the user's stages up to its decode (shards, splitters, shuffle buffer),
    then each sample's JPEG bytes and class, as webdataset_resnet50 names them (``jpg``, ``cls``). A hybrid's
    (`share` below 1) workers decode the JPEGs whose CRC-32 falls above the share, with PIL, through the pipeline up
    to ToTensor, then PILToTensor, as autotune's hybrid splits a stream; the rest go to the device as bytes."""
    import zlib

    import webdataset as wds
    from PIL import Image

    at = max(i for i, s in enumerate(stream.pipeline) if getattr(getattr(s, "f", None), "__name__", "") == "_map")
    host = hybrid_host(stream, device)[0]
    head = last_stage(host).args[0] if share < 1 else None

    def sample(s: dict) -> tuple:
        data = torch.frombuffer(bytearray(s["jpg"]), dtype=torch.uint8)
        if share >= 1 or zlib.crc32(s["jpg"]) < share * 2**32:
            return (data, int(s["cls"]), True) if share < 1 else (data, int(s["cls"]))
        return head(Image.open(io.BytesIO(s["jpg"])).convert("RGB")), int(s["cls"]), False

    copied = copy.copy(stream)
    copied.pipeline = [*stream.pipeline[:at], wds.map(sample)]
    return copied


def last_stage(stream: Any) -> Any:
    """A webdataset pipeline's last stage, which must be `.map_tuple(augment, ...)`: the image's transform."""
    last = stream.pipeline[-1]
    assert getattr(last.f, "__name__", "") == "_map_tuple", f"the stream's last stage is {last}, not map_tuple"
    return last


class JpegFiles(torch.utils.data.Dataset):
    """What a worker does on the gpu path: read a file's bytes, nothing more."""

    def __init__(self, paths: list[str], targets: list[int]) -> None:
        self.paths, self.targets = paths, targets

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.frombuffer(bytearray(Path(self.paths[i]).read_bytes()), dtype=torch.uint8), self.targets[i]


def by_list(batch: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # The files end to end in one tensor, and their lengths (``pack``): a list of tensors crosses from a worker as
    # one shared-memory handle each, and is pinned tensor by tensor.
    return (*pack([data for data, _ in batch]), torch.tensor([target for _, target in batch]))


class HybridFiles(torch.utils.data.Dataset):
    """Hybrid decode's workers: a sample the device decodes is read as bytes, any other made by the pipeline. Which
    is which follows the sample's index through Knuth's multiplicative hash, as the hybrid loader splits them."""

    def __init__(self, dataset: Any, files: JpegFiles, share: float) -> None:
        self.dataset, self.files, self.share = dataset, files, share

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int, bool]:
        if (i * 2654435761) % 2**32 < self.share * 2**32:
            return (*self.files[i], True)
        return (*self.dataset[i], False)


def by_halves(batch: list[tuple[torch.Tensor, int, bool]]) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
    host = [(x, t) for x, t, device in batch if not device]
    device = [(x, t) for x, t, flag in batch if flag]
    images = torch.stack([x for x, _ in host]) if host else None
    return (images, *pack([x for x, _ in device]), torch.tensor([t for _, t in host] + [t for _, t in device]))


def hybrid_host(dataset: Any, device: torch.device) -> tuple[Any, Any]:
    """What a hybrid's workers make of their half, and what the device then does to it: uint8 pixels, finished on the
    device, where the pipeline ends in ToTensor and Normalize (autotune's hybrid loader does the same there); else
    the whole pipeline, and nothing. A hand loop written with the float tail on the workers ran 3,046/s where
    autotune's ran 4,483/s (an H100, lab/results/h100_balance_2026-12-06): not the same loop."""
    own = last_stage(dataset).args[0] if isinstance(dataset, IterableDataset) else dataset.transform
    tail = [type(t).__name__ for t in getattr(own, "transforms", [])[-2:]]
    if tail != ["ToTensor", "Normalize"]:
        return dataset, None
    pixels, _, finish = uint8_pixels(dataset, device)
    return pixels, finish


def decoded_ahead(feed: Any, pipeline: Any, device: torch.device, fmt: torch.memory_format,
                  finish: Any = None) -> Any:
    """Batches of bytes in, decoded batches out: batch k+1 decodes on a side stream while batch k trains. `finish`:
    what the device does to a hybrid's host half (uint8 pixels to the pipeline's floats), if anything."""
    side = torch.cuda.Stream(device) if device.type == "cuda" else None
    pending = None
    for batch in feed:
        host, packed, lengths, y = batch if len(batch) == 4 else (None, *batch)  # hybrid decode's come in halves
        data = unpack(packed, lengths)
        with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
            host = None if host is None else host.to(device, non_blocking=True)
            parts = [] if host is None else [host if finish is None else finish(host)]
            parts += [decode_batch(pipeline, data, device, None, fmt)] if data else []
            x = torch.cat(parts).contiguous(memory_format=fmt)
            y = y.to(device, non_blocking=True)
            done = torch.cuda.Event() if side is not None else None
            if done is not None:
                done.record(side)
        if pending is not None:
            yield take(*pending, device)
        pending = (x, y, done)
    if pending is not None:  # a feed that ends (one pass): its last batch too
        yield take(*pending, device)


def take(x: torch.Tensor, y: torch.Tensor, done: Any, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    if done is not None:  # made on the side stream: the step waits for it, and the allocator keeps it till then
        main = torch.cuda.current_stream(device)
        main.wait_event(done)
        x.record_stream(main)
        y.record_stream(main)
    return x, y


class OnDevice:
    """A ``placement = device`` loop by hand: the data set read once into tensors on the device before the clock (every
    sample stacked), then each epoch a fresh permutation drawn on the device and its slices, as a user writes it.
    Only for a data set whose samples are the same at every read (the workload's DETERMINISTIC_TRANSFORM): an
    augmentation redone on the device each batch is not written here (``hand_loader`` refuses it)."""

    def __init__(self, dataset: Any, batch_size: int, device: torch.device) -> None:
        xs, ys = zip(*(dataset[i] for i in range(len(dataset))))
        self.x = torch.stack(xs).to(device)
        self.y = (torch.stack(ys) if torch.is_tensor(ys[0]) else torch.as_tensor(ys)).to(device)
        self.dataset, self.batch_size = dataset, batch_size

    def __len__(self) -> int:
        return -(-len(self.y) // self.batch_size)

    def __iter__(self):
        order = torch.randperm(len(self.y), device=self.x.device)
        for start in range(0, len(order), self.batch_size):
            rows = order[start:start + self.batch_size]
            yield self.x[rows], self.y[rows]
