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
(nothing to move). A map-style data set's pipeline is its ``transform``; a webdataset
stream's is the first function of its last stage, ``.map_tuple(augment, ...)``
(``autotune.workloads.stages``), cut the same way in a copy of the stream. For example::

    cut = split(dataset.transform)
    workers_side, on_device = cut.host, cut.finish
"""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import IterableDataset, Subset

from autotune.batch import queued
from autotune.workloads import stages
from autotune.workloads.decode import NotTranslatable, flatten

# A workload's own collate_fn batches the samples its pipeline makes (a mixup, a padding): float images, not uint8.
COLLATE_REFUSAL = ("the workload gives its own collate_fn, which batches the float images the workers would no "
                   "longer make")
SAMPLES_CHECKED = 2  # samples a verdict draws through both paths
# What may follow the float conversion: each works on a batch as on one image (per channel, per pixel).
TAIL = ("ToPureTensor", "ConvertImageDtype", "ToDtype", "Normalize")


class ToFloat:
    """ToTensor's arithmetic on a uint8 batch: the default float dtype, divided by 255, as ToTensor does it."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(dtype=torch.get_default_dtype()).div(255)

    def __repr__(self) -> str:
        return "ToTensor's division by 255"


class QueuedNormalize:
    """torchvision's Normalize on a batch, its mean and std made on the device once and queued, not waited for.

    Normalize makes them with ``torch.as_tensor(..., device=...)`` and checks ``(std == 0).any()`` on every call:
    two copies that synchronize the stream and a read back. The device decode's hybrid half runs on a side stream
    a batch ahead of the step, and each would wait for its kernels. The arithmetic is Normalize's, ``sub_`` then
    ``div_``, so the values are the same to the bit; a zero std is refused here, once.
    """

    def __init__(self, mean: Any, std: Any) -> None:
        self.mean, self.std = _per_channel(mean), _per_channel(std)
        if any(s == 0 for s in self.std):
            raise NotTranslatable(f"Normalize has a zero std ({self.std}): it would divide by zero")
        self._made: dict[tuple[torch.device, torch.dtype], tuple[torch.Tensor, torch.Tensor]] = {}

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        key = (x.device, x.dtype)
        if key not in self._made:
            self._made[key] = tuple(queued(v, x.device, x.dtype).view(-1, 1, 1) for v in (self.mean, self.std))
        mean, std = self._made[key]
        return x.sub(mean).div_(std)

    def __repr__(self) -> str:
        return f"Normalize(mean={self.mean}, std={self.std})"


def _per_channel(values: Any) -> list[float]:
    return [float(v) for v in (values.tolist() if isinstance(values, torch.Tensor) else
                               values if isinstance(values, (list, tuple)) else [values])]


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
    at = next((i for i, t in enumerate(parts) if _torchvisions(t, "ToTensor") or _to_float(t)), None)
    if at is None:
        raise NotTranslatable("the transform makes no float image (no ToTensor, no ConvertImageDtype or ToDtype to a "
                              "float dtype): there is no float conversion to move to the device")
    for t in parts[at + 1:]:
        if not _torchvisions(t, *TAIL):  # a class of one of these names, but the user's own, may do anything
            raise NotTranslatable(f"{type(t).__module__}.{type(t).__name__} runs after the image is converted to "
                                  f"float; the device takes over only torchvision's {', '.join(TAIL)}")
    from torchvision.transforms import Compose, PILToTensor

    if _torchvisions(parts[at], "ToTensor"):
        host, device = [*parts[:at], PILToTensor()], [ToFloat(), *parts[at + 1:]]
    else:
        host, device = list(parts[:at]), list(parts[at:])
    device = [QueuedNormalize(t.mean, t.std) if _torchvisions(t, "Normalize") else t for t in device]
    steps = tuple("ToTensor's /255" if isinstance(t, ToFloat) else "Normalize" if isinstance(t, QueuedNormalize)
                  else type(t).__name__ for t in device)
    return PixelSplit(Compose(host), tuple(device), steps)


def _torchvisions(t: Any, *names: str) -> bool:
    """`t` is torchvision's transform of one of these names (v1 or v2), not a class of the same name."""
    return type(t).__name__ in names and type(t).__module__.startswith("torchvision.transforms")


def _to_float(t: Any) -> bool:
    dtype = getattr(t, "dtype", None)
    return _torchvisions(t, "ConvertImageDtype", "ToDtype") and isinstance(dtype, torch.dtype) and \
        dtype.is_floating_point


