"""An epoch ended early ends as a real one does: the workers get no more of it, and what they were given comes out."""

import time

import torch
from torch.utils.data import DataLoader, Dataset

from autotune.trial import backlog


def test_an_epoch_ended_early_yields_what_its_workers_were_given_then_stops() -> None:
    loader = DataLoader(torch.arange(40), batch_size=2, num_workers=2, prefetch_factor=2)
    batches = iter(loader)
    assert next(batches).tolist() == [0, 1]
    # 4 batches given at the start, one more for the one taken: 4 still to come.
    assert backlog.end_epoch(batches) == 4
    assert [b.tolist() for b in batches] == [[2, 3], [4, 5], [6, 7], [8, 9]]
    assert [b.tolist() for b in loader][:2] == [[0, 1], [2, 3]]  # the next epoch starts afresh


def test_an_epoch_without_workers_cannot_be_ended_early() -> None:
    batches = iter(DataLoader(torch.arange(8), batch_size=2))
    next(batches)
    assert backlog.end_epoch(batches) is None
    assert len(list(batches)) == 3


class Uneven(Dataset):
    """Worker 0's batches (of 2) take 20 ms a sample, worker 1's nothing: with in_order=False they come out of order."""

    def __len__(self) -> int:
        return 80

    def __getitem__(self, i: int) -> int:
        time.sleep(0.02 if (i // 2) % 2 == 0 else 0.0)
        return i


def test_an_epoch_ended_early_out_of_order_counts_only_the_batches_still_to_come() -> None:
    loader = DataLoader(Uneven(), batch_size=2, num_workers=2, prefetch_factor=2, in_order=False)
    batches = iter(loader)
    taken = [next(batches).tolist() for _ in range(3)]
    assert taken[0] != [0, 1], "a later batch came first"
    assert backlog.settle(batches)
    # 7 batches given out, 3 taken: 4 to come, though the first index not yet delivered is still 1.
    assert backlog.end_epoch(batches) == 4
    assert len(list(batches)) == 4
