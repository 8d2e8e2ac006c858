"""A webdataset stream's JPEG bytes for the device decode path: a copy of the stream that decodes no image.

A webdataset pipeline reads its shards, splits them by rank and worker, shuffles, and
then decodes (``.decode("pil")``), picks its fields (``.to_tuple("jpg", "cls")``) and
augments the image (``.map_tuple(augment, int)``). For ``decode = gpu`` the workers
should only read: ``bytes_stream`` copies the pipeline with two stages replaced, so
that every sample is ``(the image file's bytes as a uint8 tensor, target)``:

- the decode stage gets a first handler that keeps the image field's bytes
  (``KeepJpeg``); every other field decodes as before (``cls`` to an int);
- the last stage's image function becomes ``as_is``; its other functions stay.

Every stage before the decode (shards, splitters, shuffle buffer) is the same object,
so the shards, their order and the shuffle are the user's. ``translate`` reads the
augmentation as it reads a map-style ``transform`` (``autotune.workloads.decode``),
and ``image_handler`` is the stream's own, which decodes bytes, for the inputs
check. What is refused is named: a decode that is not PIL's, a stage between the
decode and the augmentation other than ``to_tuple`` or ``shuffle``, more than an
(image, target) pair, a file that is not a JPEG. For example::

    pipeline, files = derive_stream(stream)  # files yields (bytes, target); pipeline runs on the device
"""

from __future__ import annotations

import copy
import zlib
from typing import Any

import torch

from autotune.errors import AutotuneError
from autotune.workloads import stages
from autotune.workloads.decode import JPEG_MAGIC, DevicePipeline, NotTranslatable, translate

DECODE = "_map"  # webdataset's .decode(...) is a map stage over an autodecode.Decoder
PASSED = ("_to_tuple", "_shuffle")  # stages allowed between the decode and the augmentation: neither reads pixels
PIL_SPECS = ("pil", "pilrgb")  # the image handlers whose output the augmentation was written for: an RGB PIL image
SNIFFED = 32  # samples whose image bytes are checked at translation time, read in this process


def _name(stage: Any) -> str:
    return getattr(getattr(stage, "f", None), "__name__", "")


def _decoder_at(dataset: Any) -> int:
    """The index of the stream's decode stage (a map over an ``autodecode.Decoder``); refused where there is none."""
    from webdataset import autodecode

    found = [i for i, s in enumerate(dataset.pipeline)
             if _name(s) == DECODE and s.args and isinstance(s.args[0], autodecode.Decoder)]
    if not found:
        raise NotTranslatable("the webdataset pipeline has no .decode(...) stage: the device path replaces its "
                              "image decode, and there is none to replace")
    return found[-1]


def _image_handler(decoder: Any) -> Any:
    """The decoder's handler for images: the first after its default pre-handlers; refused unless it is PIL's."""
    from webdataset import autodecode

    own = [h for h in decoder.handlers if h not in autodecode.default_pre_handlers]
    first = own[0] if own else None
    spec = getattr(first, "imagespec", None)
    if not isinstance(first, autodecode.ImageHandler) or spec not in PIL_SPECS:
        what = f"ImageHandler({spec!r})" if spec else (type(first).__name__ if first is not None else "no handler")
        raise NotTranslatable(f"the stream decodes its images with {what}; the device path replaces "
                              f".decode('pil') only, whose RGB images its augmentation was written for")
    return first


def _image_key(dataset: Any, decode: int, last: int) -> str:
    """The to_tuple spec of the image field (``"jpg"``, or alternatives ``"jpg;jpeg"``), checking the stages between
    the decode and the augmentation."""
    between = dataset.pipeline[decode + 1:last]
    others = [_name(s) or type(s).__name__ for s in between if _name(s) not in PASSED]
    if others:
        raise NotTranslatable(f"the stream runs {', '.join(others)} between its decode and its augmentation; the "
                              f"device path keeps the bytes through {' and '.join(PASSED)} only")
    tuples = [s for s in between if _name(s) == "_to_tuple"]
    if len(tuples) != 1:
        raise NotTranslatable(f"the stream has {len(tuples)} .to_tuple(...) stages between its decode and its "
                              f"augmentation; the device path needs one, naming the image first")
    fields = tuples[0].args
    if len(fields) != 2 or len(dataset.pipeline[last].args) != 2:
        raise NotTranslatable(f"the stream's samples are .to_tuple{tuple(fields)}: the device path batches "
                              f"(image, target) pairs, two fields")
    return str(fields[0])


class NotJpeg(AutotuneError, ValueError):
    """A stream's image field that is not a JPEG: the device decodes JPEG only."""


class KeepJpeg:
    """A decode handler that keeps the image field's bytes, as a uint8 tensor, and leaves every other to the next.

    Picklable (a module-level class), as a spawned worker needs its data set to be.
    """

    def __init__(self, spec: str) -> None:
        self.fields = {f.lower() for f in spec.split(";")}  # to_tuple's alternatives: "jpg;jpeg", or "input.jpg"

    def __call__(self, key: str, data: bytes) -> torch.Tensor | None:
        if key.lstrip(".").lower() not in self.fields:  # the Decoder hands each field's name with a dot before it
            return None
        if not data.startswith(JPEG_MAGIC):
            raise NotJpeg(f"the stream's {key} field is not a JPEG (its first bytes are {data[:4]!r}); the device "
                             f"decodes JPEG only: search with --fix decode=cpu")
        return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def not_jpeg(exc: BaseException) -> str | None:
    """KeepJpeg's refusal of a field that is no JPEG, wherever it is in `exc`'s chain of causes; else None."""
    at: BaseException | None = exc
    while at is not None:
        if isinstance(at, NotJpeg):
            return str(at)
        at = at.__cause__ or at.__context__
    return None