def transform_of(dataset: Any) -> Any:
    """The data set's own transform; a Subset's (random_split's) is its data set's; a webdataset pipeline's is the
    first function of its last stage, ``map_tuple`` (``autotune.workloads.stages``). None where there is none."""
    if isinstance(dataset, Subset):
        return transform_of(dataset.dataset)
    if stages.is_webdataset(dataset):
        return stages.image_transform(dataset)  # raises NotTranslatable where the pipeline has none to cut
    return getattr(dataset, "transform", None)


def with_transform(dataset: Any, transform: Any) -> Any:
    """A shallow copy of `dataset` whose samples go through `transform` instead of its own (targets as before).

    The user's data set is never changed: one whose `transform` is a property (it may set another object's) is
    refused rather than copied.
    """
    if isinstance(dataset, Subset):
        return Subset(with_transform(dataset.dataset, transform), dataset.indices)
    if stages.is_webdataset(dataset):
        return stages.with_image_transform(dataset, transform)
    if not hasattr(dataset, "transform"):
        raise NotTranslatable(f"{type(dataset).__name__} has no `transform` to cut")
    if isinstance(getattr(type(dataset), "transform", None), property):
        raise NotTranslatable(f"{type(dataset).__name__}.transform is a property: setting it on a copy may change "
                              f"the data set it reads through")
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
        return "", COLLATE_REFUSAL
    try:
        cut = split(transform_of(dataset))
        why = differs(dataset, cut)
    except NotTranslatable as exc:
        return "", str(exc)
    return ("", why) if why else (cut.describe(), "")


def differs(dataset: Any, cut: PixelSplit, samples: int = SAMPLES_CHECKED) -> str:
    """Why the two halves do not make `dataset`'s own samples ("" when they do), on its first few samples.

    Each sample is drawn twice under one seed (torch's and Python's generators both): through the data set as it
    is, and through the workers' half, then the device's. A stream (a webdataset pipeline) has no index: its first
    images, as they reach its transform, go through its own transform and through the workers' half. On a CPU they
    must agree to the bit; a data set of 16-bit or 1-bit images, or of arrays rather than PIL images, tells here
    rather than in a trial.
    """
    try:
        draws = _draws(dataset, cut, samples)
    except NotTranslatable:
        raise
    except Exception as exc:  # noqa: BLE001  (whatever fails here would fail in a trial)
        return f"its first samples cannot be read: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    for index, (own, halves) in enumerate(draws):
        try:
            want, got = _twice(own, halves)
            got = cut.finish(torch.as_tensor(got)[None])[0]
        except Exception as exc:  # noqa: BLE001  (whatever fails here would fail in a trial)
            return f"its sample {index} cannot be split: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        if not isinstance(want, torch.Tensor) or want.shape != got.shape or not torch.equal(want, got):
            return f"its sample {index} through the two halves is not the pipeline's own (compared to the bit)"
    return ""


Draw = Callable[[], Any]


def _draws(dataset: Any, cut: PixelSplit, samples: int) -> list[tuple[Draw, Draw]]:
    """For each of the first `samples` samples: (a draw of it as the data set makes it, a draw through the workers'
    half)."""
    if stages.is_webdataset(dataset):
        own = transform_of(dataset)
        images = stages.images_before(dataset, samples)
        return [((lambda im=image: own(im)), (lambda im=image: cut.host(im))) for image in images]
    if isinstance(dataset, IterableDataset):
        raise NotTranslatable(f"{type(dataset).__name__} is a stream: the device takes over the image transform "
                              f"of a webdataset pipeline's last stage, .map_tuple(transform, ...), and no other")
    copied = with_transform(dataset, cut.host)
    return [((lambda i=index: dataset[i]), (lambda i=index: copied[i])) for index in range(min(samples, len(dataset)))]


def _twice(first: Callable[[], Any], second: Callable[[], Any]) -> tuple[Any, Any]:
    """The image of each of two draws made from one generator state; the caller's state is left as it was."""
    state = random.getstate()
    with torch.random.fork_rng(devices=[]):
        seed = int(torch.randint(0, 2**31 - 1, ()).item())
        images = []
        for draw in (first, second):
            torch.manual_seed(seed)
            random.seed(seed)
            sample = draw()
            images.append(sample[0] if isinstance(sample, (tuple, list)) else sample)
    random.setstate(state)
    return images[0], images[1]

