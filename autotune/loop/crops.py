"""Per-image geometry of a batch on the device: RandomResizedCrop's draws, resizes, centre crops and flips.

Each image's geometry is tracked as an axis-aligned map from the pipeline's
current image back to the decoded file (``source = a * v + b`` per axis), so a
whole chain of crops, resizes and flips ends as one box in the decoded image
and a mirror flag: one ``roi_align`` then crops and resizes every image at
once. Sizes are known on the host at every step (a random crop is always
resized to a fixed size), so only the random offsets and extents live on the
device, and nothing here waits for the device: host numbers go over in pinned,
queued copies (``autotune.batch.queued``), not ``torch.tensor(..., device=...)``, whose copy
synchronizes the stream.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from autotune.batch import queued
from autotune.workloads.decode import CenterCrop, Flip, GeometryStep, RandomResizedCrop, Resize

ATTEMPTS = 10  # RandomResizedCrop.get_params tries this many draws before its central fallback


def resized_crop_params(
    heights: torch.Tensor,
    widths: torch.Tensor,
    scale: tuple[float, float],
    ratio: tuple[float, float],
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(top, left, height, width) per image, drawn as torchvision's ``RandomResizedCrop.get_params`` draws them.

    The area share is uniform in `scale`, the aspect ratio log-uniform in `ratio`;
    the first of ATTEMPTS draws that fits the image is taken, else the central
    crop of the nearest allowed ratio, and the offset is uniform over where the
    crop fits. All images at once, on the tensors' device; the results are
    integers held as float64.

    >>> t, l, h, w = resized_crop_params(torch.tensor([375.0]), torch.tensor([500.0]), (1.0, 1.0), (1.0, 1.0))
    >>> (h.item(), w.item())
    (375.0, 375.0)
    """
    heights, widths = heights.to(torch.float64), widths.to(torch.float64)
    n, device = len(heights), heights.device

    def uniform(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=generator, device=device, dtype=torch.float64)

    area = (heights * widths)[:, None]
    target_area = area * (scale[0] + (scale[1] - scale[0]) * uniform(n, ATTEMPTS))
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    aspect = torch.exp(log_lo + (log_hi - log_lo) * uniform(n, ATTEMPTS))
    w = torch.round(torch.sqrt(target_area * aspect))  # round half to even, as Python's round()
    h = torch.round(torch.sqrt(target_area / aspect))
    fits = (w > 0) & (w <= widths[:, None]) & (h > 0) & (h <= heights[:, None])
    first = fits.to(torch.int8).argmax(dim=1, keepdim=True)  # the first draw that fits (0 when none does)
    drawn = fits.any(dim=1)
    w, h = w.gather(1, first).squeeze(1), h.gather(1, first).squeeze(1)

    # The fallback: the whole image, cut to the nearest allowed aspect ratio, centred.
    in_ratio = widths / heights
    lo, hi = min(ratio), max(ratio)
    fb_w = torch.where(in_ratio > hi, torch.round(heights * hi), widths)
    fb_h = torch.where(in_ratio < lo, torch.round(widths / lo), heights)
    w, h = torch.where(drawn, w, fb_w), torch.where(drawn, h, fb_h)
    # torch.randint(0, size - crop + 1) per image: uniform integers, drawn from one uniform tensor.
    offsets = uniform(n, 2)
    top = torch.minimum(torch.floor(offsets[:, 0] * (heights - h + 1)), heights - h)
    left = torch.minimum(torch.floor(offsets[:, 1] * (widths - w + 1)), widths - w)
    top = torch.where(drawn, top, torch.floor((heights - h) / 2))
    left = torch.where(drawn, left, torch.floor((widths - w) / 2))
    return top, left, h, w


def resized_size(height: int, width: int, size: tuple[int, ...], max_size: int | None) -> tuple[int, int]:
    """The (height, width) torchvision's Resize gives an image of this size.

    >>> resized_size(375, 500, (256,), None)
    (256, 341)
    """
    if len(size) == 2:
        return size[0], size[1]
    short, long = min(height, width), max(height, width)
    new_short, new_long = size[0], int(size[0] * long / short)
    if max_size is not None and new_long > max_size:
        new_short, new_long = int(max_size * new_short / new_long), max_size
    return (new_long, new_short) if height > width else (new_short, new_long)


@dataclasses.dataclass
class _Axis:
    """``source = a * v + b`` for one axis of every image, and the current extent of each image along it."""

    a: torch.Tensor
    b: torch.Tensor
    extent: list[int]

    def crop(self, start: torch.Tensor, length: torch.Tensor | list[int], new_extent: list[int], device: torch.device
             ) -> None:
        """Keep [start, start + length) of the current image, stretched to `new_extent`."""
        length = length if isinstance(length, torch.Tensor) else queued(length, device)
        new = queued(new_extent, device)
        self.b = self.a * start + self.b
        self.a = self.a * length / new
        self.extent = new_extent

    def mirror(self, flipped: torch.Tensor, device: torch.device) -> None:
        extent = queued(self.extent, device)
        self.b = torch.where(flipped, self.a * extent + self.b, self.b)
        self.a = torch.where(flipped, -self.a, self.a)


def boxes(
    geometry: tuple[GeometryStep, ...],
    heights: list[int],
    widths: list[int],
    device: torch.device,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each image's region of its decoded file after `geometry`: (x1, y1, x2, y2) boxes, mirror-x, mirror-y.

    Boxes are in pixel-edge coordinates (the file's image spans [0, width] x [0, height]), as
    ``roi_align(..., aligned=True)`` reads them.
    """
    n = len(heights)
    ones = torch.ones(n, dtype=torch.float64, device=device)
    y = _Axis(ones.clone(), torch.zeros_like(ones), list(heights))
    x = _Axis(ones.clone(), torch.zeros_like(ones), list(widths))
    for step in geometry:
        if isinstance(step, RandomResizedCrop):
            top, left, h, w = resized_crop_params(
                queued(y.extent, device),
                queued(x.extent, device),
                step.scale, step.ratio, generator,
            )
            y.crop(top, h, [step.size[0]] * n, device)
            x.crop(left, w, [step.size[1]] * n, device)
        elif isinstance(step, Resize):
            sizes = [resized_size(hh, ww, step.size, step.max_size) for hh, ww in zip(y.extent, x.extent)]
            zero = torch.zeros(n, dtype=torch.float64, device=device)
            y.crop(zero, y.extent, [s[0] for s in sizes], device)
            x.crop(zero, x.extent, [s[1] for s in sizes], device)
        elif isinstance(step, CenterCrop):
            th, tw = step.size
            # torchvision's rounding; a crop larger than the image reaches past it (CenterCrop pads with 0 there).
            tops = queued([int(round((hh - th) / 2.0)) for hh in y.extent], device)
            lefts = queued([int(round((ww - tw) / 2.0)) for ww in x.extent], device)
            y.crop(tops, [th] * n, [th] * n, device)
            x.crop(lefts, [tw] * n, [tw] * n, device)
        elif isinstance(step, Flip):
            flipped = torch.rand(n, generator=generator, device=device) < step.p
            (x if step.axis == "horizontal" else y).mirror(flipped, device)
    ends_x = (x.b, x.a * queued(x.extent, device) + x.b)
    ends_y = (y.b, y.a * queued(y.extent, device) + y.b)
    box = torch.stack([torch.minimum(*ends_x), torch.minimum(*ends_y), torch.maximum(*ends_x), torch.maximum(*ends_y)],
                      dim=1)
    return box, x.a < 0, y.a < 0
