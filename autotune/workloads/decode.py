"""The device decode path read off a data set's own torchvision pipeline, and the bytes data set it streams.

When a workload's data set is an ``ImageFolder`` of JPEGs (or any data set with a
``transform`` and a ``samples`` list of ``(path, target)``), and its transform is a
``Compose`` of RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip,
RandomVerticalFlip, ToTensor / PILToTensor / ToImage, ConvertImageDtype / ToDtype and
Normalize (v1 or v2), ``translate`` turns it into a ``DevicePipeline``: the geometry
as a list of crop/resize/flip steps, the pixel values as one affine map per
channel. ``autotune.loop.device_decode`` then runs it on whole batches on the
device, and the DataLoader workers only read file bytes (``JpegBytes``).

Anything else is refused with a ``NotTranslatable`` that names the transform or
the file: a pipeline autotune cannot reproduce must not be replaced by one that
trains differently. For example::

    pipeline = translate(dataset.transform)
    print(pipeline.describe())
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset, default_collate

from autotune.errors import AutotuneError

JPEG_MAGIC = b"\xff\xd8\xff"  # every JPEG file starts with SOI and the first marker's 0xFF
JPEG_SUFFIXES = (".jpg", ".jpeg")
FILES_SNIFFED = 32  # files whose first bytes are read at translation time, spread over the data set
# A workload's own collate_fn batches decoded, augmented samples (a mixup, a padding): the device path never
# has them on the host, so it cannot stand in for that pipeline.
COLLATE_REFUSAL = "the workload gives its own collate_fn, which batches decoded samples the device path never makes"


class NotTranslatable(AutotuneError, ValueError):
    """The data set's pipeline has no device equivalent; the message names the transform or file and why."""


@dataclasses.dataclass(frozen=True)
class Resize:
    size: tuple[int, ...]  # (short side,) or (height, width), as torchvision's Resize takes it
    max_size: int | None = None


@dataclasses.dataclass(frozen=True)
class CenterCrop:
    size: tuple[int, int]  # (height, width)


@dataclasses.dataclass(frozen=True)
class RandomResizedCrop:
    size: tuple[int, int]  # (height, width) of the output
    scale: tuple[float, float]  # share of the image's area the crop covers, drawn uniformly
    ratio: tuple[float, float]  # the crop's width / height, drawn log-uniformly


@dataclasses.dataclass(frozen=True)
class Flip:
    p: float  # chance that an image is mirrored
    axis: str  # "horizontal" (left-right) or "vertical"


GeometryStep = Resize | CenterCrop | RandomResizedCrop | Flip


@dataclasses.dataclass(frozen=True)
class DevicePipeline:
    """A torchvision pipeline as the device runs it: geometry per image, then one affine map of the pixel values.

    A decoded pixel ``p`` (0..255) becomes ``p * scale[c] + shift[c]`` in channel ``c``: ToTensor's division
    and Normalize folded together. Crops, resizes and flips commute with that map (each output pixel is a
    weighted mean of input pixels with weights summing to one), so it is applied once, to the small output.
    """

    geometry: tuple[GeometryStep, ...]
    scale: tuple[float, float, float]
    shift: tuple[float, float, float]
    dtype: torch.dtype  # float32 when the pipeline ends in a float tensor; uint8 when it ends in PILToTensor
    out_size: tuple[int, int]  # (height, width) of every output image
    steps: tuple[str, ...]  # the source transforms, by name and setting, for describe()

    def describe(self) -> str:
        """One line: what was read and what runs where."""
        return (f"decode JPEG on the device, then per image {' -> '.join(self.steps)}, "
                f"{self.out_size[0]}x{self.out_size[1]} {str(self.dtype).removeprefix('torch.')} "
                f"(crop and resize in one roi_align)")


