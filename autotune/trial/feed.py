"""The batches a measurement takes, across epochs, and what the loader had ready for each.

A measurement (``autotune.trial.timing``) takes every batch through a ``Feed``: it
knows how far into the epoch the loop is, how long the last batch kept it waiting,
and whether, since a window began, the loop asked for a batch its workers did not
have ready (``autotune.trial.backlog`` reads that from the DataLoader's iterator).
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Iterator
from typing import Any

from autotune import batch as batches
from autotune.trial import backlog

Clock = Callable[[], float]
Counter = Callable[[Any], Any]  # a batch's samples (an int) or real tokens (an int, or a 0-d tensor)
DRY_WAIT_S = 1e-3  # a batch that took this long to arrive was not waiting in a queue: the loop ran dry


class Feed:
    """Batches across epochs; knows how far into the epoch it is and how long the last batch kept it waiting.

    Since the last `reset_window` it counts the samples of each batch it hands out, with
    `tokens` their real tokens and token positions (tensors where `tokens` returns one: no
    sync inside a window), and with `watch_backlog` whether a batch asked for was not ready.
    """

    def __init__(self, loader: Any, clock: Clock, count: Counter = batches.samples_in,
                 tokens: Counter | None = None, watch_backlog: bool = False, steps: int | None = None) -> None:
        self.loader, self.clock, self.count, self.tokens = loader, clock, count, tokens
        # A stream's pass is what its workload declares (`steps`); a pass that ends sooner is its real length.
        self.watch_backlog, self.steps_per_epoch = watch_backlog, len(loader) if steps is None else steps
        self.stream = steps is not None
        # A stream's pass that ended before the declared one: the samples it held (its last batch may be partial).
        self.pass_samples: int | None = None
        self._pass_taken = 0
        self.first_batch_s: float | None = None  # the first iterator's start to its first batch: a stream's start
        self._started = clock()
        self.iterator: Iterator | None = iter(loader)
        self.position, self.last_wait, self.slot_sum = 0, 0.0, 0
        self.ran_dry = False  # since the last `reset_window`: asked for a batch that was not ready
        self.token_sum: Any = 0
        self.held: Any = None  # the next batch, asked for ahead (`hold`); counted where it is handed out
        self.held_s = 0.0  # how long asking for it took

    def take(self) -> tuple[Any, int]:
        """The next batch and its samples; its tokens are added up."""
        batch = self.next()
        if self.tokens is not None:
            self.token_sum = self.token_sum + self.tokens(batch)
            self.slot_sum += batches.token_slots(batch)
        return batch, self.count(batch)

    def reset_window(self) -> None:
        self.token_sum, self.slot_sum, self.ran_dry = 0, 0, False

    def next(self) -> Any:
        if self.held is not None:
            batch, self.held = self.held, None
        else:
            if self.position >= self.steps_per_epoch:
                self.restart()
            batch = self._ask()
        self.position += 1
        return batch

    def hold(self) -> float:
        """Ask for this epoch's next batch now, while the device still runs the last step, as a loop asks for it;
        the seconds that took (0 where nothing was asked for: none is left this epoch, or one is held already).

        A loop that loads in its own process (no workers) loads the next batch meanwhile; a window
        that synchronised the device first would keep it from that, as no real loop waits.
        """
        if self.held is not None or self.remaining == 0:
            return 0.0
        asked = self.clock()
        self.held = self._ask()
        self.held_s = self.clock() - asked
        return self.held_s

    def _ask(self) -> Any:
        assert self.iterator is not None
        ready = backlog.ready(self.iterator) if self.watch_backlog and not self.ran_dry else -1
        asked = self.clock()
        try:
            batch = next(self.iterator)
        except StopIteration:
            if not self.stream or self.position == 0:
                raise
            # The stream's pass ended before the pass its workload declares: this is its length, and a new pass
            # starts, as a training loop's next epoch would.
            self.steps_per_epoch, self.pass_samples = self.position, self._pass_taken
            self.restart()
            asked = self.clock()
            batch = next(self.iterator)
        self.last_wait = self.clock() - asked
        if self.stream:
            self._pass_taken += self.count(batch)
        if self.first_batch_s is None:
            self.first_batch_s = self.clock() - self._started
        # Where the backlog cannot be read (None), a batch that kept the loop waiting says it ran dry.
        self.ran_dry = self.ran_dry or ready == 0 or (ready is None and self.last_wait >= DRY_WAIT_S)
        return batch

    def restart(self) -> None:
        # Drop the old iterator first, as an epoch's end does: its workers shut down now.
        self.iterator, self.held = None, None
        self.iterator = iter(self.loader)
        self.position, self._pass_taken = 0, 0

    def ready(self) -> int | None:  # batches the workers have ready (None: it cannot be told)
        return backlog.ready(self.iterator)

    def end_epoch(self) -> bool:
        """Untimed, end this epoch as a real one ends, making nothing to throw away; True where it took batches."""
        left = backlog.end_epoch(self.iterator) if self.remaining and self.iterator is not None else 0
        if left is None:  # it cannot be ended early: at least let the workers finish what they were given
            backlog.settle(self.iterator)
        elif left:  # take them (an iterable data set's workers may end the epoch sooner)
            collections.deque(itertools.islice(self.iterator, min(left, self.remaining)), maxlen=0)
            self.position, self.held = self.steps_per_epoch, None
        return bool(left)

    @property
    def remaining(self) -> int:  # the batch held ahead, if any, included
        return self.steps_per_epoch - self.position
