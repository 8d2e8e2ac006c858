"""Hybrid decode: each batch decoded partly by the DataLoader's workers, partly on the device.

With ``decode = gpu`` and ``decode_share`` below 1, a fixed share of the data set's samples
is read as JPEG bytes and decoded and augmented on the device (``autotune.loop.device_decode``),
and the rest goes through the data set's own pipeline in the workers, as with ``decode = cpu``
(as uint8 pixels that the device finishes, where ``device_normalize``'s cut of the pipeline holds:
``autotune.loop.device_decode.uint8_host``).
So the cores and the device both make images: where the host pipeline tops out and the device
path alone is slower still, their sum can keep up with a compiled step (docs/workloads.md, "A
share of each", has the measurements).

Which samples the device decodes is a function of the sample's index (a multiplicative hash,
so every class and every stretch of the folder is split alike), not of its place in a batch:
any sampler, bucketing included, works unchanged, and a batch holds the share on average
(binomially: at batch 256 and a share of one half, 128 ± 8). Both halves are drawn from the
pipeline's distribution (the inputs check compares the device path's images with the host's);
a batch holds the host-decoded samples first, then the device-decoded ones, each half with its
own targets, which a mean loss and BatchNorm's statistics do not see.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import Dataset, default_collate

from autotune.workloads.decode import JpegBytes, pack

HASH = 2654435761  # Knuth's multiplicative hash: consecutive indices spread over [0, 2**32)


def on_device(index: int, share: float) -> bool:
    """Whether sample `index` is decoded on the device at `share`.

    >>> [on_device(i, 0.5) for i in range(6)]
    [True, False, True, False, True, True]
    """
    return (index * HASH) % 2**32 < share * 2**32


class SplitSamples(Dataset):
    """``(image, target, False)`` through the data set's own pipeline, or ``(bytes, target, True)`` for the device."""

    def __init__(self, dataset: Any, files: JpegBytes, share: float) -> None:
        if not 0 < share < 1:
            raise ValueError(f"`0 < share < 1` must hold for a split of the decoding, but got {share=}.")
        self.dataset, self.files, self.share = dataset, files, share

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, Any, bool]:
        if on_device(index, self.share):
            data, target = self.files[index]
            return data, target, True
        image, target = self.dataset[index]
        return image, target, False


def collate_split(
    batch: list[tuple[torch.Tensor, Any, bool]],
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, Any]:
    """(the host-decoded images stacked, or None; the device's JPEG bytes packed and their lengths (``pack``); the
    targets, host's first)."""
    host = [(image, target) for image, target, device in batch if not device]
    device = [(data, target) for data, target, flag in batch if flag]
    images = torch.stack([image for image, _ in host]) if host else None
    packed, lengths = pack([data for data, _ in device])
    return images, packed, lengths, default_collate([t for _, t in host] + [t for _, t in device])


def collate_split_stream(batch: list[tuple[tuple[Any, bool], Any]]) -> tuple[Any, ...]:
    """A stream's hybrid samples (``workloads.stream_jpegs.split_stream``: ``((image or bytes, on the device),
    target)``) batched as ``collate_split`` batches the map-style hybrid's."""
    return collate_split([(x, target, flag) for (x, flag), target in batch])


def assemble(host: torch.Tensor | None, decoded: torch.Tensor | None, device: torch.device,
             memory_format: torch.memory_format, non_blocking: bool) -> torch.Tensor:
    """One batch on the device from its two halves, host-decoded first."""
    parts = []
    if host is not None:
        parts.append(host.to(device, non_blocking=non_blocking))
    if decoded is not None:
        parts.append(decoded)
    if not parts:
        raise ValueError("a batch with neither host-decoded images nor JPEG bytes")
    return torch.cat(parts).contiguous(memory_format=memory_format)


Decode = Callable[[list[torch.Tensor]], torch.Tensor]
