"""A torchvision pipeline cut where its image becomes a float tensor: the `device_normalize` knob's two halves.

An image pipeline ends by turning its PIL image into a float tensor (ToTensor, or
PILToTensor / ToImage then ConvertImageDtype / ToDtype) and normalising it. Run in the
DataLoader's workers, that tail costs CPU time on every sample and makes each batch
four times the bytes of its pixels: float32 to collate into shared memory, to pin, and
to copy to the device. ``split`` cuts the pipeline there. The workers run everything
before the tail, then PILToTensor (uint8, channels first); the device runs the tail on
the whole batch, with the operations the tail runs on one image (ToTensor's division by
255, then Normalize's subtraction and division), so a batch holds the values the
pipeline makes, to float32 rounding. Timed on one core of the 2-core development
machine, for a 500x375 JPEG through RandomResizedCrop(224) and a flip: 3.25 ms a
sample with the tail, 2.50 ms without it; collating 256 samples, 81 ms in float32 and
42 ms in uint8.

A pipeline whose tail holds anything else (a RandomErasing on the tensor, a Lambda) is
refused with a ``NotTranslatable`` naming it, as is one that already ends in uint8
(nothing to move). For example::

    cut = split(dataset.transform)
    workers_side, on_device = cut.host, cut.finish
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from autotune.workloads.decode import NotTranslatable, flatten

# What may follow the float conversion: each works on a batch as on one image (per channel, per pixel).
TAIL = ("ToPureTensor", "ConvertImageDtype", "ToDtype", "Normalize")


class ToFloat:
    """ToTensor's arithmetic on a uint8 batch: the default float dtype, divided by 255, as ToTensor does it."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(dtype=torch.get_default_dtype()).div(255)

    def __repr__(self) -> str:
        return "ToTensor's division by 255"


@dataclasses.dataclass(frozen=True)
class PixelSplit:
    """The workers' half of a pipeline (ending in uint8) and the device's (the tail, run on whole batches)."""

    host: Any  # a Compose: the pipeline up to its float conversion (ToTensor becomes PILToTensor)
    device: tuple[Callable[[torch.Tensor], torch.Tensor], ...]  # applied in order to the uint8 batch
    steps: tuple[str, ...]  # the tail's transforms by name, for describe()

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        """The tail on a batch of uint8 images; refuses a batch of another dtype (ToTensor treats those otherwise)."""
        if x.dtype != torch.uint8:
            raise TypeError(f"device_normalize takes uint8 image batches (8-bit PIL images), but got {x.dtype}; "
                            f"ToTensor scales other image modes otherwise: pass device_normalize=False")
        for transform in self.device:
            x = transform(x)
        return x

    def describe(self) -> str:
        return f"the workers hand over uint8 pixels; the device runs {' -> '.join(self.steps)} on each batch"


def split(transform: Any) -> PixelSplit:
    """`transform` cut where its image becomes float; raises NotTranslatable naming what cannot move to the device.

    The cut is at ToTensor (the workers then end in PILToTensor) or at the first ConvertImageDtype / ToDtype to a
    float dtype (the workers keep what comes before it: a v2 pipeline's ToImage and its crops on uint8 tensors).
    """
    if transform is None:
        raise NotTranslatable("the data set has no transform: there is no ToTensor to move to the device")
    parts = flatten(transform)
    at = next((i for i, t in enumerate(parts) if type(t).__name__ == "ToTensor" or _to_float(t)), None)
    if at is None:
        raise NotTranslatable("the transform makes no float image (no ToTensor, no ConvertImageDtype or ToDtype to a "
                              "float dtype): there is no float conversion to move to the device")
    for t in parts[at + 1:]:
        if type(t).__name__ not in TAIL:
            raise NotTranslatable(f"{type(t).__name__} runs after the image is converted to float; the device "
                                  f"takes over only {', '.join(TAIL)}")
    from torchvision.transforms import Compose, PILToTensor

    if type(parts[at]).__name__ == "ToTensor":
        host, device = [*parts[:at], PILToTensor()], [ToFloat(), *parts[at + 1:]]
    else:
        host, device = list(parts[:at]), list(parts[at:])
    steps = tuple("ToTensor's /255" if isinstance(t, ToFloat) else type(t).__name__ for t in device)
    return PixelSplit(Compose(host), tuple(device), steps)


def _to_float(t: Any) -> bool:
    dtype = getattr(t, "dtype", None)
    return type(t).__name__ in ("ConvertImageDtype", "ToDtype") and isinstance(dtype, torch.dtype) and \
        dtype.is_floating_point


def with_transform(dataset: Any, transform: Any) -> Any:
    """A shallow copy of `dataset` whose samples go through `transform` instead of its own (targets as before)."""
    if not hasattr(dataset, "transform"):
        raise NotTranslatable(f"{type(dataset).__name__} has no `transform` to cut")
    copied = copy.copy(dataset)
    copied.transform = transform
    joint = getattr(dataset, "transforms", None)
    if type(joint).__name__ == "StandardTransform":  # torchvision's VisionDataset applies this one
        from torchvision.datasets.vision import StandardTransform

        copied.transforms = StandardTransform(transform, getattr(dataset, "target_transform", None))
    elif joint is not None:
        raise NotTranslatable(f"{type(dataset).__name__} applies joint `transforms` to image and target: "
                              f"the device cannot take over part of them")
    return copied


def verdict(dataset: Any, collate_fn: Any = None) -> tuple[str, str]:
    """(what the split does, in one line; why there is none): exactly one of the two is empty."""
    if collate_fn is not None:
        return "", "the workload gives its own collate_fn, which batches the float images the workers would no " \
                   "longer make"
    try:
        cut = split(getattr(dataset, "transform", None))
        with_transform(dataset, cut.host)
    except NotTranslatable as exc:
        return "", str(exc)
    return cut.describe(), ""

