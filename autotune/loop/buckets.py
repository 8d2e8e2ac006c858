"""Few shapes, little padding: batches of samples of similar length, and padding rounded up to a multiple.

A padding collate_fn pads each batch to its longest sample. With lengths spread
wide (text: 16 to 512 tokens), a random batch of 256 is nearly always padded to
the longest, and most of its token positions are padding; every new padded
length is also a new shape, and a new shape costs a kernel choice or an
attention plan. Two knobs answer that:

- ``bucketing``: ``LengthBuckets``, a batch sampler in the style of Hugging
  Face's ``LengthGroupedSampler`` and fairseq's ``batch_by_size``: shuffle the
  samples, cut the order into mega-batches of ``MEGA_BATCHES`` batches, sort
  each mega-batch by length, cut it into batches, and shuffle the batches;
- ``pad_multiple``: ``padded``, the workload's collate_fn told to round its padded
  length up to a multiple (``pad_to_multiple_of``, as in Hugging Face's
  ``DataCollatorWithPadding``).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import Sampler

PAD_KEYWORD = "pad_to_multiple_of"  # Hugging Face's name for it: DataCollatorWithPadding and tokenizer.pad take it
# Samples sorted together, in batches. Larger sorts closer lengths together (less padding), smaller keeps each
# batch's company more random; 50 is the order of Hugging Face's LengthGroupedSampler (mega-batch of 50 batches).
MEGA_BATCHES = 50


class LengthBuckets(Sampler[list[int]]):
    """Batches of indices of similar length, every index once per epoch, the batches in a random order.

    Each epoch: a random permutation of the samples (the last ``len % batch_size``
    dropped first with ``drop_last``, so the dropped samples are random, not the
    longest), cut into mega-batches of ``mega_batches * batch_size``, each sorted by
    length and cut into batches; then the order of all the batches is shuffled, so
    that any run of batches (a timing window) mixes long and short ones instead of
    falling from long to short within every mega-batch.

    The permutations are drawn as ``RandomSampler`` draws its one: from ``generator``
    when it is set, else from a generator seeded by the global one, so two loops
    seeded alike see the same batches (the parity check sets ``generator`` per epoch).

    For example::

        DataLoader(dataset, batch_sampler=LengthBuckets(lengths, batch_size=256), collate_fn=pad)
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        drop_last: bool = False,
        generator: torch.Generator | None = None,
        mega_batches: int = MEGA_BATCHES,
    ) -> None:
        if batch_size < 1 or mega_batches < 1:
            raise ValueError(f"`batch_size >= 1 and mega_batches >= 1` must hold, but got ({batch_size=}, "
                             f"{mega_batches=}).")
        self.lengths = torch.as_tensor(lengths, dtype=torch.int64)
        if self.lengths.dim() != 1:
            raise ValueError(f"`lengths` must hold one int per sample, but got shape {tuple(self.lengths.shape)}.")
        self.batch_size, self.drop_last = batch_size, drop_last
        self.generator = generator
        self.mega_batches = mega_batches

    def __len__(self) -> int:
        n = len(self.lengths)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        generator = self.generator
        if generator is None:  # RandomSampler's own draw when it has no generator
            generator = torch.Generator()
            generator.manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
        n = len(self.lengths)
        order = torch.randperm(n, generator=generator)
        if self.drop_last:
            order = order[: n - n % self.batch_size]
        mega = self.mega_batches * self.batch_size
        batches: list[torch.Tensor] = []
        for lo in range(0, len(order), mega):
            chunk = order[lo : lo + mega]
            chunk = chunk[torch.argsort(self.lengths[chunk], stable=True)]
            batches.extend(chunk.split(self.batch_size))
        for i in torch.randperm(len(batches), generator=generator).tolist():
            yield batches[i].tolist()


def pad_refusal(collate_fn: Any) -> str:
    """Why `collate_fn` cannot pad to a multiple; "" when it can (``padded`` then applies).

    It can when it takes ``pad_to_multiple_of`` as a named keyword (a function
    ``collate(samples, pad_to_multiple_of=None)``), or when it is a dataclass with
    that field (Hugging Face's ``DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8)``).
    A bare ``**kwargs`` does not count: it may swallow the keyword and pad as before.
    """
    if collate_fn is None:
        return "the workload gives no collate_fn, and DataLoader's default_collate pads nothing"
    if _collator_field(collate_fn):
        return ""
    try:
        parameter = inspect.signature(collate_fn).parameters.get(PAD_KEYWORD)
    except (TypeError, ValueError):  # a builtin or C callable without a signature
        parameter = None
    if parameter is not None and parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD):
        return ""
    return f"the workload's collate_fn takes no keyword argument {PAD_KEYWORD}"


def padded(collate_fn: Callable[..., Any] | None, multiple: int) -> Callable[..., Any]:
    """`collate_fn` padding each batch to a multiple of `multiple` token positions.

    A dataclass collator gets a copy with its field set; a function is wrapped in a
    ``functools.partial``, which pickles to DataLoader workers as the function does.

    >>> def pad(samples, pad_to_multiple_of=None): return pad_to_multiple_of
    >>> padded(pad, 8)([])
    8
    """
    if multiple < 1:
        raise ValueError(f"`multiple >= 1` must hold to pad to a multiple, but got {multiple=}.")
    why = pad_refusal(collate_fn)
    if why:
        raise ValueError(f"pad_multiple={multiple} needs a collate_fn that pads to a multiple, but {why}.")
    if _collator_field(collate_fn):
        return dataclasses.replace(collate_fn, **{PAD_KEYWORD: multiple})  # type: ignore[type-var]
    return functools.partial(collate_fn, **{PAD_KEYWORD: multiple})  # type: ignore[arg-type]


def _collator_field(collate_fn: Any) -> bool:
    """`collate_fn` is a dataclass instance with a pad_to_multiple_of field, as Hugging Face's collators are."""
    if not dataclasses.is_dataclass(collate_fn) or isinstance(collate_fn, type):
        return False
    return PAD_KEYWORD in {f.name for f in dataclasses.fields(collate_fn)}