def translate(transform: Any) -> DevicePipeline:
    """The device pipeline equivalent to `transform`; raises NotTranslatable naming the step it cannot take."""
    if transform is None:
        raise NotTranslatable("the data set has no transform: its samples are PIL images, which do not batch")
    pixels = "pil"  # what the pipeline holds so far: a PIL image, a uint8 tensor, or a float tensor
    scale, shift = [1.0] * 3, [0.0] * 3
    geometry: list[GeometryStep] = []
    steps: list[str] = []
    for t in flatten(transform):
        name = type(t).__name__
        geo = _geometry(t, name)
        if geo is not None:
            geometry.append(geo)
            steps.append(_show(geo))
            continue
        if name in ("ToPureTensor",):
            continue  # v2: strips the tv_tensor wrapper, the values stay
        if name == "ToTensor":
            if pixels != "pil":
                raise NotTranslatable(f"ToTensor after the image is already a tensor ({pixels})")
            pixels, scale, shift = "float", [s / 255 for s in scale], [b / 255 for b in shift]
            steps.append("ToTensor")
        elif name in ("PILToTensor", "ToImage"):
            if pixels != "pil":
                raise NotTranslatable(f"{name} after the image is already a tensor ({pixels})")
            pixels = "uint8"
            steps.append(name)
        elif name in ("ConvertImageDtype", "ToDtype"):
            if isinstance(t.dtype, dict):
                raise NotTranslatable(f"{name} with a dtype per input type ({t.dtype}): give one dtype")
            dtype = t.dtype
            rescale = name == "ConvertImageDtype" or bool(getattr(t, "scale", False))
            if dtype != torch.float32:
                raise NotTranslatable(f"{name}({dtype}): the device path makes float32 images")
            if pixels == "pil":
                raise NotTranslatable(f"{name} before the image is a tensor")
            if pixels == "uint8" and rescale:
                scale, shift = [s / 255 for s in scale], [b / 255 for b in shift]
            pixels = "float"
            steps.append(f"{name}(float32{', scale' if rescale else ''})")
        elif name == "Normalize":
            if pixels != "float":
                raise NotTranslatable(f"Normalize before the image is a float tensor ({pixels})")
            mean, std = _per_channel(t.mean, "mean"), _per_channel(t.std, "std")
            scale = [s / d for s, d in zip(scale, std)]
            shift = [(b - m) / d for b, m, d in zip(shift, mean, std)]
            steps.append(f"Normalize(mean={_floats(mean)}, std={_floats(std)})")
        else:
            raise NotTranslatable(f"transform {name} has no device equivalent (the device path knows "
                                  f"RandomResizedCrop, Resize, CenterCrop, Random*Flip, ToTensor, Normalize)")
    if pixels == "pil":
        raise NotTranslatable("the pipeline ends in a PIL image, not a tensor: its samples do not batch")
    out_size = _fixed_out_size(geometry)
    return DevicePipeline(tuple(geometry), _three(scale), _three(shift),
                          torch.float32 if pixels == "float" else torch.uint8, out_size, tuple(steps))


def flatten(transform: Any) -> list[Any]:
    inner = getattr(transform, "transforms", None)
    if type(transform).__name__ == "Compose" and isinstance(inner, Sequence):
        return [t for part in inner for t in flatten(part)]
    return [transform]


def _geometry(t: Any, name: str) -> GeometryStep | None:
    if name not in ("RandomResizedCrop", "Resize", "CenterCrop", "RandomHorizontalFlip", "RandomVerticalFlip"):
        return None
    interpolation = str(getattr(t, "interpolation", "bilinear")).lower()
    if "bilinear" not in interpolation:
        # roi_align samples bilinearly; a bicubic or nearest pipeline would train on other pixels.
        raise NotTranslatable(f"{name} with interpolation {interpolation.split('.')[-1]}: the device path "
                              f"resamples bilinearly")
    if name == "RandomResizedCrop":
        return RandomResizedCrop(_pair(t.size), (float(t.scale[0]), float(t.scale[1])),
                                 (float(t.ratio[0]), float(t.ratio[1])))
    if name == "Resize":
        if t.size is None:
            raise NotTranslatable("Resize(size=None, max_size=...): the device path needs a size")
        size = (t.size,) if isinstance(t.size, int) else tuple(int(s) for s in t.size)
        return Resize(size, t.max_size)
    if name == "CenterCrop":
        return CenterCrop(_pair(t.size))
    return Flip(float(t.p), "horizontal" if name == "RandomHorizontalFlip" else "vertical")


