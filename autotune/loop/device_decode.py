"""The `decode = gpu` loader: workers read JPEG bytes, the device decodes and augments whole batches.

On a host with few cores per GPU, decoding and augmenting JPEGs on the CPU caps
training whatever num_workers says (docs/workloads.md, "Decoding on the GPU", has
the measurements). Here the DataLoader's workers only read files
(``autotune.workloads.decode.JpegBytes``); each batch is decoded by one batched
``torchvision.io.decode_jpeg`` call on the device, every image draws its own
crop and flip from the distribution torchvision draws from
(``autotune.loop.crops``), one ``roi_align`` per image size crops and resizes,
and one affine map per channel does ToTensor's scaling and Normalize.

On CUDA this runs on a side stream, one batch ahead: while the step trains on
batch k, batch k+1 is decoded. On any other device the same code runs inline,
so CPU tests exercise it whole. For example::

    loader = decoding_loader(image_folder, config, shuffle=True, drop_last=False, device=torch.device("cuda"))
    for x, y in loader:  # x: N x 3 x 224 x 224 on the device, normalised
        loss = step(x, y)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

from autotune.batch import queued
from autotune.config import Config
from autotune.loop.crops import boxes
from autotune.loop.hybrid_decode import SplitSamples, assemble, collate_split, collate_split_stream
from autotune.loop.sourced import WrappedLoader, dataloader_args
from autotune.workloads.decode import COLLATE_REFUSAL, DevicePipeline, NotTranslatable, collate_bytes, derive, unpack
from autotune.workloads.pixels import PixelSplit, differs, transform_of, with_transform
from autotune.workloads.pixels import split as split_pixels
from autotune.workloads.stages import is_webdataset
from autotune.workloads.stream_jpegs import derive_stream, split_stream

Batch = tuple[torch.Tensor, torch.Tensor]


def decode_batch(
    pipeline: DevicePipeline,
    data: list[torch.Tensor],
    device: torch.device,
    generator: torch.Generator | None = None,
    memory_format: torch.memory_format = torch.contiguous_format,
) -> torch.Tensor:
    """Decode JPEG byte tensors on `device` and apply `pipeline` to each image: one N x 3 x H x W batch."""
    from torchvision.io import ImageReadMode, decode_jpeg

    # RGB as ImageFolder's loader converts (grey and CMYK files too); one call decodes the whole batch.
    images = decode_jpeg(data, mode=ImageReadMode.RGB, device=device)
    return augment(pipeline, images, device, generator, memory_format)


def augment(
    pipeline: DevicePipeline,
    images: list[torch.Tensor],
    device: torch.device,
    generator: torch.Generator | None = None,
    memory_format: torch.memory_format = torch.contiguous_format,
) -> torch.Tensor:
    """`pipeline`'s geometry and value map applied to decoded uint8 images (3 x h x w each, any sizes) on `device`.

    Nothing here waits for the device: on CUDA it runs a batch ahead of the step on a side stream.
    """
    from torchvision.ops import roi_align

    heights, widths = [int(im.shape[1]) for im in images], [int(im.shape[2]) for im in images]
    box, mirror_x, mirror_y = boxes(pipeline.geometry, heights, widths, device, generator)
    out_h, out_w = pipeline.out_size
    out = torch.empty((len(images), 3, out_h, out_w), dtype=torch.float32, device=device)
    groups = list(_same_size(heights, widths).values())
    order = queued([i for indices in groups for i in indices], device, torch.int64)  # one copy, not one a size
    start = 0
    for indices in groups:
        # One roi_align per decoded size: images of one size stack without padding, so every sample
        # point near an edge reads that image's own edge pixels, as PIL's resampling does.
        at, start = order[start : start + len(indices)], start + len(indices)
        stacked = torch.stack([images[i] for i in indices]).to(torch.float32)
        rois = torch.cat([torch.arange(len(indices), device=device, dtype=torch.float64)[:, None], box[at]], dim=1)
        # sampling_ratio=-1: ceil(box / output) samples per output pixel and axis, averaged: a shrinking
        # resize is antialiased, as torchvision's default (antialias=True) is.
        out[at] = roi_align(stacked, rois.to(torch.float32), (out_h, out_w), 1.0, -1, True)
    out = torch.where(mirror_x[:, None, None, None], out.flip(-1), out)
    out = torch.where(mirror_y[:, None, None, None], out.flip(-2), out)
    scale = queued(pipeline.scale, device, torch.float32).view(1, 3, 1, 1)
    shift = queued(pipeline.shift, device, torch.float32).view(1, 3, 1, 1)
    out = torch.addcmul(shift, out, scale)
    if pipeline.dtype == torch.uint8:  # PILToTensor without a float conversion: whole pixel values
        out = out.round_().clamp_(0, 255).to(torch.uint8)
    return out.contiguous(memory_format=memory_format)


def _same_size(heights: list[int], widths: list[int]) -> dict[tuple[int, int], list[int]]:
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, size in enumerate(zip(heights, widths)):
        groups[size].append(i)
    return groups


class DecodingLoader(WrappedLoader):
    """A DataLoader of JPEG bytes whose batches are decoded and augmented on the device, one batch ahead.

    Iterates like a DataLoader (``len``, ``iter``, ``batch_size``, ``dataset``) and yields
    ``(images, targets)`` on the device. It draws nothing from torch's global generator:
    the crops' generator is seeded from the DataLoader iterator's own seed, so the data
    order under a seed is the CPU path's, epoch after epoch.
    """

    def __init__(
        self,
        loader: DataLoader,
        pipeline: DevicePipeline,
        device: torch.device,
        memory_format: torch.memory_format = torch.contiguous_format,
        split: bool = False,
        dataset: Any = None,
        host_cut: PixelSplit | None = None,
    ) -> None:
        super().__init__(loader, dataset)
        self.pipeline, self.device, self.memory_format = pipeline, device, memory_format
        self.split = split  # batches of (host images, JPEG bytes, targets): hybrid decode (loop.hybrid_decode)
        self.host_cut = host_cut  # the host half's uint8 pixels are finished on the device by it; None: made whole

    def made_from(self, batches: Iterator[Any]) -> Iterator[Batch]:
        # The iterator's base seed (the one its workers derive theirs from), drawn by DataLoader itself.
        seed = getattr(batches, "_base_seed", None)
        generator = torch.Generator(device=self.device)
        generator.manual_seed(seed if seed is not None else int(torch.initial_seed()))
        lane = _lane(self.device)
        pending: Any = None
        for batch in batches:
            if self.split:  # (host images, packed bytes, lengths, targets)
                ready = lane.launch(self._split, batch[0], unpack(batch[1], batch[2]), batch[3], generator)
            else:  # (packed bytes, lengths, targets)
                ready = lane.launch(self._decode, unpack(batch[0], batch[1]), batch[2], generator)
            if pending is not None:
                yield lane.take(pending)
            pending = ready
        if pending is not None:
            yield lane.take(pending)

    def _decode(self, data: list[torch.Tensor], targets: torch.Tensor, generator: torch.Generator) -> Batch:
        images = decode_batch(self.pipeline, data, self.device, generator, self.memory_format)
        return images, torch.as_tensor(targets).to(self.device, non_blocking=True)

    def _split(self, host: torch.Tensor | None, data: list[torch.Tensor], targets: torch.Tensor,
               generator: torch.Generator) -> Batch:
        decoded = decode_batch(self.pipeline, data, self.device, generator, self.memory_format) if data else None
        if host is not None and self.host_cut is not None:
            pixels = host.to(self.device, non_blocking=True).contiguous(memory_format=self.memory_format)
            host = self.host_cut.finish(pixels)  # ToTensor's /255 and Normalize, as device_normalize runs them
        images = assemble(host, decoded, self.device, self.memory_format, non_blocking=True)
        return images, torch.as_tensor(targets).to(self.device, non_blocking=True)


class _Inline:
    """Off CUDA there is no stream to overlap on: the work runs when launched."""

    def launch(self, work: Callable[..., Batch], *args: Any) -> Batch:
        return work(*args)

    def take(self, ready: Batch) -> Batch:
        return ready


class _SideStream:
    """Work on a side stream; the main stream waits for it only when the batch is taken."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device)

    def launch(self, work: Callable[..., Batch], *args: Any) -> tuple[Batch, torch.cuda.Event]:
        # No wait on the main stream: the inputs are host bytes and the outputs fresh memory, so the
        # decode may run while the previous step still trains.
        with torch.cuda.stream(self.stream):
            batch = work(*args)
            done = torch.cuda.Event()
            done.record(self.stream)
        return batch, done

    def take(self, ready: tuple[Batch, torch.cuda.Event]) -> Batch:
        batch, done = ready
        main = torch.cuda.current_stream(self.device)
        main.wait_event(done)
        for tensor in batch:
            # Made on the side stream, used on the main one: the allocator must not hand this memory
            # to the side stream's next batch before the step that reads it has run.
            tensor.record_stream(main)
        return batch


