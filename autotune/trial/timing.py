"""Timing windows over the real loop, after its warm-up and after the backlog its loader prefetched.

The number is end-to-end training samples per second: loader, copy, forward,
backward, optimizer step. Warm-up (worker spin-up, cuDNN autotuning, graph
capture) is timed separately as a one-time cost. Then:

- the backlog is gone before any window is timed. During warm-up the loader's
  workers fill their queues (``autotune.trial.backlog``); the loop first takes
  that many batches untimed, then goes on while what they hold ready still
  shrinks (windows timed during the drain read high). Each window then counts
  what the workers made while it ran: the batches it took, less how far the
  backlog shrank (a loop draining one runs at its step's speed, not its loader's),
  plus how far it grew where the loop ran dry (a slower step behind refilling
  queues never does), and a drain of growth an earlier window of the epoch left
  uncounted is not counted either (``window.waive``). Where the
  backlog cannot be read, the loop runs on, untimed, until it waits for a batch;
- a window spans at least as many batches as there are workers (worker output is
  bursty: one slow batch, then N-1 fast ones) and never crosses an epoch (but in
  an epoch too short for steady windows, where each window is whole epochs);
- the device is synchronised at window edges only, after the loop has asked for the
  next window's first batch, as a loop asks for it while the device runs its step
  (a loop that loads in its own process loads it meanwhile);
- the trial's steady value is what all windows together made over all their time;
  its noise, the interquartile range of the windows' rates over their median.
  Measuring stops once the earlier and the later half of the windows agree and
  there are enough windows for their noise (their mean's standard error within
  the same tolerance: three windows at ±10% can agree by chance); a loop whose
  halves keep disagreeing, or whose windows stay too noisy for their count, is
  measured longer, then marked unreliable, not stated as exact;
- a measurement given a time limit stops with the windows it has (two at least)
  where the next would end past it, and says so (``time_limited``): a trial
  killed at its timeout tells the search nothing.

A fresh epoch's iterator start-up is measured at epoch boundaries and spread over
the epoch's steps, so persistent workers show their worth. An epoch too short for
steady windows beside its backlog is timed whole, each from its start. A boundary
timed before an epoch's end first ends that epoch as a real end does
(``backlog.end_epoch``) and, untimed, takes what the workers still make. No Optuna
here: a caller that wants to stop early answers ``on_window``.

This module is the measurement's outline: warm-up, the backlog skip, and the
numbers stated from the windows. The windows themselves (their lengths, when they
agree, the tails and boundaries timed among them, and ``Windows``, the settings that
``measure`` takes) are ``autotune.trial.steady``'s.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any

from torch.utils.data import IterableDataset

from autotune import batch as batches
from autotune.trial import backlog
from autotune.trial.cputime import CpuTimes
from autotune.trial.feed import DRY_WAIT_S, Clock, Counter, Feed
from autotune.trial.steady import Steady, Windows, too_short
from autotune.trial.window import cpu_ms, pooled, run_steps, spread


@dataclasses.dataclass(frozen=True)
class Measurement:
    samples_per_s: float  # end to end: steady steps plus each epoch's start-up, spread over the epoch
    steady_samples_per_s: float  # all steady windows pooled, epoch boundaries excluded (whole_epochs: included)
    spread: float  # interquartile range of the window rates over their median
    window_rates: tuple[float, ...]  # samples/s of each steady window
    step_s: float  # median seconds per step
    epoch_overhead_s: float  # extra seconds a fresh epoch costs (iterator and worker start-up)
    steps_per_epoch: int
    epoch_s: float  # seconds one epoch takes at this rate
    setup_s: float  # one-time cost: first iterator, warm-up steps, capture, autotuning
    stopped_early: bool  # on_window asked to stop
    backlog_steps: int = 0  # batches taken untimed after warm-up: what the workers had prefetched
    reliable: bool = True  # False: halves apart, or a standard error, beyond `Windows.noisy` even measured longer
    tokens_per_sample: float | None = None  # real tokens (the workload's tokens_in) per sample, over the windows
    padding: float | None = None  # the share of the batches' token positions that were padding
    whole_epochs: bool = False  # epochs too short for steady windows: each window was whole epochs, starts included
    # What the backlog grew by in windows where every batch was ready (`Window.made` does not count it) and no later
    # window drained (whose drain of it is not counted either), over what the windows made: a step-bound loop's
    # refilling queues, or a loader's last burst
    uncredited_share: float = 0.0
    # CPU per sample over the steady windows (with `measure(cpu=...)`): the loop's process, all its threads, per
    # sample it took; its DataLoader workers per sample they made (None without workers, or where they cannot be
    # read). A host whose cost of a sample moved between two processes shows here, beside what the rate did.
    # None for whole-epoch windows: at each restart workers exit, and their time goes with them. CPU time, not
    # only work: intra-op threads spinning at a barrier, or a wait on the device that spins, count too.
    main_cpu_ms: float | None = None
    workers_cpu_ms: float | None = None
    # Its time limit ended it before its windows agreed (or before the noise it states was measured longer): what
    # it states is what those windows showed, `reliable` as they allow
    time_limited: bool = False
    # A stream's time to its first batch (shards opened, a shuffle buffer filled), apart from the steady rate; it is
    # in `setup_s`, and a new pass pays it again in `epoch_overhead_s`
    first_batch_s: float | None = None
    # A stream's pass end, crossed once: the one-off work of its short batches' new shapes, left out of
    # `epoch_overhead_s` (a run pays it once, in its first pass)
    short_batches_once_s: float | None = None

    @property
    def tokens_per_s(self) -> float | None:
        return None if self.tokens_per_sample is None else self.samples_per_s * self.tokens_per_sample

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _skip_backlog(feed: Feed, step: Callable[..., Any], capacity: int, workers: int, held_only: bool = False) -> int:
    """Take, untimed, the batches the workers prefetched while the loop warmed up; how many were taken.

    Then go on, two batches per worker at a time (one burst of their output is no sign of the
    drain's end), while what is held ready still shrinks: a loop that drains its backlog is not
    yet the loop that waits for its workers, and windows timed while it drains read high even
    corrected for the drain (the runs are in docs/measuring.md). Queues still about full
    mean a step slower than its loader: nothing drains. Where the backlog cannot be read (so no
    window can correct for what remains of it), go on until a batch keeps the loop waiting.
    Either way at most twice the capacity more, and where that ends among the epoch's last
    `capacity` batches, the rest of the epoch too: it was all handed out during the warm-up, so
    it is still the backlog, not the tail of a steady epoch (timed as one, its drain would stand
    for every epoch's). `held_only` (``Windows.backlog_held``): first take what is held ready, where
    that can be read, not the whole capacity.
    """
    if capacity == 0:
        return 0
    first = capacity
    if held_only and (ready := feed.ready()) is not None:
        first = min(capacity, ready)
    run_steps(feed, step, first)
    taken, limit, chunk = first, 3 * capacity, 2 * max(workers, 3)
    held = feed.ready()
    if held is None:
        while taken < limit and feed.last_wait < DRY_WAIT_S:
            run_steps(feed, step, 1)
            taken += 1
    elif held < capacity - workers:
        # Not at the epoch's last `capacity` batches: those drain as the workers run out of work.
        while held > 0 and taken < limit and feed.remaining > capacity + chunk:
            n = min(chunk, limit - taken)
            run_steps(feed, step, n)
            taken += n
            now = feed.ready()
            if now is None or now >= held:
                break
            held = now
    if 0 < feed.remaining <= capacity:
        taken += feed.remaining
        run_steps(feed, step, feed.remaining)
    return taken


def measure(
    step: Callable[..., Any],
    loader: Any,
    windows: Windows = Windows(),
    *,
    clock: Clock = time.perf_counter,
    sync: Callable[[], None] = lambda: None,
    on_window: Callable[[int, float], bool] | None = None,
    count: Counter = batches.samples_in,
    tokens: Counter | None = None,
    cpu: Callable[[Any], CpuTimes] | None = None,
    time_limit_s: float | None = None,
    pass_samples: int | None = None,
) -> Measurement:
    """Time `step` over batches from `loader`; see the module docstring for what counts.

    ``on_window(i, samples_per_s)`` is called after each steady window; returning
    True stops measuring (a pruned trial). ``count(batch)`` gives a batch's samples;
    with ``tokens(batch)`` (real tokens: an int, or a tensor read only at window
    edges) the measurement states tokens per sample and the share of padding. With
    ``cpu`` (``autotune.trial.window.loop_cpu``) it states the CPU each sample cost, read at the steady windows'
    edges. With ``time_limit_s`` (seconds from its start, on `clock`) it stops timing windows once it has two
    and the next, with the epoch boundary still owed, would end past the limit. On a GPU:
    ``measure(step, loader, sync=torch.cuda.synchronize)``.
    """
    start = clock()
    capacity = backlog.capacity(loader)
    steps = stream_steps(loader, pass_samples) if is_stream(loader) else None
    feed = Feed(loader, clock, count, tokens, watch_backlog=capacity > 0, steps=steps)
    if feed.steps_per_epoch < 1:
        raise ValueError(f"the loader yields no batch: `len(loader) >= 1` must hold, but got {feed.steps_per_epoch}.")
    run_steps(feed, step, windows.warmup_steps)
    sync()
    setup_s = clock() - start
    min_steps = max(1, getattr(loader, "num_workers", 0) or 0)
    whole = too_short(feed.steps_per_epoch, capacity, min_steps)
    skipped = 0 if whole else _skip_backlog(feed, step, capacity, min_steps, windows.backlog_held)
    deadline = None if time_limit_s is None else start + time_limit_s
    steady = Steady(feed, step, windows, clock, sync, min_steps, capacity, whole, cpu, deadline, setup_s)
    stopped = steady.run(on_window)
    if not stopped:
        steady.cross_the_pass_end()
        steady.force_a_boundary()
    step_s = sum(w.seconds for w in steady.windows) / sum(w.made / w.per_batch for w in steady.windows)
    overheads = [max(0.0, w.seconds - w.steps * step_s) for w in steady.boundaries]
    epoch_overhead = statistics.median(overheads) if overheads else 0.0
    # An epoch's last `tail` batches come from the backlog, with no more to make: the loop takes them
    # at the speed of its step (timed where an epoch ended while we measured), and the next epoch's
    # start pays for refilling it (in the boundary's overhead).
    tail = steady.tail if steady.tails else 0
    tail_step_s = statistics.median(w.seconds / w.steps for w in steady.tails) if steady.tails else step_s
    epoch_s = (feed.steps_per_epoch - tail) * step_s + tail * tail_step_s + epoch_overhead
    rates = [w.rate for w in steady.windows]
    tokens_per_sample, padding = _tokens(steady.windows) if tokens is not None else (None, None)
    return Measurement(
        samples_per_s=_pass_samples(feed) / epoch_s,
        steady_samples_per_s=pooled(steady.windows),
        spread=spread(rates),
        window_rates=tuple(rates),
        step_s=step_s,
        epoch_overhead_s=epoch_overhead,
        steps_per_epoch=feed.steps_per_epoch,
        epoch_s=epoch_s,
        setup_s=setup_s,
        stopped_early=stopped,
        backlog_steps=skipped,
        # Cut by its time limit, it may have fewer windows than any stop allows: those are not called reliable.
        reliable=stopped or (steady.trusted(windows.noisy) and len(steady.windows) >= windows.min_windows),
        tokens_per_sample=tokens_per_sample,
        padding=padding,
        whole_epochs=whole,
        uncredited_share=sum(w.uncredited - w.waived * w.per_batch for w in steady.windows)
        / sum(w.made for w in steady.windows),
        main_cpu_ms=cpu_ms([(w.main_cpu_s, w.samples) for w in steady.windows]),
        workers_cpu_ms=cpu_ms([(w.workers_cpu_s, w.produced) for w in steady.windows]),
        time_limited=steady.time_limited,
        first_batch_s=feed.first_batch_s if feed.stream else None,
        short_batches_once_s=steady.once_s if feed.stream else None,
    )


def _tokens(windows: list[Any]) -> tuple[float, float | None]:
    """Real tokens per sample over the steady windows, and the share of their token positions that was padding."""
    taken = sum(w.tokens for w in windows)
    slots = sum(w.slots for w in windows)
    return taken / sum(w.samples for w in windows), (max(0.0, 1 - taken / slots) if slots else None)


def _pass_samples(feed: Feed) -> int:
    """The samples of one epoch: a stream's pass as it ended, else as declared in whole batches; else the data
    set's."""
    if not feed.stream:
        return _epoch_samples(feed.loader)
    return feed.pass_samples or feed.steps_per_epoch * (feed.loader.batch_size or 1)


def _epoch_samples(loader: Any) -> int:
    n = len(loader.dataset)
    if getattr(loader, "drop_last", False):
        return (n // loader.batch_size) * loader.batch_size
    return n


UNBOUNDED_PASS = 10**9  # the samples of a stream's pass when it declares none: no epoch boundary is ever reached


def is_stream(loader: Any) -> bool:
    """Whether `loader` reads a stream (an IterableDataset): its pass is declared, not counted by an index."""
    return isinstance(getattr(loader, "dataset", None), IterableDataset)


def stream_steps(loader: Any, pass_samples: int | None) -> int:
    """The batches of one pass of a stream: `pass_samples` (the workload's samples_per_epoch, or the stream's own
    len()) in batches of the loader's size; without one, a pass never ends (``UNBOUNDED_PASS``)."""
    samples = pass_samples or UNBOUNDED_PASS
    size = loader.batch_size or 1
    return max(1, samples // size if getattr(loader, "drop_last", False) else -(-samples // size))
