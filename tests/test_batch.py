"""Batches of any structure: walked, moved, counted, compared and kept on the device as pin_memory walks them."""

from __future__ import annotations

import collections
from typing import Any

import pytest
import torch

from autotune import batch as batches
from autotune.loop.loader import DeviceLoader, materialize

Pair = collections.namedtuple("Pair", "image label")


class Boxes:
    """A user's batch class that moves itself, as detection libraries' target classes do."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t
        self.moved_to: list[Any] = []

    def to(self, device: Any, non_blocking: bool = False) -> "Boxes":
        self.moved_to.append((str(device), non_blocking))
        return self


def _nested() -> dict[str, Any]:
    return {
        "pair": Pair(torch.zeros(4, 3, 2, 2), torch.arange(4)),
        "targets": [{"boxes": torch.ones(n, 4)} for n in (1, 2, 0, 3)],
        "names": ["a", "b", "c", "d"],
        "extra": Boxes(torch.zeros(1)),
    }


def test_to_device_keeps_every_container_type_and_passes_other_leaves_through() -> None:
    batch = _nested()
    moved = batches.to_device(batch, torch.device("cpu"), non_blocking=True, channels_last=True)
    assert type(moved) is dict and type(moved["pair"]) is Pair and type(moved["targets"]) is list
    assert moved["names"] == ["a", "b", "c", "d"]
    assert moved["extra"] is batch["extra"] and batch["extra"].moved_to == [("cpu", True)]
    # channels_last applies to 4-D floating tensors only: the image, not the labels or the boxes.
    assert moved["pair"].image.is_contiguous(memory_format=torch.channels_last)
    assert not moved["pair"].image.is_contiguous()
    assert [tuple(t.shape) for t in batches.leaves(moved)] == [(4, 3, 2, 2), (4,), (1, 4), (2, 4), (0, 4), (3, 4)]


def test_samples_are_the_first_tensors_leading_dimension_and_a_batch_without_one_is_refused() -> None:
    assert batches.samples_in(_nested()) == 4
    assert batches.samples_in((torch.zeros(7, 2), torch.zeros(7))) == 7
    with pytest.raises(batches.BatchError, match=r"declare samples_in\(batch\) in the workload"):
        batches.samples_in({"names": ["a"], "loss_scale": torch.tensor(2.0)})


def test_signatures_differ_by_shape_and_the_difference_names_where() -> None:
    a = {"ids": torch.zeros(8, 37, dtype=torch.long), "label": torch.zeros(8)}
    b = {"ids": torch.zeros(8, 112, dtype=torch.long), "label": torch.zeros(8)}
    assert batches.signature(a) == batches.signature({k: v.clone() for k, v in a.items()})
    found = batches.difference(batches.signature(a), batches.signature(b))
    assert found == "batch['ids']: shape (8, 37) vs (8, 112)"
    found = batches.difference(batches.signature((torch.zeros(2), "x")), batches.signature((torch.zeros(2), "y")))
    assert found == "batch[1]: value 'x' vs 'y'"


def test_rows_that_are_not_one_per_sample_cannot_be_kept_on_the_device() -> None:
    assert batches.why_not_stackable((torch.zeros(4, 3), torch.zeros(4)), 4) is None
    assert batches.why_not_stackable(_nested(), 4) == "the batch holds a list of 4 per-sample items"
    assert batches.why_not_stackable((torch.zeros(4, 3), "tag"), 4) == "the batch holds a str, not a tensor"


def test_copy_into_fills_buffers_of_the_same_structure() -> None:
    batch = {"x": torch.rand(3, 2), "y": [torch.arange(3)]}
    static = batches.empty_like(batch, torch.device("cpu"))
    batches.copy_into(static, batch)
    assert torch.equal(static["x"], batch["x"]) and torch.equal(static["y"][0], batch["y"][0])
    with pytest.raises(batches.BatchError, match="2 tensors for 1 buffers"):
        batches.copy_into([torch.zeros(3)], batch)


def test_a_dict_data_set_lives_on_the_device_and_yields_dict_batches_in_the_dataloaders_order() -> None:
    samples = [{"x": torch.full((2,), float(i)), "y": i} for i in range(10)]
    resident = materialize(samples, torch.device("cpu"), workers=0)
    assert set(resident) == {"x", "y"} and tuple(resident["x"].shape) == (10, 2)
    torch.manual_seed(3)
    got = [b["y"].tolist() for b in DeviceLoader(samples, batch_size=4, shuffle=True, device="cpu")]
    torch.manual_seed(3)
    want = [b["y"].tolist() for b in torch.utils.data.DataLoader(samples, batch_size=4, shuffle=True)]
    assert got == want and [len(b) for b in got] == [4, 4, 2]


def test_materialising_rows_padded_per_batch_is_refused_with_the_reason() -> None:
    # Materialising collates 1024 samples at a time: the first batch pads to 3, the second to 5.
    samples = [torch.zeros(3)] * 1024 + [torch.zeros(5)] * 1024

    def pad(group: list[torch.Tensor]) -> torch.Tensor:
        return torch.nn.utils.rnn.pad_sequence(group, batch_first=True)

    with pytest.raises(batches.BatchError, match="cannot keep the data set on the device: rows differ in shape"):
        materialize(samples, torch.device("cpu"), 0, collate_fn=pad)
    with pytest.raises(batches.BatchError, match="cannot keep the data set on the device: the batch holds a list"):
        materialize([{"t": torch.zeros(1)}] * 4, torch.device("cpu"), 0, collate_fn=lambda group: list(group))