def _fixed_out_size(geometry: list[GeometryStep]) -> tuple[int, int]:
    """The one output size every image gets; refused when it follows each image's own size."""
    for step in reversed(geometry):
        if isinstance(step, (RandomResizedCrop, CenterCrop)):
            return step.size
        if isinstance(step, Resize):
            if len(step.size) == 2:
                return (step.size[0], step.size[1])
            raise NotTranslatable(f"{_show(step)} is the last resize and no crop follows: each image keeps its "
                                  f"own aspect ratio, so a batch has no one size")
    raise NotTranslatable("no crop or resize: each image keeps its own size, so a batch has no one size")


def _pair(size: Any) -> tuple[int, int]:
    if isinstance(size, int):
        return (size, size)
    size = tuple(int(s) for s in size)
    return (size[0], size[0]) if len(size) == 1 else (size[0], size[1])


def _per_channel(values: Sequence[float] | float, what: str) -> list[float]:
    values = [float(values)] if isinstance(values, (int, float)) else [float(v) for v in values]
    if len(values) == 1:
        return values * 3
    if len(values) != 3:
        raise NotTranslatable(f"Normalize {what} has {len(values)} values; a decoded RGB JPEG has 3 channels")
    return values


def _three(values: list[float]) -> tuple[float, float, float]:
    return (values[0], values[1], values[2])


def _floats(values: Sequence[float]) -> str:
    return "(" + ", ".join(f"{v:g}" for v in values) + ")"


def _show(step: GeometryStep) -> str:
    if isinstance(step, RandomResizedCrop):
        return f"RandomResizedCrop({_size(step.size)}, scale={_floats(step.scale)}, ratio={_floats(step.ratio)})"
    if isinstance(step, Resize):
        cap = f", max_size={step.max_size}" if step.max_size else ""
        return f"Resize({_size(step.size)}{cap})"
    if isinstance(step, CenterCrop):
        return f"CenterCrop({_size(step.size)})"
    return f"Random{step.axis.capitalize()}Flip(p={step.p:g})"


def _size(size: tuple[int, ...]) -> str:
    return str(size[0]) if len(set(size)) == 1 else "x".join(map(str, size))


