"""One timed window of a measurement (``autotune.trial.timing``): its steps, what it made, what it cost.

A window is a run of steps timed from synchronised device to synchronised device, with
the backlog its loader held read at both ends (``autotune.trial.backlog``): what it
made is what the loop took less what came out of that backlog. Here too: the rate of
several windows pooled, the noise figure of their rates, and the CPU time a window's
loop and its workers spent (``loop_cpu``).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

from autotune.trial import backlog
from autotune.trial.cputime import CpuTimes, processes_cpu_s
from autotune.trial.feed import Clock, Feed


def spread(rates: Iterable[float]) -> float:
    """Interquartile range over median: a noise figure that one outlier does not move."""
    values = sorted(rates)
    if len(values) < 2:
        return 0.0
    q = statistics.quantiles(values, n=4, method="inclusive")
    return (q[2] - q[0]) / statistics.median(values)


@dataclasses.dataclass(frozen=True)
class Window:
    """One timed window: its time, its steps, and what the loader's backlog did meanwhile (``Windows``, plural,
    says how long and how many)."""

    seconds: float
    steps: int
    samples: int
    drained: int  # how far the backlog shrank over the window, in batches (negative: it grew)
    ran_dry: bool = True  # the loop asked for a batch that was not ready yet, at least once in the window
    tokens: float = 0.0  # real tokens in the window's batches (with a tokens counter)
    slots: int = 0  # token positions in the window's batches, padding included
    main_cpu_s: float | None = None  # CPU seconds of the loop's process over the window (with a cpu reader)
    workers_cpu_s: float | None = None  # and of its workers
    waived: int = 0  # batches of its drain not counted against it: growth an earlier window left uncounted (`waive`)

    @property
    def per_batch(self) -> float:
        return self.samples / self.steps

    @property
    def made(self) -> float:
        """Samples the loop took, less what came out of the backlog (or plus what went into it).

        Signed, not cut at zero: worker output is bursty, so the backlog shrinks in one
        window and grows in the next, and cutting only the one side would bias the sum.
        But where every batch the loop asked for was ready (queues refilling behind a
        slower step), a growing backlog is not its speed: it made what it took. And a
        drain of such growth is not counted against a later window either (`waive`).
        """
        if self.drained < 0 and not self.ran_dry:
            return self.samples
        return max(self.samples - (self.drained - self.waived) * self.per_batch, self.per_batch)

    @property
    def uncredited(self) -> float:
        """Samples the backlog grew by that `made` leaves out (every batch was ready: a slower step's refill)."""
        return -self.drained * self.per_batch if self.drained < 0 and not self.ran_dry else 0.0

    @property
    def produced(self) -> float:
        """What the workers made over the window, credited or not: all that their CPU time paid for."""
        return max(self.samples - self.drained * self.per_batch, self.per_batch)

    @property
    def rate(self) -> float:
        return self.made / self.seconds

    @property
    def step_s(self) -> float:
        return self.seconds * self.samples / self.made / self.steps


def waive(window: Window, allowance: int) -> tuple[Window, int]:
    """`window` with as much of its drain waived as `allowance` covers; the allowance after it.

    The allowance, in batches, is what the backlog grew by in the epoch's earlier windows where every
    batch was ready, and no window has drained since. That growth was not counted (a step slower than
    its loader refilling its queues is no faster for it), so its drain must not be counted either.
    Counted on one side only, a loop whose backlog swings, bursty, around a level read slower than it
    ran: a quarter slower where it swings by a batch every two steps (the test). Real loaders leave a few
    percent of their windows' samples out as such growth (docs/measuring.md, "How it measures"). Only
    drains of growth are waived: net, where an epoch's windows drained the backlog below where they began,
    that much is still counted (in the first epoch, what is left of the warm-up's prefetch: the backlog
    every window is corrected for).
    """
    if window.drained > 0:
        waived = min(window.drained, allowance)
        return dataclasses.replace(window, waived=waived), allowance - waived
    if window.drained < 0 and not window.ran_dry:
        return window, allowance - window.drained
    return window, allowance


def run_steps(feed: Feed, step: Callable[..., Any], n: int) -> int:
    """`n` steps; the samples they took."""
    samples = 0
    for _ in range(n):
        batch, count = feed.take()
        samples += count
        step(batch)
    return samples


def timed(feed: Feed, step: Callable[..., Any], n: int, clock: Clock, sync: Callable[[], None],
           restart: bool = False, cpu: Callable[[Any], CpuTimes] | None = None) -> Window:
    """One window of `n` steps, timed from synchronised device to synchronised device.

    With `cpu` (given the loader's iterator), the CPU time used between the two readings of the backlog that
    `made` counts by. Read outside the clock, and cheap (`loop_cpu`): the workers go on making batches while it
    is read, and a window would get what they make meanwhile for free. Not across an epoch's restart, where
    workers exit and their time goes with them.
    """
    cpu0 = cpu(feed.iterator) if cpu is not None and not restart else None
    before = None if restart else feed.ready()
    if restart and feed.end_epoch():  # untimed: an epoch's real end, then the device idle as at any window's start
        sync()
    feed.reset_window()
    t0 = clock()
    if restart:
        feed.restart()
    # A batch asked for ahead is the window's that steps it: asking for it counts there, not where it was asked for.
    carried = feed.held_s if feed.held is not None else 0.0
    samples = run_steps(feed, step, n)
    ahead = feed.hold()  # the next window's first batch, asked for while the device runs this one's last step
    sync()
    seconds = max(clock() - t0 - ahead + carried, 1e-12)
    after = feed.ready()
    drained = before - after if before is not None and after is not None else 0
    main_s = workers_s = None
    if cpu0 is not None and cpu is not None:
        cpu1 = cpu(feed.iterator)
        main_s = cpu1.main_s - cpu0.main_s
        if cpu0.children_s is not None and cpu1.children_s is not None:
            # Summed over the threads alive at each read: one that exited in between took its time with it.
            workers_s = cpu1.children_s - cpu0.children_s if cpu1.children_s >= cpu0.children_s else None
    return Window(seconds, n, samples, drained, feed.ran_dry, float(feed.token_sum), feed.slot_sum,  # after the sync
                   main_s, workers_s)


def loop_cpu(iterator: Any) -> CpuTimes:
    """CPU seconds so far of this process (all its threads) and of the DataLoader workers under `iterator`."""
    pids = backlog.worker_pids(iterator)
    return CpuTimes(time.process_time(), None if pids is None else processes_cpu_s(pids))


def cpu_ms(used: list[tuple[float | None, float]]) -> float | None:
    """CPU milliseconds a sample, over the windows that read it: (CPU seconds, samples) each."""
    read = [(s, n) for s, n in used if s is not None]
    return 1e3 * sum(s for s, _ in read) / sum(n for _, n in read) if read else None


def pooled(windows: list[Window]) -> float:
    """The rate over several windows together: all they made over all their time.

    Not the median of the windows' rates: a loader-bound window's count is off by a batch or
    so either way (worker output is bursty); summed, those errors cancel.
    """
    return sum(w.made for w in windows) / sum(w.seconds for w in windows)
