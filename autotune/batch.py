"""A batch as a nested structure: tensors in tuples, lists, dicts, namedtuples, or objects with ``.to()``.

A batch is whatever the workload's loader yields: ``(x, y)``, a dict of padded
token tensors, images plus a list of per-image target dicts. It is walked the
way ``torch.utils.data``'s pin-memory traversal walks it: mappings and
sequences keep their type, namedtuples their fields, strings and other
non-tensor leaves pass through as they are, and an object with a ``.to()``
method (a user's batch class) is moved by that method.

For example::

    >>> import torch
    >>> batch = {"ids": torch.zeros(4, 7, dtype=torch.long), "meta": ["a", "b", "c", "d"]}
    >>> samples_in(batch), [tuple(t.shape) for t in leaves(batch)]
    (4, [(4, 7)])
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

from autotune.errors import AutotuneError

Signature = tuple[Any, ...]


class BatchError(AutotuneError, ValueError):
    """A batch that cannot be used the way it was asked for (counted, stacked, captured)."""


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(value, "_fields")


def map_tensors(
    batch: Any, fn: Callable[[torch.Tensor], torch.Tensor], other: Callable[[Any], Any] | None = None
) -> Any:
    """The same structure with `fn` applied to every tensor, and `other` to every object with a ``.to()``."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, (str, bytes)):
        return batch
    if isinstance(batch, Mapping):
        items = {key: map_tensors(value, fn, other) for key, value in batch.items()}
        try:
            return type(batch)(items)  # type: ignore[call-arg]
        except TypeError:  # a mapping type whose constructor takes something else
            return items
    if _is_namedtuple(batch):
        return type(batch)(*(map_tensors(value, fn, other) for value in batch))
    if isinstance(batch, tuple):
        return tuple(map_tensors(value, fn, other) for value in batch)
    if isinstance(batch, Sequence):
        values = [map_tensors(value, fn, other) for value in batch]
        try:
            return type(batch)(values)  # type: ignore[call-arg]
        except TypeError:
            return values
    if other is not None and callable(getattr(batch, "to", None)) and not isinstance(batch, type):
        return other(batch)
    return batch


def leaves(batch: Any) -> Iterator[torch.Tensor]:
    """Every tensor in the batch, depth first, in the structure's own order."""
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, (str, bytes)):
        return
    elif isinstance(batch, Mapping):
        for value in batch.values():
            yield from leaves(value)
    elif isinstance(batch, Sequence):
        for value in batch:
            yield from leaves(value)


def to_device(batch: Any, device: torch.device, non_blocking: bool = False, channels_last: bool = False) -> Any:
    """The batch on `device`; with `channels_last`, every 4-D floating tensor (an image batch) in that format."""

    def move(t: torch.Tensor) -> torch.Tensor:
        t = t.to(device, non_blocking=non_blocking)
        if channels_last and t.dim() == 4 and t.is_floating_point():
            t = t.contiguous(memory_format=torch.channels_last)
        return t

    def move_object(obj: Any) -> Any:
        try:
            return obj.to(device, non_blocking=non_blocking)
        except TypeError:  # a .to() that takes only the device
            return obj.to(device)

    return map_tensors(batch, move, move_object)


def samples_in(batch: Any) -> int:
    """How many samples a batch holds, by default: the leading dimension of its first tensor."""
    for tensor in leaves(batch):
        if tensor.dim() == 0:
            break
        return int(tensor.shape[0])
    raise BatchError(
        f"cannot count the samples of a batch of type {type(batch).__name__}: its first tensor must have a "
        "leading batch dimension; declare samples_in(batch) in the workload"
    )


def signature(batch: Any) -> Signature:
    """The batch's structure, its tensors' shapes and dtypes, and its other leaves' values.

    Two batches with one signature can be replayed by one CUDA graph; the other
    leaves' values are part of it because a graph bakes in whatever the step did with them.
    """
    if isinstance(batch, torch.Tensor):
        return ("tensor", tuple(batch.shape), batch.dtype)
    if isinstance(batch, Mapping):
        return ("map", type(batch).__name__, tuple((key, signature(value)) for key, value in batch.items()))
    if isinstance(batch, Sequence) and not isinstance(batch, (str, bytes)):
        return ("seq", type(batch).__name__, tuple(signature(value) for value in batch))
    return ("value", type(batch).__name__, repr(batch)[:200])


def empty_like(batch: Any, device: torch.device, channels_last: bool = False) -> Any:
    """Buffers of the batch's structure, shapes and dtypes on `device`: a graph's static input."""

    def buffer(t: torch.Tensor) -> torch.Tensor:
        layout = torch.channels_last if channels_last and t.dim() == 4 and t.is_floating_point() else None
        return torch.empty(t.shape, dtype=t.dtype, device=device, memory_format=layout or torch.contiguous_format)

    return map_tensors(batch, buffer)


