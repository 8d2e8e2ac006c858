"""Few shapes, little padding: the bucketing batch sampler and padding to a multiple, alone and in build_loader."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import pytest
import torch

from autotune.config import Config
from autotune.loop import build_loader
from autotune.loop.buckets import LengthBuckets, pad_refusal, padded

LENGTHS = [(i * 37) % 101 + 1 for i in range(1000)]  # 1..101, spread over the indices


def _epoch(sampler: LengthBuckets) -> list[list[int]]:
    return list(iter(sampler))


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("drop_last,batches,samples", [(False, 63, 1000), (True, 62, 992)])
def test_every_index_once_per_epoch(drop_last: bool, batches: int, samples: int) -> None:
    sampler = LengthBuckets(LENGTHS, batch_size=16, drop_last=drop_last, generator=_generator(0), mega_batches=4)
    for _ in range(2):  # each epoch, a new order of the same samples
        epoch = _epoch(sampler)
        flat = [i for batch in epoch for i in batch]
        assert len(sampler) == len(epoch) == batches
        assert len(flat) == len(set(flat)) == samples
        assert sum(len(b) != 16 for b in epoch) == (0 if drop_last else 1)


def test_batches_are_length_sorted_groups_in_a_shuffled_order() -> None:
    # One mega-batch holds every sample: sorted by length, cut in batches, the batches shuffled.
    sampler = LengthBuckets(LENGTHS, batch_size=50, generator=_generator(1), mega_batches=20)
    epoch = _epoch(sampler)
    spans = [(LENGTHS[b[0]], LENGTHS[b[-1]]) for b in epoch]
    for batch in epoch:
        assert [LENGTHS[i] for i in batch] == sorted(LENGTHS[i] for i in batch)
    ordered = sorted(spans)
    assert all(longest <= shortest for (_, longest), (shortest, _) in zip(ordered, ordered[1:]))
    # A batch holds 50 neighbours in length: at most 6 lengths apart, where a random 50 span nearly all 101.
    assert max(hi - lo for lo, hi in spans) <= 6
    assert spans != ordered and spans != ordered[::-1]  # no sawtooth: the timed windows mix long and short


def test_mega_batches_bound_how_far_lengths_are_sorted() -> None:
    sampler = LengthBuckets(LENGTHS, batch_size=10, generator=_generator(2), mega_batches=3)
    epoch = _epoch(sampler)
    # Within a mega-batch of 30 random samples, lengths sort; across mega-batches, batches overlap in length.
    spans = sorted((LENGTHS[b[0]], LENGTHS[b[-1]]) for b in epoch)
    assert any(longest > shortest for (_, longest), (shortest, _) in zip(spans, spans[1:]))


def test_the_order_is_deterministic_for_a_seed_and_differs_across_seeds() -> None:
    def first(seed: int) -> list[list[int]]:
        return _epoch(LengthBuckets(LENGTHS, batch_size=16, generator=_generator(seed)))

    assert first(3) == first(3)
    assert first(3) != first(4)
    torch.manual_seed(5)  # without a generator: drawn from the global one, as RandomSampler draws
    a = _epoch(LengthBuckets(LENGTHS, batch_size=16))
    torch.manual_seed(5)
    assert _epoch(LengthBuckets(LENGTHS, batch_size=16)) == a


def test_bad_arguments_name_the_value() -> None:
    with pytest.raises(ValueError, match=r"`batch_size >= 1 and mega_batches >= 1` must hold, but got \(batch_size=0, "
                                         r"mega_batches=50\)\."):
        LengthBuckets(LENGTHS, batch_size=0)
    with pytest.raises(ValueError, match=r"`lengths` must hold one int per sample, but got shape \(2, 2\)\."):
        LengthBuckets([[1, 2], [3, 4]], batch_size=2)


def pad(samples: list[torch.Tensor], pad_to_multiple_of: int | None = None) -> torch.Tensor:
    longest = max(len(s) for s in samples)
    if pad_to_multiple_of:
        longest = -(-longest // pad_to_multiple_of) * pad_to_multiple_of
    out = torch.zeros(len(samples), longest, dtype=torch.long)
    for row, s in enumerate(samples):
        out[row, : len(s)] = s
    return out


@dataclasses.dataclass
class Collator:  # the shape of Hugging Face's DataCollatorWithPadding: the multiple is a field
    pad_to_multiple_of: int | None = None

    def __call__(self, samples: list[torch.Tensor]) -> torch.Tensor:
        return pad(samples, self.pad_to_multiple_of)


def plain(samples: list[Any]) -> Any:
    return samples


def swallows(samples: list[Any], **options: Any) -> Any:
    return samples


@pytest.mark.parametrize(
    "collate,reason",
    [
        (pad, ""),
        (Collator(), ""),
        (functools.partial(pad), ""),
        (None, "the workload gives no collate_fn, and DataLoader's default_collate pads nothing"),
        (plain, "the workload's collate_fn takes no keyword argument pad_to_multiple_of"),
        (swallows, "the workload's collate_fn takes no keyword argument pad_to_multiple_of"),
    ],
)
def test_pad_refusal_names_what_is_missing(collate: Any, reason: str) -> None:
    assert pad_refusal(collate) == reason


def test_padded_rounds_up_to_the_multiple_for_functions_and_collators() -> None:
    samples = [torch.arange(1, 6), torch.arange(1, 12)]
    assert padded(pad, 8)(samples).shape == (2, 16)
    collator = Collator()
    assert padded(collator, 64)(samples).shape == (2, 64)
    assert collator.pad_to_multiple_of is None  # the workload's own collator is left as it was
    with pytest.raises(ValueError, match=r"pad_multiple=8 needs a collate_fn that pads to a multiple, but the "
                                         r"workload's collate_fn takes no keyword argument pad_to_multiple_of\."):
        padded(plain, 8)


class Texts(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return len(LENGTHS)

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.ones(LENGTHS[i], dtype=torch.long)


def _loader(config: Config, **kwargs: Any) -> Any:
    options: dict[str, Any] = dict(collate_fn=pad, lengths=LENGTHS)
    options.update(kwargs)
    return build_loader(Texts(), config, True, False, torch.device("cpu"), **options)


def test_build_loader_pads_to_the_multiple_and_buckets() -> None:
    widths = {batch.shape[1] for batch in _loader(Config(batch_size=32, pad_multiple=8))}
    assert widths and all(w % 8 == 0 for w in widths)
    torch.manual_seed(0)
    bucketed = _loader(Config(batch_size=32, bucketing=True, pad_multiple=64))
    assert isinstance(bucketed.batch_sampler, LengthBuckets) and len(bucketed) == 32
    batches = list(bucketed)
    assert {b.shape[1] for b in batches} == {64, 128}  # lengths 1..101: two multiples of 64
    assert sum(int((b > 0).sum()) for b in batches) == sum(LENGTHS)  # every sample once, none cut


def test_build_loader_refuses_bucketing_it_cannot_honour() -> None:
    config = Config(batch_size=32, bucketing=True)
    with pytest.raises(ValueError, match=r"bucketing=True needs each sample's length \(the workload's "
                                         r"sample_lengths\(dataset\)\), but none are given"):
        _loader(config, lengths=None)
    with pytest.raises(ValueError, match=r"bucketing=True makes its own batches of similar length, but sampler also "
                                         r"chooses the order; pass bucketing=False to keep it"):
        _loader(config, sampler=torch.utils.data.SequentialSampler(Texts()))
    with pytest.raises(ValueError, match=r"bucketing=True draws a random order of batches, but shuffle=False keeps "
                                         r"the samples in order; pass shuffle=True, or bucketing=False"):
        build_loader(Texts(), config, False, False, torch.device("cpu"), collate_fn=pad, lengths=LENGTHS)
    with pytest.raises(ValueError, match=r"pad_multiple=8 needs a collate_fn that pads to a multiple, but the "
                                         r"workload gives no collate_fn"):
        _loader(Config(batch_size=32, pad_multiple=8), collate_fn=None)
