"""The `device_normalize` loader: workers hand over uint8 images, the device makes the pipeline's float batches.

The DataLoader runs the data set with the workers' half of its own transform
(``autotune.workloads.pixels.split``: everything up to ToTensor, then PILToTensor), so
each batch is uint8 pixels: a quarter of the bytes to collate, pin and copy, and none
of the float arithmetic on the CPU. Each batch is copied to the device (without
blocking when pinned) and the pipeline's tail (ToTensor's division, Normalize) runs
there on the whole batch. A webdataset stream works the same way: its last stage's
image transform is cut in a copy of the stream, and its order stays its own (no shuffle,
no sampler). For example::

    loader = normalizing_loader(image_folder, config, shuffle=True, drop_last=False, device=torch.device("cuda"))
    for x, y in loader:  # x: N x 3 x 224 x 224 float32 on the device, normalised
        loss = step(x, y)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

from autotune.batch import BatchError
from autotune.config import Config
from autotune.loop.sourced import WrappedLoader, dataloader_args
from autotune.workloads.decode import NotTranslatable
from autotune.workloads.pixels import COLLATE_REFUSAL, PixelSplit, split, transform_of, with_transform


class NormalizingLoader(WrappedLoader):
    """A DataLoader of uint8 image batches whose tail runs on the device; iterates like a DataLoader.

    ``len``, ``iter``, ``batch_size``, ``drop_last``, ``dataset`` (the user's), and
    ``num_workers`` / ``prefetch_factor`` for a measurement that reads the workers' backlog.
    Yields ``(images, targets)`` on the device; the data order is the DataLoader's own.
    """

    def __init__(self, loader: DataLoader, cut: PixelSplit, device: torch.device, dataset: Any,
                 memory_format: torch.memory_format = torch.contiguous_format) -> None:
        super().__init__(loader, dataset)
        self.cut, self.device, self.memory_format = cut, device, memory_format
        self.non_blocking = bool(loader.pin_memory)

    def made_from(self, source: Iterator[Any]) -> Iterator[Any]:
        for batch in source:
            if not (isinstance(batch, (tuple, list)) and len(batch) == 2 and isinstance(batch[0], torch.Tensor)):
                raise BatchError(f"device_normalize finishes the images of (images, targets) batches, but a batch "
                                 f"is a {type(batch).__name__}: pass device_normalize=False")
            pixels, targets = batch
            # The layout is set on the uint8 pixels, a quarter of the bytes; the tail's elementwise steps keep it.
            pixels = pixels.to(self.device, non_blocking=self.non_blocking).contiguous(memory_format=self.memory_format)
            images = self.cut.finish(pixels).contiguous(memory_format=self.memory_format)  # a no-op when kept
            targets = targets.to(self.device, non_blocking=self.non_blocking) if isinstance(targets, torch.Tensor) \
                else targets
            yield type(batch)((images, targets)) if isinstance(batch, tuple) else [images, targets]


def normalizing_loader(
    dataset: Any,
    config: Config,
    shuffle: bool,
    drop_last: bool,
    device: torch.device,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    **user_args: Any,
) -> NormalizingLoader:
    """The `device_normalize` loader for `dataset`, whose own transform is cut; raises NotTranslatable.

    `user_args` (a sampler or batch sampler, a worker_init_fn, a generator, a timeout) go to the DataLoader as they
    are. A workload's own `collate_fn` is refused: it batches the float images the workers no longer make.
    """
    if collate_fn is not None:
        raise NotTranslatable(f"device_normalize: {COLLATE_REFUSAL}")
    cut = split(transform_of(dataset))
    loader = DataLoader(
        with_transform(dataset, cut.host),
        num_workers=config.num_workers,
        pin_memory=config.pin_memory and device.type == "cuda",
        **dataloader_args(config, shuffle, drop_last, user_args),
    )
    memory_format = torch.channels_last if config.channels_last else torch.contiguous_format
    return NormalizingLoader(loader, cut, device, dataset, memory_format)