def copy_into(destination: Any, source: Any, non_blocking: bool = False) -> None:
    """Copy every tensor of `source` into the tensor at the same place in `destination`."""
    targets, sources = list(leaves(destination)), list(leaves(source))
    if len(targets) != len(sources):
        raise BatchError(f"`same structure` must hold, but got {len(sources)} tensors for {len(targets)} buffers")
    for target, value in zip(targets, sources):
        target.copy_(value, non_blocking=non_blocking)


def why_not_stackable(batch: Any, samples: int) -> str | None:
    """Why the batch's samples cannot be kept as rows of tensors on the device, or None when they can.

    A batch can live on the device as one tensor per leaf, sliced by sample, when
    every leaf is a tensor whose leading dimension counts the samples.
    """
    if isinstance(batch, torch.Tensor):
        if batch.dim() == 0 or batch.shape[0] != samples:
            return f"a tensor of shape {tuple(batch.shape)} in a batch of {samples} samples is not one row per sample"
        return None
    if isinstance(batch, Mapping):
        values: Sequence[Any] = list(batch.values())
    elif isinstance(batch, Sequence) and not isinstance(batch, (str, bytes)):
        per_sample = not isinstance(batch, tuple) and len(batch) == samples
        rows = all(isinstance(v, torch.Tensor) and v.dim() > 0 and v.shape[0] == samples for v in batch)
        if per_sample and not rows:  # a list of images or of target dicts, not a list of batched tensors
            return f"the batch holds a list of {samples} per-sample items"
        values = batch
    else:
        return f"the batch holds a {type(batch).__name__}, not a tensor"
    for value in values:
        reason = why_not_stackable(value, samples)
        if reason is not None:
            return reason
    return None


def index(batch: Any, rows: torch.Tensor | slice) -> Any:
    """The samples `rows` of a batch kept as rows of tensors (see ``why_not_stackable``)."""
    return map_tensors(batch, lambda t: t[rows])


def token_slots(batch: Any) -> int:
    """The token positions of a batch, padding included: the first two dimensions of its first 2-D tensor.

    In a padded text batch that tensor is the token ids (samples x longest sequence);
    ``tokens_in(batch)`` over this is the share of positions that hold real tokens.
    """
    for tensor in leaves(batch):
        if tensor.dim() >= 2:
            return int(tensor.shape[0] * tensor.shape[1])
    return 0


def difference(a: Signature, b: Signature, path: str = "batch") -> str | None:
    """Where two signatures differ first, in words (``batch['input_ids']: shape (8, 37) vs (8, 112)``)."""
    if a == b:
        return None
    if a[0] != b[0] or a[1] != b[1] or a[0] == "value":
        if a[0] == b[0] == "value":
            return f"{path}: value {a[2]} vs {b[2]}"
        if a[0] == b[0] == "tensor":
            what = "shape" if a[1] != b[1] else "dtype"
            return f"{path}: {what} {a[1] if what == 'shape' else a[2]} vs {b[1] if what == 'shape' else b[2]}"
        return f"{path}: {a[1]} vs {b[1]}"
    if a[0] == "tensor":
        return f"{path}: dtype {a[2]} vs {b[2]}"
    if len(a[2]) != len(b[2]):
        return f"{path}: {len(a[2])} vs {len(b[2])} items"
    for i, (x, y) in enumerate(zip(a[2], b[2])):
        if a[0] == "map":
            if x[0] != y[0]:
                return f"{path}: key {x[0]!r} vs {y[0]!r}"
            key, x, y = x[0], x[1], y[1]
            inner = f"{path}[{key!r}]"
        else:
            inner = f"{path}[{i}]"
        found = difference(x, y, inner)
        if found is not None:
            return found
    return f"{path}: differs"


def queued(values: list[int] | list[float] | tuple[float, ...], device: torch.device,
           dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Host numbers as a tensor on `device`, the copy queued on the current stream rather than waited for.

    ``torch.tensor(values, device=cuda)`` copies from pageable memory and then synchronizes the stream; the device
    decode runs a batch ahead on a side stream, and a batch makes a dozen such tensors besides one per image size
    (``autotune.loop.crops``), so each would wait for the kernels queued before it. From pinned memory the copy is
    queued like a kernel, and the pinned block is not reused before it has run (PyTorch's host allocator records
    the copy).
    """
    host = torch.tensor(values, dtype=dtype)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def varying(probes: list[Any]) -> str | None:
    """How the probe batches differ in signature (shapes, structure, non-tensor values), or None."""
    first = signature(probes[0])
    for other in probes[1:]:
        found = difference(first, signature(other))
        if found is not None:
            return found
    return None


def sample_shapes(batch: Any) -> str:
    """Each tensor of one sample of `batch`, its shape without the batch dimension and its dtype.

    >>> sample_shapes((torch.zeros(8, 1, 28, 28), torch.zeros(8, dtype=torch.int64)))
    '1x28x28 float32, - int64'
    """
    return ", ".join(f"{'x'.join(map(str, t.shape[1:])) or '-'} {str(t.dtype).removeprefix('torch.')}"
                     for t in leaves(batch))