def jpeg_samples(dataset: Any) -> list[tuple[str, int]]:
    """The data set's (path, target) list, every path a JPEG; raises NotTranslatable naming the first that is not.

    Every name is checked, and the first bytes of FILES_SNIFFED files spread over the list: reading all of a
    large folder's headers costs seconds on a network file system. ``JpegBytes`` checks each file it reads.
    """
    samples = getattr(dataset, "samples", None)
    if not isinstance(samples, Sequence) or not samples:
        raise NotTranslatable(f"{type(dataset).__name__} has no `samples` list of (path, target): the device "
                              f"path reads the files itself")
    for path, _ in samples:
        if not str(path).lower().endswith(JPEG_SUFFIXES):
            raise NotTranslatable(f"{path} is not a JPEG (by its name); the device decodes JPEG only")
    step = max(1, len(samples) // FILES_SNIFFED)
    for path, _ in samples[::step][:FILES_SNIFFED]:
        with open(path, "rb") as f:
            if f.read(len(JPEG_MAGIC)) != JPEG_MAGIC:
                raise NotTranslatable(f"{path} is not a JPEG (its first bytes); the device decodes JPEG only")
    return [(str(path), int(target)) for path, target in samples]


def derive(dataset: Any) -> tuple[DevicePipeline, "JpegBytes"]:
    """The device pipeline and the bytes data set for `dataset`; raises NotTranslatable with the reason."""
    pipeline = translate(_transform_of(dataset))
    return pipeline, JpegBytes(jpeg_samples(dataset), getattr(dataset, "target_transform", None))


def _transform_of(dataset: Any) -> Any:
    if not hasattr(dataset, "transform"):
        raise NotTranslatable(f"{type(dataset).__name__} has no `transform`: the device path translates a "
                              f"torchvision pipeline")
    return dataset.transform


def verdict(dataset: Any, collate_fn: Any = None) -> tuple[str, str]:
    """(what was derived, in one line; why nothing could be): exactly one of the two is empty."""
    if collate_fn is not None:
        return "", COLLATE_REFUSAL
    try:
        pipeline = translate(_transform_of(dataset))
        jpeg_samples(dataset)
    except NotTranslatable as exc:
        return "", str(exc)
    except OSError as exc:  # a file listed but unreadable: the CPU path would fail on it too
        return "", f"cannot read {exc.filename}: {exc.strerror}"
    return pipeline.describe(), ""


class JpegBytes(Dataset):
    """``(bytes, target)`` per sample: a DataLoader worker reads the file and nothing more.

    ``bytes`` is a 1-D uint8 tensor of the whole file, as ``torchvision.io.decode_jpeg`` takes it;
    batches are ``(packed bytes, lengths, targets)`` through ``collate_bytes``.
    """

    def __init__(self, samples: list[tuple[str, int]], target_transform: Any = None) -> None:
        self.samples = samples
        self.target_transform = target_transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, Any]:
        path, target = self.samples[index]
        data = Path(path).read_bytes()
        if not data.startswith(JPEG_MAGIC):
            raise ValueError(f"{path} is not a JPEG (its first bytes are {data[:4]!r}); the device decodes JPEG only")
        if self.target_transform is not None:
            target = self.target_transform(target)
        return torch.frombuffer(bytearray(data), dtype=torch.uint8), target


Packed = tuple[torch.Tensor, torch.Tensor]  # a batch's files end to end in one uint8 tensor, and their lengths


def pack(chunks: list[torch.Tensor]) -> Packed:
    """Byte tensors as one tensor and their lengths: what a worker hands over, one storage a batch.

    A list of 256 tensors crosses from a worker to the loop's process as 256 shared-memory handles, and is pinned
    as 256 tensors: the loop then waited on its workers while most cores sat idle (docs/workloads.md, "Decoding on
    the GPU").

    >>> packed, lengths = pack([torch.tensor([1, 2], dtype=torch.uint8), torch.tensor([3], dtype=torch.uint8)])
    >>> packed.tolist(), lengths.tolist()
    ([1, 2, 3], [2, 1])
    """
    lengths = torch.tensor([len(c) for c in chunks], dtype=torch.int64)
    return (torch.cat(chunks) if chunks else torch.empty(0, dtype=torch.uint8)), lengths


def unpack(packed: torch.Tensor, lengths: torch.Tensor) -> list[torch.Tensor]:
    """`pack`'s byte tensors again, as views of `packed` (contiguous, as ``decode_jpeg`` takes them).

    >>> files = [torch.tensor([1, 2], dtype=torch.uint8), torch.tensor([3], dtype=torch.uint8)]
    >>> [t.tolist() for t in unpack(*pack(files))]
    [[1, 2], [3]]
    """
    return list(torch.split(packed, lengths.tolist())) if len(lengths) else []


def collate_bytes(batch: list[tuple[torch.Tensor, Any]]) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """The files' bytes packed (`pack`: files differ in length), and their lengths; targets batch as DataLoader's
    default does. ``unpack`` gives the files back."""
    return (*pack([data for data, _ in batch]), default_collate([target for _, target in batch]))
