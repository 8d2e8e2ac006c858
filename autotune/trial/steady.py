"""The steady windows of one measurement (``autotune.trial.timing``), and the epoch boundaries timed among them.

Each window's length is set by the one before it, to a target time and at least a
batch per worker; an epoch's last ``capacity`` batches (what its workers hold ready
once the sampler is spent) are timed apart as its tail, never as a steady window.
Windows go on until the earlier and the later half agree and the windows are enough
for their noise, or until a time limit leaves no room for the next; where an epoch
has no room for steady windows beside its tail, each window is whole epochs.
How long and how many windows to time is ``Windows``, which ``autotune.trial.timing`` takes too.
What a window counts is ``autotune.trial.window``'s; what the measurement states
from the windows, ``autotune.trial.timing``'s.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable
from typing import Any

from autotune.trial.cputime import CpuTimes
from autotune.trial.feed import Clock, Feed
from autotune.trial.window import Window, pooled, run_steps, timed, waive

PASS_END_MOST_S = 40.0  # the most a measurement reads of a stream's pass to time its end (`cross_the_pass_end`)
UNENDING = 2**62  # a pass length no stream reaches: read until it ends by itself


@dataclasses.dataclass(frozen=True)
class Windows:
    """How long and how many windows to time; measuring stops once the noise allows."""

    warmup_steps: int = 5
    window_s: float = 0.25  # target seconds of work in one window
    min_windows: int = 3
    max_windows: int = 10
    rel_tol: float = 0.03  # stop when the halves agree within this, and the mean's standard error is within it
    boundaries: int = 2  # epoch boundaries to time
    noisy: float = 0.05  # halves (or the standard error) still beyond this at max_windows: measured longer
    extra_windows: int = 5  # how many more; still noisy then, the measurement is marked unreliable
    # After the warm-up, take untimed only the batches the workers hold ready, not their whole capacity. Where
    # nothing but a copy takes the batches (a loader part, autotune.trial.parts), the queues hold what the warm-up
    # left and no more: taking workers x prefetch batches would cost that many at the loader's own rate, seconds
    # of a heavy model's part. A step slower than its loader fills them, and its measurement keeps the default.
    backlog_held: bool = False


class Steady:
    """The steady windows of one measurement, and the epoch boundaries timed among them."""

    def __init__(self, feed: Feed, step: Callable[..., Any], windows: Windows, clock: Clock,
                 sync: Callable[[], None], min_steps: int, capacity: int = 0, whole: bool = False,
                 cpu: Callable[[Any], CpuTimes] | None = None, deadline: float | None = None,
                 setup_s: float = 0.0) -> None:
        self.feed, self.step, self.config, self.clock, self.sync = feed, step, windows, clock, sync
        self.cpu, self.deadline = cpu, deadline
        self.setup_s = setup_s  # the first iterator's start and the warm-up: what a fresh epoch's start costs at most
        self.time_limited = False
        self.once_s = 0.0  # a stream's pass end: its short batches' one-off work, left out of it (`_once`)
        self.short_sizes: set[int] = set()  # the sizes of the short batches stepped so far
        self.min_steps = min_steps  # a window spans at least one batch per worker: their output is bursty
        self.boundaries: list[Window] = []
        self.tails: list[Window] = []
        # Once the sampler has handed out its last index, the workers make nothing more this epoch and the
        # loop drains what they hold: the last `capacity` batches are no steady window. Kept apart where
        # an epoch has room for steady windows besides them; where it has not (`whole`), each window is
        # whole epochs, each timed from its start, with nothing to correct.
        self.whole = whole
        self.tail = 0 if whole else capacity
        # Batches the backlog grew by, uncounted, in this epoch's windows, and not drained since (`window.waive`)
        self.allowance = 0
        # Calibrate the first window to the step's speed; each window then sets the next one's length. A whole
        # epoch, timed from its start, is a window as any other: counted, so that an epoch costs no more.
        first = feed.steps_per_epoch if whole else self._probe_steps()
        probe = timed(feed, step, first, clock, sync, restart=whole)
        self.windows = [probe] if whole else []
        self.length = self._steps_for(probe.step_s)

    def _probe_steps(self) -> int:
        """Steps of the probe that sizes the first window: a batch per worker where the epoch has room for it.

        Workers that start together deliver in waves, and the wait for the next wave falls in the next
        window (`Feed.hold`): a probe of 3 batches of one wave of 4 took no time, and the window sized on
        it asked for the rest of the epoch (docs/measuring.md, "How it measures", has the fake-clock loader
        that showed it). Where the epoch left has no room for the longer probe, a window of a batch
        per worker and the tail beside it, the probe stays at 3 steps: a probe that took that room would
        leave the first epoch none, or eat into its tail.
        """
        left = self.feed.remaining or self.feed.steps_per_epoch  # none left: the probe starts the next epoch
        return max(min(3, left), min(self.min_steps, left - self.tail - self.min_steps))

    def _steps_for(self, step_s: float) -> int:
        wanted = max(math.ceil(self.config.window_s / max(step_s, 1e-9)), self.min_steps)
        if self.whole:
            return math.ceil(wanted / self.feed.steps_per_epoch) * self.feed.steps_per_epoch
        return max(1, min(wanted, self.feed.steps_per_epoch - 1 - self.tail))

    def run(self, on_window: Callable[[int, float], bool] | None) -> bool:
        """Time windows until they agree, or the limit; True when `on_window` asked to stop."""
        limit = self.config.max_windows
        while len(self.windows) < limit:
            if self._out_of_time():
                self.time_limited = True
                return False
            window = self._next()
            if window is None:
                continue
            window, self.allowance = waive(window, self.allowance)
            self.windows.append(window)
            self.length = self._steps_for(window.step_s)
            if on_window is not None and on_window(len(self.windows) - 1, window.rate):
                return True
            if self._agree():
                return False
            if len(self.windows) == limit == self.config.max_windows and not self.trusted(self.config.noisy):
                limit += self.config.extra_windows  # noisy: measured longer before it is called unreliable
        return False

    def _out_of_time(self) -> bool:
        """Two windows at least, and what comes next, with the boundary still owed, would end past the deadline.

        A window is expected to take as long as the longest so far (windows are sized to a target time,
        but a loader that stalls makes one longer). An epoch's change costs more: its last `capacity`
        batches (its tail, or what `end_epoch` waits for) at the slowest batch seen, a fresh iterator's
        start (at most what the first one's and the warm-up cost) and a window. Fewer than two windows
        state no noise: then the measurement goes on, and the caller's own timeout is what ends it.
        """
        if self.deadline is None or len(self.windows) < 2:
            return False
        longest = max(w.seconds for w in self.windows)
        if self.whole:  # each window is whole epochs, its start included, and nothing is owed
            return self.clock() + longest > self.deadline
        change = self.tail * max(w.seconds / w.steps for w in self.windows) + self.setup_s + longest
        owed = not self.boundaries and self.config.boundaries > 0
        reserve = (longest + (change if owed else 0.0)) if self._room_for_window() else change
        return self.clock() + reserve > self.deadline

    def _agree(self) -> bool:
        return len(self.windows) >= self.config.min_windows and self.trusted(self.config.rel_tol)

    def trusted(self, tolerance: float) -> bool:
        """The halves agree within `tolerance`, and the windows are enough for their noise (`precise`)."""
        return self.settled(tolerance) and self.precise(tolerance)

    def precise(self, tolerance: float) -> bool:
        """The windows' relative standard deviation over the square root of their count is within `tolerance`.

        That is, the standard error of their mean, relative to it: their standard deviation, not the
        interquartile range the noise is stated as, which reads about 0.6 of a normal spread's deviation
        from three windows. Halves that agree say little of windows this noisy: three windows at ±10% once
        stopped a trial a quarter above a plain loop timed on either side of it (docs/measuring.md, "How it
        measures"). A loader-bound window is off by a batch or so either way, errors that cancel in the
        pooled rate: for those this errs toward measuring longer.
        """
        rates = [w.rate for w in self.windows]
        if len(rates) < 2:
            return False
        return statistics.stdev(rates) / statistics.fmean(rates) / math.sqrt(len(rates)) <= tolerance

    def settled(self, tolerance: float) -> bool:
        """The earlier and the later half of the windows, each pooled, agree within `tolerance`.

        A backlog still draining, or a loop still warming up, shows as a difference between the halves.
        """
        half = len(self.windows) // 2
        if half == 0:
            return False
        early, late = pooled(self.windows[:half]), pooled(self.windows[half:])
        return abs(late - early) / max(early, late) <= tolerance

    def _window_steps(self) -> int:
        """The next steady window's steps: its length, within what an epoch has beside its tail."""
        return min(self.length, self.feed.steps_per_epoch - self.tail)

    def _room_for_window(self) -> bool:
        """This epoch has the next steady window left before its tail."""
        return self.feed.remaining >= self._window_steps() + self.tail

    def _next(self) -> Window | None:
        """The next steady window; None when it was spent timing an epoch's tail or boundary instead."""
        if self.whole:
            return timed(self.feed, self.step, self.length, self.clock, self.sync, restart=True)
        n = self._window_steps()
        if self._room_for_window():
            return timed(self.feed, self.step, n, self.clock, self.sync, cpu=self.cpu)
        # A stream's pass end is read through as a loop meets it: timed while boundaries are owed, untimed after.
        if self.feed.stream and self._cross(timing=len(self.boundaries) < self.config.boundaries):
            self.allowance = 0  # a new pass's backlog: what the last one's windows did is not in it
            return None
        if self.tail and self.feed.remaining > 0:
            self.tails.append(timed(self.feed, self.step, self.feed.remaining, self.clock, self.sync))
            return None
        if len(self.boundaries) < self.config.boundaries:
            self.boundaries.append(timed(self.feed, self.step, n, self.clock, self.sync, restart=True))
            self.allowance = 0  # a new epoch's backlog: what the last one's windows did is not in it
            return None
        # Enough boundaries timed: start the new epoch outside the clock, and its first batch with it
        # (fresh workers start up for it) when the epoch is long enough for a window after it.
        self.allowance = 0
        self.feed.restart()
        if self.feed.steps_per_epoch > n:
            run_steps(self.feed, self.step, 1)
            self.feed.hold()  # as at a window's end: the next batch asked for, then the device left idle
            self.sync()
        if self._room_for_window():
            return None  # the next call times a steady window of this epoch
        return timed(self.feed, self.step, n, self.clock, self.sync, cpu=self.cpu)

    def cross_the_pass_end(self) -> None:
        """A stream's pass read to its own end and one batch into the next, timed as its boundary, where it fits.

        A stream's pass does not end as an epoch read by index does: each worker ends its own shards, those with more
        shards last, each with a partial last batch, and the loop waits for the slowest. With 15 workers over 64
        shards that cost 8.7 s a pass by hand, where the next pass's start alone took 0.9 s (docs/streams.md,
        "Measuring a stream"). So where the rest of the pass fits in PASS_END_MOST_S and the time left, it is read
        to the stream's own end (not to the declared count, which the partial batches outrun), then into the next
        pass; what that took beyond its steps at the steady rate is the pass's boundary. The first short batch of each
        size is stepped alone (`_once`): its one-off work is left out of the boundary, which a run pays each pass.
        """
        if not self.boundaries:
            self._cross()

    def _cross(self, timing: bool = True) -> bool:
        """The rest of a stream's pass read to its own end and one batch into the next, with `timing` timed as its
        boundary (see `cross_the_pass_end`); True where the pass ended.

        `_next` crosses so too where the windows reach a pass's last batches before they agree, untimed once the
        boundaries are timed. Ended instead by a restart at its declared count, its last `capacity` batches timed as
        a tail, a pass lost the batches its partial ones outran and its stragglers' waits: 64 shards over 15 workers
        read 3% fast against a loop over whole passes (docs/streams.md, "Measuring a stream"); and a tail beside a
        crossing counts the pass's end twice. A window may end at the declared count itself: the partial batches
        are still to come.
        """
        feed = self.feed
        if not feed.stream or self.whole or not self.windows:
            return False
        step_s = sum(w.seconds for w in self.windows) / sum(w.steps for w in self.windows)
        room = PASS_END_MOST_S if self.deadline is None else min(PASS_END_MOST_S, self.deadline - self.clock())
        if feed.remaining * step_s + self.setup_s > room:
            return False
        declared, most = feed.steps_per_epoch, feed.remaining + max(1, self.min_steps) + 1
        full = max(round(w.samples / w.steps) for w in self.windows)  # a steady window's batches are whole
        feed.steps_per_epoch = UNENDING  # asked on until the stream says its pass is over (`Feed._ask`)
        feed.reset_window()
        carried = feed.held_s if feed.held is not None else 0.0
        once_before = self.once_s  # an earlier crossing's one-offs are not this one's
        t0 = self.clock()
        steps = samples = 0
        while steps < most:
            before = feed.position
            batch, count = feed.take()
            new = count < full and count not in self.short_sizes  # a worker's last: a size not stepped before
            if new:
                self.short_sizes.add(count)
            if new and timing:
                self.once_s += self._once(batch, step_s)
            else:
                self.step(batch)
            samples, steps = samples + count, steps + 1
            if feed.position <= before:  # the pass ended: this step took the next pass's first batch
                self.sync()
                if timing:
                    self.boundaries.append(Window(self.clock() - t0 + carried - (self.once_s - once_before), steps,
                                                  samples, 0))
                return True
        # No end near the declared pass: the stream goes on (it repeats); the declared pass stays its pass.
        feed.steps_per_epoch = declared
        feed.position = min(feed.position, declared)
        return False

    def _once(self, batch: Any, usual_s: float) -> float:
        """Step a short batch of a new size alone, synchronised either side: what it took beyond `usual_s` (a whole
        batch's step, which a short one does not outlast) is a one-off, which a run pays once (cuDNN's benchmark of
        the shape's convolutions, a first kernel choice), not at each pass's end."""
        self.sync()
        start = self.clock()
        self.step(batch)
        self.sync()
        return max(0.0, self.clock() - start - usual_s)

    def force_a_boundary(self) -> None:
        """No epoch ended while we timed: time one, so start-up cost is never assumed away."""
        if not self.boundaries and self.config.boundaries > 0 and not self.whole:
            n = min(self.length, self.feed.steps_per_epoch)
            self.boundaries.append(timed(self.feed, self.step, n, self.clock, self.sync, restart=True))


def too_short(steps_per_epoch: int, capacity: int, min_steps: int) -> bool:
    """An epoch with no room for two steady windows beside the `capacity` batches its workers hold ready at its end.

    Its workers are handed much of it at its start, so no window inside it is steady, and
    a correction for the backlog counts the drain at its end against the loop's rate.
    """
    return capacity > 0 and steps_per_epoch < capacity + 2 * max(min_steps, 3)
