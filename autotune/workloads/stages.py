"""A webdataset pipeline's image transform: the first function of its last stage, ``map_tuple(augment, ...)``.

A webdataset pipeline makes its samples in stages (``pipeline``: the shard list, the
splitters, the tar reader, a shuffle buffer, decode, ``to_tuple``, ``map_tuple``); the
per-image torchvision pipeline a map-style data set keeps in ``transform`` is there the
first function of its ``map_tuple`` stage. ``device_normalize`` cuts it as it cuts a
``transform`` (``autotune.workloads.pixels``); this module finds it (``image_transform``),
makes a copy of the pipeline with another in its place (``with_image_transform``; the
user's pipeline is never changed), and reads the images that reach it
(``images_before``, through copies of the stages), so both halves can be checked against it on the same images.

Only a ``map_tuple`` stage that is the pipeline's last is taken: a stage after it would
get the workers' uint8 images instead of the floats it was written for.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from autotune.workloads.decode import NotTranslatable

MAP_TUPLE = "_map_tuple"  # the function a webdataset ``.map_tuple(...)`` stage runs


def is_webdataset(dataset: Any) -> bool:
    """Whether `dataset` is a webdataset pipeline (its stages in ``pipeline``)."""
    return type(dataset).__module__.startswith("webdataset") and isinstance(getattr(dataset, "pipeline", None), list)


def last_map_tuple(dataset: Any) -> int:
    """The index of the pipeline's last stage, a ``map_tuple`` whose first function is the image's; else refused."""
    stages = dataset.pipeline
    last = stages[-1] if stages else None
    if getattr(getattr(last, "f", None), "__name__", "") != MAP_TUPLE or not getattr(last, "args", ()):
        found = [i for i, s in enumerate(stages) if getattr(getattr(s, "f", None), "__name__", "") == MAP_TUPLE]
        where = (f"its map_tuple stage is followed by {len(stages) - 1 - found[-1]} more stage(s), which would get "
                 f"the workers' uint8 images" if found else "it has no map_tuple(transform, ...) stage")
        raise NotTranslatable(f"the webdataset pipeline's image transform must be the first function of its last "
                              f"stage, .map_tuple(transform, ...), but {where}")
    return len(stages) - 1


def image_transform(dataset: Any) -> Any:
    """The image transform of the webdataset pipeline `dataset`: its last ``map_tuple``'s first function."""
    return dataset.pipeline[last_map_tuple(dataset)].args[0]


def with_image_transform(dataset: Any, transform: Any) -> Any:
    """A shallow copy of the webdataset pipeline `dataset` whose last ``map_tuple`` runs `transform` on the image
    instead of its own; its other functions, its other stages and the user's pipeline are left as they are."""
    at = last_map_tuple(dataset)
    stage = dataset.pipeline[at]
    replaced = type(stage)(stage.f, transform, *stage.args[1:], **stage.kw)
    copied = copy.copy(dataset)
    copied.pipeline = [*dataset.pipeline[:at], replaced, *dataset.pipeline[at + 1:]]
    return copied


def images_before(dataset: Any, samples: int) -> list[Any]:
    """The first `samples` images that reach the image transform: the pipeline read up to its last stage, in this
    process (so from every shard a worker would split between them), each sample's first field."""
    import webdataset as wds

    at = last_map_tuple(dataset)
    # Copies of the stages: reading a stream moves them on (a shard shuffle's epoch), which the user's must not be.
    head = wds.DataPipeline(*copy.deepcopy(dataset.pipeline[:at]))
    return [sample[0] for sample in itertools.islice(iter(head), samples)]