def _lane(device: torch.device) -> _Inline | _SideStream:
    return _SideStream(device) if device.type == "cuda" else _Inline()


def decoding_loader(
    dataset: Any,
    config: Config,
    shuffle: bool,
    drop_last: bool,
    device: torch.device,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    **user_args: Any,
) -> DecodingLoader:
    """The `decode = gpu` loader for `dataset`, whose own transform is translated; raises NotTranslatable.

    `user_args` (a sampler or batch sampler, a worker_init_fn, a generator, a timeout) go to the DataLoader as
    they are; a workload's own `collate_fn` cannot: it batches decoded samples, which the device path never has on
    the host.
    """
    if collate_fn is not None:
        raise NotTranslatable(COLLATE_REFUSAL)
    stream = is_webdataset(dataset)  # its JPEGs come out of a copy of its own stages (workloads.stream_jpegs)
    pipeline, files = derive_stream(dataset) if stream else derive(dataset)
    kwargs = dataloader_args(config, shuffle, drop_last, user_args)
    split = config.decode_share < 1  # the workers decode the rest through the data set's own pipeline
    host_cut = uint8_host(dataset) if split else None
    if split and stream:
        own = transform_of(dataset)
        files = split_stream(dataset, config.decode_share, host_cut.host if host_cut is not None else own)
    elif split:
        files = SplitSamples(with_transform(dataset, host_cut.host) if host_cut is not None else dataset, files,
                             config.decode_share)
    loader = DataLoader(
        files,
        num_workers=config.num_workers,
        pin_memory=config.pin_memory and device.type == "cuda",
        collate_fn=(collate_split_stream if stream else collate_split) if split else collate_bytes,
        **kwargs,
    )
    memory_format = torch.channels_last if config.channels_last else torch.contiguous_format
    return DecodingLoader(loader, pipeline, device, memory_format, split, dataset if split or stream else None,
                          host_cut)


def uint8_host(dataset: Any) -> PixelSplit | None:
    """The cut of `dataset`'s pipeline that `device_normalize` makes, where it gives the pipeline's own samples to
    the bit; None where it cannot (the workers then run the whole pipeline, as with `decode = cpu`).

    The hybrid's host half hands over uint8 pixels through it: a quarter of the bytes to collate, pin and copy,
    and no float arithmetic on the cores it shares with the loop (docs/workloads.md, `device_normalize`, has the
    timings).
    """
    try:
        cut = split_pixels(transform_of(dataset))
        return None if differs(dataset, cut) else cut
    except NotTranslatable:
        return None