def as_is(x: Any) -> Any:
    """The image function of the bytes stream's last stage: the bytes go on as they are."""
    return x


def bytes_stream(dataset: Any) -> Any:
    """A copy of the webdataset pipeline `dataset` that yields ``(JPEG bytes, target)``; the user's is unchanged."""
    last, decode = stages.last_map_tuple(dataset), _decoder_at(dataset)
    spec = _image_key(dataset, decode, last)
    stage = dataset.pipeline[decode]
    _image_handler(stage.args[0])
    handler = stage.kw.get("handler")
    if handler is not None and getattr(handler, "__name__", "") != "reraise_exception":
        # A lenient handler skips the samples it cannot decode; on the device path it would skip others (a field
        # that is no JPEG, whole samples whose class decodes), and the workers would not say.
        raise NotTranslatable(f"the stream's decode stage skips what it cannot decode (handler="
                              f"{getattr(handler, '__name__', handler)}); the device path decodes every sample the "
                              f"workers read, and takes a decode stage that raises only")
    decoder = copy.copy(stage.args[0])
    decoder.handlers = [KeepJpeg(spec), *decoder.handlers]
    copied = stages.with_image_transform(dataset, as_is)
    copied.pipeline = list(copied.pipeline)
    copied.pipeline[decode] = type(stage)(stage.f, decoder, *stage.args[1:], **stage.kw)
    return copied


def first_jpegs(dataset: Any, samples: int) -> list[torch.Tensor]:
    """The image bytes of the stream's first `samples` samples, read in this process through the bytes copy (through
    copies of its stages, ``stages.images_before``: reading a stream moves them on, a shard shuffle's epoch)."""
    return stages.images_before(bytes_stream(dataset), samples)


def image_handler(dataset: Any) -> Any:
    """The stream's own image handler: ``handler(".jpg", data)`` decodes a JPEG's bytes as its decode stage does, to
    an RGB PIL image."""
    return _image_handler(dataset.pipeline[_decoder_at(dataset)].args[0])


class SplitJpeg:
    """Hybrid decode's image function on a stream: ``(bytes, True)`` for the device, or ``(pixels, False)``: the
    bytes decoded by the stream's own handler and run through `host` (the pipeline's augmentation, or its uint8 cut).

    Which images the device decodes follows a hash of the file's bytes (CRC-32), as the map-style hybrid follows a
    hash of the sample's index (``autotune.loop.hybrid_decode``): a stream has no index, and a sample's place in its
    worker's stream changes with the worker count and the shuffle buffer. The same image takes the same path in
    every pass, and the share holds over any stretch of the stream.
    """

    def __init__(self, share: float, handler: Any, host: Any) -> None:
        if not 0 < share < 1:
            raise ValueError(f"`0 < share < 1` must hold for a split of the decoding, but got {share=}.")
        self.share, self.handler, self.host = share, handler, host

    def __call__(self, data: torch.Tensor) -> tuple[Any, bool]:
        raw = data.numpy()  # the tensor's own bytes: hashed without a copy; only the host's half is copied out
        if on_device(raw, self.share):
            return data, True
        return self.host(self.handler(".jpg", raw.tobytes())), False


def on_device(raw: Any, share: float) -> bool:
    """Whether a JPEG of these bytes (any bytes-like object) is decoded on the device at `share`.

    >>> on_device(b"a", 0.5), on_device(b"b", 0.5), on_device(b"a", 1.0)
    (False, True, True)
    """
    return zlib.crc32(raw) < share * 2**32


def split_stream(dataset: Any, share: float, host: Any) -> Any:
    """A copy of the webdataset pipeline `dataset` whose samples are ``((bytes, True) or (pixels, False), target)``:
    `share` of its JPEGs for the device, the rest decoded and run through `host` in the workers (``SplitJpeg``)."""
    return stages.with_image_transform(bytes_stream(dataset), SplitJpeg(share, image_handler(dataset), host))


def derive_stream(dataset: Any) -> tuple[DevicePipeline, Any]:
    """The device pipeline and the bytes stream for `dataset`; raises NotTranslatable with the reason."""
    files = bytes_stream(dataset)  # refuses stages around the augmentation that would not let the bytes through
    pipeline = translate(stages.image_transform(dataset))
    try:
        stages.images_before(files, SNIFFED)  # a field that is no JPEG raises here, before any trial or training
    except Exception as exc:  # webdataset raises a field's failure as a DecodingError from it
        found = not_jpeg(exc)
        if found is None:
            raise
        raise NotTranslatable(found) from exc
    return pipeline, files


def verdict(dataset: Any, collate_fn: Any = None) -> tuple[str, str]:
    """(what was derived, in one line; why nothing could be) for a stream: exactly one of the two is empty."""
    from autotune.workloads.decode import COLLATE_REFUSAL

    if collate_fn is not None:
        return "", COLLATE_REFUSAL
    if not stages.is_webdataset(dataset):
        return "", ("the stream is not a webdataset pipeline: the device path reads the JPEG bytes of a "
                    "webdataset's .decode('pil') stage, and this stream has none")
    try:
        pipeline, _ = derive_stream(dataset)
    except NotTranslatable as exc:
        return "", str(exc)
    return pipeline.describe(), ""
