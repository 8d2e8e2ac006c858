"""One sample's identity in a stream: the key its source gives, else a digest of its content.

webdataset gives every sample its ``__key__`` (with the shard it came from, ``__url__``); a pipeline read before its
decode stages still carries them, and ``autotune.streams.bounded`` reads it there. Any other sample (a Hugging Face
row, a user's tuple of tensors) is known by a digest of its content: its values, shapes and dtypes. A stream whose
samples are random each time they are made (augmented images) cannot be told apart by content; a workload can
declare ``sample_key(sample)`` to give each its own identity.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch


def key_of(sample: Any, declared: Callable[[Any], Any] | None = None) -> str:
    """`sample`'s identity: the workload's ``sample_key``, webdataset's shard and key, else a content digest."""
    if declared is not None:
        return str(declared(sample))
    if isinstance(sample, dict) and "__key__" in sample:
        return f"{sample.get('__url__', '')}#{sample['__key__']}"
    h = hashlib.sha1()
    _feed(h, sample)
    return h.hexdigest()


def _feed(h: Any, value: Any) -> None:
    """Add `value` to the digest `h`, with its type and shape, so that equal content digests equally."""
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"T{tuple(t.shape)}{t.dtype}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(value, np.ndarray):
        h.update(f"A{value.shape}{value.dtype}".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, dict):
        h.update(b"{")
        for key in sorted(value, key=str):
            h.update(str(key).encode() + b":")
            _feed(h, value[key])
        h.update(b"}")
    elif isinstance(value, (list, tuple)):
        h.update(b"[")
        for item in value:
            _feed(h, item)
        h.update(b"]")
    elif hasattr(value, "tobytes") and hasattr(value, "mode") and hasattr(value, "size"):  # a PIL image
        h.update(f"I{value.mode}{value.size}".encode() + value.tobytes())
    elif isinstance(value, (bytes, bytearray, memoryview)):
        h.update(b"B" + bytes(value))
    else:
        h.update(f"{type(value).__name__}:{value!r}".encode())
