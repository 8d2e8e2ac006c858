"""Measurement windows on a fake clock: exact step time, epoch start-up spread over the epoch, early stop."""

from __future__ import annotations

import itertools
import math
import queue
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from autotune.config import Config
from autotune.trial.cputime import CpuTimes
from autotune.trial.runner import Runner
from autotune.trial.timing import Windows, measure, spread
from autotune.trial.window import Window, cpu_ms, waive
from autotune.workloads import load, resolve

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeLoader:
    """`steps` batches of `batch` samples; starting an epoch costs `startup_s` of fake time, each batch `load_s`
    (made in the loop's own process, as with no workers); `num_workers` x `prefetch_factor` only as a
    DataLoader states them (its backlog cannot be read)."""

    def __init__(self, clock: Clock, steps: int, batch: int, startup_s: float, load_s: float = 0.0,
                 num_workers: int = 0, prefetch_factor: int = 2) -> None:
        self.clock, self.steps, self.batch_size, self.startup_s = clock, steps, batch, startup_s
        self.load_s, self.num_workers, self.prefetch_factor = load_s, num_workers, prefetch_factor
        self.dataset = range(steps * batch)
        self.drop_last = False
        self.epochs = 0

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        self.clock.now += self.startup_s
        self.epochs += 1
        for _ in range(self.steps):
            self.clock.now += self.load_s
            yield torch.zeros(self.batch_size, 1), torch.zeros(self.batch_size)


def _step(clock: Clock, seconds: float):
    def step(batch: Any) -> None:
        clock.now += seconds

    return step


def test_windows_time_steps_and_spread_epoch_startup_over_the_epoch() -> None:
    clock = Clock()
    loader = FakeLoader(clock, steps=100, batch=32, startup_s=0.5)
    m = measure(
        _step(clock, 0.01),
        loader,
        Windows(warmup_steps=2, window_s=0.05, min_windows=3, max_windows=10, rel_tol=0.0),
        clock=clock,
    )
    assert m.step_s == pytest.approx(0.01)
    assert m.steady_samples_per_s == pytest.approx(3200.0)
    assert m.window_rates == pytest.approx((3200.0,) * 3)  # identical windows: stop at min_windows
    assert m.epoch_overhead_s == pytest.approx(0.5)
    assert m.epoch_s == pytest.approx(100 * 0.01 + 0.5)
    assert m.samples_per_s == pytest.approx(3200 / 1.5)
    assert m.setup_s == pytest.approx(0.5 + 2 * 0.01)  # first iterator and warm-up, outside the windows
    assert (m.spread, m.stopped_early, m.steps_per_epoch) == (0.0, False, 100)


@pytest.mark.parametrize(("steps", "startup_s"), [(100, 0.5), (20, 0.0)])
def test_a_batch_asked_for_ahead_counts_in_the_window_that_steps_it_at_every_epoch_edge(steps: int,
                                                                                        startup_s: float) -> None:
    """Each window asks for the next window's first batch before the device is synchronised (10 ms here, in the
    loop's own process). Counted where it was asked for, a boundary window that threw the held batch away and
    asked for one more stated its epoch start 10 ms dearer (0.51 s), and a window that ended the epoch, with
    nothing left to ask for, read 1,778/s among windows at 1,600/s. Counted where it is stepped, all is exact.
    """
    clock = Clock()
    loader = FakeLoader(clock, steps=steps, batch=32, startup_s=startup_s, load_s=0.01)
    m = measure(_step(clock, 0.01), loader, Windows(warmup_steps=2, window_s=0.1, min_windows=3, max_windows=8,
                                                    rel_tol=0.0, noisy=1.0, boundaries=2), clock=clock)
    assert m.window_rates == pytest.approx((1600.0,) * len(m.window_rates))
    assert (m.step_s, m.epoch_overhead_s) == (pytest.approx(0.02), pytest.approx(startup_s))
    assert m.samples_per_s == pytest.approx(32 * steps / (steps * 0.02 + startup_s))


@pytest.mark.parametrize(("steps", "whole"), [(31, True), (32, False)])
def test_an_epoch_is_timed_whole_only_without_room_for_two_windows_beside_its_last_backlog(steps: int,
                                                                                          whole: bool) -> None:
    """8 workers x prefetch 2 hold 16 batches; two windows of at least 8 batches fit beside them in 32 batches.

    In 31 batches they do not: each window is then whole epochs from their starts, the first of them counted
    too (an epoch costs what it costs a window), so that three windows take three epochs after the first.
    """
    clock = Clock()
    loader = FakeLoader(clock, steps=steps, batch=32, startup_s=0.5, num_workers=8, prefetch_factor=2)
    m = measure(_step(clock, 0.01), loader, Windows(warmup_steps=2, window_s=0.05, min_windows=3, rel_tol=1e-9,
                                                    boundaries=0 if not whole else 2), clock=clock)
    assert (m.whole_epochs, len(m.window_rates)) == (whole, 3)
    if not whole:  # the backlog skipped first (here until a batch kept the loop waiting: the next epoch's start)
        assert m.backlog_steps >= 16
    else:  # the warm-up's epoch, then three windows of one epoch each: its steps and its start
        assert loader.epochs == 4
        assert m.window_rates == pytest.approx((32 * steps / (steps * 0.01 + 0.5),) * 3)
        assert (m.backlog_steps, m.epoch_overhead_s) == (0, 0.0)
        assert m.samples_per_s == pytest.approx(32 * steps / (steps * 0.01 + 0.5))


def test_without_startup_cost_end_to_end_equals_steady() -> None:
    clock = Clock()
    loader = FakeLoader(clock, steps=20, batch=8, startup_s=0.0)
    m = measure(_step(clock, 0.002), loader, Windows(warmup_steps=1, window_s=0.01, min_windows=3), clock=clock)
    assert m.samples_per_s == pytest.approx(m.steady_samples_per_s) == pytest.approx(4000.0)
    assert loader.epochs >= 2  # an epoch boundary was crossed and timed


def test_on_window_can_stop_measuring_early() -> None:
    clock = Clock()
    seen: list[tuple[int, float]] = []

    def on_window(i: int, rate: float) -> bool:
        seen.append((i, rate))
        return i == 1

    m = measure(
        _step(clock, 0.01),
        FakeLoader(clock, 50, 10, 0.1),
        Windows(warmup_steps=0, window_s=0.03, min_windows=5),
        clock=clock,
        on_window=on_window,
    )
    assert m.stopped_early is True
    assert [i for i, _ in seen] == [0, 1]
    assert len(m.window_rates) == 2


def test_sync_is_called_at_window_edges_only() -> None:
    clock = Clock()
    calls = {"sync": 0, "step": 0}

    def step(batch: Any) -> None:
        calls["step"] += 1
        clock.now += 0.01

    def sync() -> None:
        calls["sync"] += 1

    measure(
        step,
        FakeLoader(clock, 40, 4, 0.0),
        Windows(warmup_steps=3, window_s=0.05, min_windows=3, max_windows=3, boundaries=1),
        clock=clock,
        sync=sync,
    )
    # warm-up, probe, 3 windows and 1 boundary window: one sync each, never per step.
    assert calls["sync"] == 6
    assert calls["step"] > 20


def _cycling_step(clock: Clock, rates: list[float], batch: int):
    """A step whose windows of one step each run at `rates`, in turn, over and over."""
    durations = itertools.cycle([batch / r for r in rates])

    def step(_: Any) -> None:
        clock.now += next(durations)

    return step


@pytest.mark.parametrize(("rates", "count", "reliable"), [
    ([1000.0, 1000.0, 1000.0], 3, True),  # quiet: the halves agree at once
    # ±10%: halves 1% apart at three windows, but the mean's standard error 5.8% (10% / sqrt(3)); 3.0% at eight
    ([1000.0, 900.0, 1100.0], 8, True),
    # ±30%: a standard error of 6.7% at fifteen windows, above the 5% allowed
    ([1000.0, 700.0, 1300.0], 15, False),
])
def test_windows_too_noisy_for_their_count_are_measured_longer_however_well_their_halves_agree(
        rates: list[float], count: int, reliable: bool) -> None:
    """Three windows at 1,000, 900 and 1,100/s have halves 1% apart: the rule of halves alone stopped there."""
    clock = Clock()
    m = measure(_cycling_step(clock, rates, 32), FakeLoader(clock, 1000, 32, 0.0),
                Windows(warmup_steps=0, window_s=1e-6, boundaries=0), clock=clock)
    assert (len(m.window_rates), m.reliable) == (count, reliable)
    assert m.window_rates[:3] == pytest.approx(rates)


@pytest.mark.parametrize(("limit_s", "boundaries", "count"), [
    (None, 0, 15),  # no limit: measured longer, then marked unreliable
    # Three warm-up steps (0.102 s), then windows of 0.032, 0.046 and 0.025 s in turn: 0.441 s after ten, and the
    # eleventh ends at 0.487 s; a twelfth, as long as the longest, would end at 0.533 s, past the limit
    (0.5, 0, 11),
    # An epoch boundary still owed counts as one more window: 0.409 + 2 x 0.046 = 0.501 s after nine
    (0.5, 1, 9),
    (0.0, 0, 2),  # two windows at least, however late: one states no noise
])
def test_a_time_limit_ends_the_windows_with_what_they_showed(limit_s: float | None, boundaries: int,
                                                             count: int) -> None:
    """Windows at ±30% never agree: without a limit they run to fifteen; with one, they stop where the next would
    end past it, and the measurement says so."""
    clock = Clock()
    m = measure(_cycling_step(clock, [1000.0, 700.0, 1300.0], 32), FakeLoader(clock, 1000, 32, 0.0),
                Windows(warmup_steps=0, window_s=1e-6, boundaries=boundaries), clock=clock, time_limit_s=limit_s)
    assert (len(m.window_rates), m.time_limited, m.reliable) == (count, limit_s is not None, False)
    if limit_s is not None and boundaries:
        assert clock.now <= limit_s  # the boundary it owed was timed within the limit
    # Two quiet windows state a noise of zero, but fewer windows than any stop allows: not reliable.
    quiet = measure(_cycling_step(clock, [1000.0], 32), FakeLoader(clock, 1000, 32, 0.0),
                    Windows(warmup_steps=0, window_s=1e-6, boundaries=0), clock=clock, time_limit_s=0.0)
    assert (len(quiet.window_rates), quiet.time_limited, quiet.reliable) == (2, True, False)


@pytest.mark.parametrize(("limit_s", "count", "limited"), [(11.0, 2, True), (12.0, 15, False)])
def test_a_time_limit_leaves_room_for_the_epoch_start_still_owed(limit_s: float, count: int, limited: bool) -> None:
    """A fresh epoch's start costs 5 s here, as the first one did in the warm-up. The windows (0.03-0.05 s each) stop
    where the start they still owe would not fit: then it ends within the limit, not a window's length past it."""
    clock = Clock()
    m = measure(_cycling_step(clock, [1000.0, 700.0, 1300.0], 32), FakeLoader(clock, 1000, 32, 5.0, num_workers=2),
                Windows(warmup_steps=1, window_s=1e-6, boundaries=1), clock=clock, time_limit_s=limit_s)
    assert (len(m.window_rates), m.time_limited) == (count, limited)
    assert m.epoch_overhead_s == pytest.approx(5.0, abs=0.05)  # the start it owed was timed
    assert clock.now <= limit_s


def test_the_cpu_a_sample_cost_is_read_at_the_steady_windows_edges_only() -> None:
    """Each step here costs the loop's process 2 ms of CPU and its workers 4 ms, a batch of 32: 0.0625 and 0.125 ms
    a sample. An epoch's start (0.5 s of wall time, 1 s of the workers' CPU, as new workers start up) is not
    read: a boundary window is no steady one, and a restart's exited workers may take their time with them."""
    clock, used = Clock(), {"main": 0.0, "workers": 0.0}

    class Starting(FakeLoader):
        def __iter__(self):
            used["workers"] += 1.0
            return super().__iter__()

    def step(batch: Any) -> None:
        clock.now += 0.01
        used["main"] += 0.002
        used["workers"] += 0.004

    m = measure(step, Starting(clock, 40, 32, 0.5), Windows(warmup_steps=2, window_s=0.05, rel_tol=0.0),
                clock=clock, cpu=lambda _: CpuTimes(used["main"], used["workers"]))
    assert m.epoch_overhead_s == pytest.approx(0.5)  # a boundary was timed, its start-up with it
    assert (m.main_cpu_ms, m.workers_cpu_ms) == (pytest.approx(0.0625), pytest.approx(0.125))
    unread = measure(step, Starting(clock, 40, 32, 0.5), Windows(warmup_steps=2, window_s=0.05), clock=clock,
                     cpu=lambda _: CpuTimes(used["main"], None))  # no /proc: the workers' time is unknown
    assert (unread.main_cpu_ms, unread.workers_cpu_ms) == (pytest.approx(0.0625), None)
    assert measure(step, FakeLoader(clock, 40, 32, 0.0), Windows(warmup_steps=2), clock=clock).main_cpu_ms is None
    # An epoch too short for steady windows beside 8 workers' 16 batches: every window restarts it, none is read.
    whole = measure(step, Starting(clock, 31, 32, 0.5, num_workers=8), Windows(warmup_steps=2, window_s=0.05),
                    clock=clock, cpu=lambda _: CpuTimes(used["main"], used["workers"]))
    assert whole.whole_epochs and (whole.main_cpu_ms, whole.workers_cpu_ms) == (None, None)


def test_the_workers_cpu_is_per_sample_they_made_whether_a_window_credited_it_or_not() -> None:
    """Every batch was ready and the backlog grew by 2 batches of 16: the window credits the 64 samples the loop
    took, but the workers' 96 ms of CPU made 96 samples."""
    grew = Window(1.0, 4, 64, drained=-2, ran_dry=False, workers_cpu_s=0.096)
    assert (grew.made, grew.uncredited, grew.produced) == (64, 32.0, 96.0)
    assert cpu_ms([(grew.workers_cpu_s, grew.produced), (None, 64.0)]) == pytest.approx(1.0)


@pytest.mark.filterwarnings("ignore:This DataLoader will create 2 worker processes:UserWarning")
def test_a_trial_states_the_cpu_its_workers_spent_a_sample() -> None:
    """Real workers, their own entries in /proc read: each sample of `heavy_reads` keeps a core busy for 2 ms."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one intra-op thread, as the suite's workers run: two spin at barriers, which counts
    try:
        runner = Runner(load(resolve(str(FIXTURES / "heavy_reads.py"))), torch.device("cpu"))
        result = runner.run(Config(batch_size=16, num_workers=2), 0.05, Windows(window_s=0.2))
    finally:
        torch.set_num_threads(threads)
    # 2 ms of busy loop, and the batch's collation and hand-over besides: 2.02-2.18 ms in twelve runs on two cores,
    # two at a time. A window's edges cut through batches in the making (32 ms of one worker each, about a dozen a
    # window), so a reading may credit a batch whose CPU it did not see: 1.90 ms was read once with 0.1 s windows.
    assert 1.8 <= result["workers_cpu_ms"] <= 3.0, result["workers_cpu_ms"]
    assert 0 < result["main_cpu_ms"] < 1.0, result["main_cpu_ms"]  # 0.08-0.12 ms in twelve runs


def test_a_drain_of_growth_left_uncounted_is_not_counted_either() -> None:
    """8 batches of 32 in each window; the allowance is in batches."""
    drained = Window(1.0, 8, 256, drained=3, ran_dry=True)
    assert drained.made == 160  # with no allowance: 3 batches came from the backlog
    part, left = waive(drained, 2)  # 2 batches of growth were left uncounted before
    assert (part.waived, part.made, part.produced, left) == (2, 224, 160, 0)
    assert (waive(drained, 5)[0].made, waive(drained, 5)[1]) == (256, 2)
    # Growth while every batch was ready is not counted, and adds to the allowance.
    grew = Window(1.0, 8, 256, drained=-2, ran_dry=False)
    assert (waive(grew, 1)[0].made, waive(grew, 1)[1]) == (256, 3)
    # Growth where the loop ran dry is counted where it happens: its drain is counted too.
    dry = Window(1.0, 8, 256, drained=-2, ran_dry=True)
    assert (waive(dry, 1)[0].made, waive(dry, 1)[1]) == (320, 1)


class _Queue:
    def __init__(self, ready: Any) -> None:
        self.qsize = ready


class _Swinging:
    """A DataLoader as the backlog reads it (`autotune.trial.backlog`), 2 workers x prefetch 2, its loop 10 ms a
    step, its backlog swinging between 2 and 3 batches ready with every two steps: its workers make what the loop
    takes, bursty. Its rate is 3,200/s."""

    num_workers, prefetch_factor, batch_size, drop_last = 2, 2, 32, False

    def __init__(self, steps: int = 200) -> None:
        self.steps, self.dataset = steps, range(steps * 32)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        loader = self

        class Iterator:
            _pin_memory, _task_info, position = False, {}, 0

            def __init__(self) -> None:
                self._data_queue = _Queue(lambda: 2 + (self.position // 2) % 2)

            def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
                if self.position == loader.steps:
                    raise StopIteration
                self.position += 1
                return torch.zeros(32, 1), torch.zeros(32)

        return Iterator()


def test_a_backlog_that_swings_is_counted_alike_growing_and_draining() -> None:
    """Its growth is not counted where every batch was ready, so the drain of it is not either: the loop's 3,200/s in
    every window but the first, which drained the backlog below where the warm-up left it, and is corrected for
    that batch. Counted against every window that drains it, it read 1,600/s in every other window (2,347/s
    pooled), a quarter slower than it ran."""
    clock = Clock()
    m = measure(_step(clock, 0.01), _Swinging(), Windows(warmup_steps=2, window_s=0.015, rel_tol=-1.0, boundaries=0),
                clock=clock)
    assert m.window_rates == pytest.approx([1600.0] + [3200.0] * 14)  # the first one's rate is noise: 15 windows
    assert m.steady_samples_per_s == pytest.approx(928 / 0.3)  # 14 windows of 64 samples and one of 32, 0.3 s
    assert m.uncredited_share == 0.0  # every growth was drained later: none is left out


class _Waves:
    """A DataLoader as the backlog reads it (`autotune.trial.backlog`): 4 workers in step, each making a batch of 32
    in 1 s of the fake clock, so batches come in waves of 4 a second, 8 held ready at most. Its rate is 128/s."""

    num_workers, prefetch_factor, batch_size, drop_last = 4, 2, 32, False

    def __init__(self, clock: Clock, steps: int = 200) -> None:
        self.clock, self.steps, self.dataset = clock, steps, range(steps * 32)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        loader, clock = self, self.clock

        class Iterator:
            _pin_memory, _task_info = False, {}

            def __init__(self) -> None:
                self.taken = self.made = 0
                self.due = clock.now + 1.0  # the first wave
                self._data_queue = _Queue(self.ready)

            def ready(self) -> int:
                while self.made < loader.steps and clock.now >= self.due:
                    if self.made - self.taken + 4 > 8:  # a full queue holds the wave back until there is room
                        break
                    self.made += 4
                    self.due += 1.0
                return self.made - self.taken

            def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
                if self.taken == loader.steps:
                    raise StopIteration
                if self.ready() == 0:
                    clock.now = self.due
                    self.ready()
                self.taken += 1
                return torch.zeros(32, 1), torch.zeros(32)

        return Iterator()


def test_the_first_window_is_not_sized_on_one_wave_of_batches_its_workers_made_together() -> None:
    """The loader alone (diagnose's feed (b): its step a copy that takes no time), its 4 workers delivering in
    waves: each window must span a wave's wait, or its time is none and its pace nothing.

    Sized on 3 batches of one wave (0 s: the wait for the next was the next window's), the first window asked
    for the rest of the epoch; likely why, on an H200 host, feed (b) of ResNet-50's 4-worker loader ran past
    100 s where it had taken 22 s. Here that took 153 s of the fake clock: 176 batches timed as the epoch's
    tail, 191 at its boundary and 191 in a window, the first window read 131/s. Sized on a probe of a wave's
    wait, each window spans a wave (4 batches) and reads the workers' 128/s exactly: 12 s in all.
    """
    clock = Clock()
    ends: list[float] = []
    m = measure(lambda batch: None, _Waves(clock), Windows(warmup_steps=5, window_s=0.2, min_windows=3,
                                                         max_windows=8, rel_tol=0.05, boundaries=1),
                clock=clock, on_window=lambda i, rate: ends.append(clock.now) and False)
    assert m.window_rates == pytest.approx([128.0] * 3)
    assert [b - a for a, b in zip(ends, ends[1:])] == pytest.approx([1.0, 1.0])  # a wave a window
    assert clock.now == pytest.approx(12.0)


class _InTurn:
    """A DataLoader as torch's runs one, on the fake clock: each of `workers` workers holds `prefetch` tasks, given
    in turn, and works through its own at 1 s a batch of 32; batches are handed out in order. An epoch's iterator
    starts its workers in 2 s."""

    batch_size, drop_last = 32, False

    def __init__(self, clock: Clock, steps: int, workers: int, prefetch: int) -> None:
        self.clock, self.steps, self.num_workers, self.prefetch_factor = clock, steps, workers, prefetch
        self.dataset = range(steps * 32)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        loader, clock = self, self.clock

        class Iterator:
            _pin_memory = False

            def __init__(self) -> None:
                start = clock.now + 2.0
                self.free = [start] * loader.num_workers  # when each worker is done with what it was given
                self.done: dict[int, float] = {}  # batch -> when it is made
                self._task_info: dict[int, tuple[int]] = {}
                self._sampler_iter = iter(range(loader.steps))
                self.turn = self.taken = 0
                self._data_queue = _Queue(lambda: sum(1 for made in self.done.values() if made <= clock.now))
                for _ in range(loader.num_workers * loader.prefetch_factor):
                    self.give(start)

            def give(self, now: float) -> None:
                i = next(self._sampler_iter, None)
                if i is None:
                    return
                worker, self.turn = self.turn, (self.turn + 1) % loader.num_workers
                self.free[worker] = self.done[i] = max(self.free[worker], now) + 1.0
                self._task_info[i] = (worker,)

            def __iter__(self):  # an epoch ended early takes what is left through it (`Feed.end_epoch`)
                return self

            def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
                if self.taken not in self.done:
                    raise StopIteration
                clock.now = max(clock.now, self.done.pop(self.taken))
                del self._task_info[self.taken]
                self.taken += 1
                self.give(clock.now)
                return torch.zeros(32, 1), torch.zeros(32)

        return Iterator()


def test_the_probe_leaves_a_short_epoch_its_room_for_windows() -> None:
    """8 workers each given 1 batch ahead, 32 batches an epoch, a step of 0.1 s: the workers' 256/s bound it.

    A probe of a batch per worker (8) left the first epoch no room for a steady window beside its tail; the
    windows went on into later epochs, each started outside the clock, whose first window read the new
    epoch's first wave as backlog drained (64/s): 167/s, unreliable, in 52 s of the fake clock. Where the
    epoch has no room for it the probe stays at 3 steps, and the first epoch's windows agree.
    """
    clock = Clock()
    m = measure(_step(clock, 0.1), _InTurn(clock, steps=32, workers=8, prefetch=1),
                Windows(warmup_steps=5, window_s=0.2, min_windows=3, max_windows=8, rel_tol=0.05, boundaries=1),
                clock=clock)
    assert m.window_rates == pytest.approx([256.0] * 3)
    assert m.reliable
    assert clock.now == pytest.approx(12.8)


def test_spread_is_interquartile_range_over_median() -> None:
    assert spread([100.0]) == 0.0
    assert spread([90.0, 100.0, 110.0]) == pytest.approx(0.1)


def test_an_empty_loader_is_an_error() -> None:
    clock = Clock()
    with pytest.raises(ValueError, match=r"`len\(loader\) >= 1` must hold, but got 0"):
        measure(_step(clock, 0.01), FakeLoader(clock, 0, 1, 0.0), clock=clock)


def test_a_window_calibrated_on_prefetched_batches_is_cut_to_length_after_the_first() -> None:
    # The loader's workers had 10 batches ready: the probe sees 1 ms steps, the loader then feeds one per 50 ms.
    clock = Clock()
    calls = {"step": 0}

    def step(batch: Any) -> None:
        calls["step"] += 1
        clock.now += 0.001 if calls["step"] <= 10 else 0.05

    ends: list[float] = []

    def on_window(i: int, rate: float) -> bool:
        ends.append(clock.now)
        return False

    m = measure(
        step,
        FakeLoader(clock, 1000, 10, 0.0),
        Windows(warmup_steps=2, window_s=0.25, min_windows=3, rel_tol=0.03),
        clock=clock,
        on_window=on_window,
    )
    # First window: 250 steps (0.25 s / 1 ms), 5 of them still fast; then 0.25 s / 49.02 ms -> 6 steps,
    # then 0.25 s / 50 ms -> 5 steps. The first window (204/s) and the next two pooled (200/s) agree within 3%.
    assert ends[0] == pytest.approx(0.002 + 0.003 + 5 * 0.001 + 245 * 0.05)  # warm-up, probe, first window
    assert [b - a for a, b in zip(ends, ends[1:])] == pytest.approx([0.3, 0.25])
    assert m.window_rates[1:] == pytest.approx((200.0,) * 2)
    assert m.steady_samples_per_s == pytest.approx(2610 / 12.805)  # all three windows pooled
    assert m.step_s == pytest.approx(12.805 / 261)


# -- a loader-bound loop whose workers fill their queues while it warms up ------------------------------


class SleepySamples(torch.utils.data.Dataset):
    """Each sample costs `sample_s` of a worker's time (a sleep: decoding without using a core)."""

    def __init__(self, n: int, sample_s: float) -> None:
        self.n, self.sample_s = n, sample_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.sample_s)
        return torch.full((4,), float(i)), i % 2


def _prefetching(batches: int, sample_s: float, workers: int = 4, prefetch: int = 8) -> torch.utils.data.DataLoader:
    """Persistent workers, each given `prefetch` batches of 16 ahead, `sample_s` of a worker's time a sample."""
    return torch.utils.data.DataLoader(SleepySamples(16 * batches, sample_s=sample_s), batch_size=16,
                                       num_workers=workers, prefetch_factor=prefetch, persistent_workers=True)


def _slow_model(warmup_steps: int, warmup_s: float, step_s: float):
    """A step slow for its first calls (cuDNN autotuning, graph capture), then `step_s` each (a slow model)."""
    calls = [0]

    def step(batch: Any) -> None:
        calls[0] += 1
        time.sleep(warmup_s if calls[0] <= warmup_steps else step_s)

    return step


def _counted(step):
    """`step`, and a list whose one item counts its calls."""
    calls = [0]

    def counted(batch: Any) -> None:
        calls[0] += 1
        step(batch)

    return calls, counted


def _start_up_timed_mid_epoch(loader: torch.utils.data.DataLoader) -> Any:
    """`loader` (an epoch of 250 batches) measured with windows that agree at once, so that its epoch start-up is
    timed long before the epoch's end."""
    calls, step = _counted(_slow_model(5, 0.3, 0.004))
    agree_at_once = Windows(window_s=0.2, min_windows=2, rel_tol=1.0, boundaries=1)
    measured = measure(step, loader, agree_at_once)
    assert calls[0] < measured.steps_per_epoch == 250  # the start-up was timed before the epoch's end
    return measured


def _by_hand(loader: torch.utils.data.DataLoader, step, warmup_steps: int, seconds: float,
             until_dry: bool = True) -> float:
    """The ground truth: a plain loop, warmed up, twice the backlog skipped and then (`until_dry`) until a batch
    kept it waiting (the queue ran dry), timed for `seconds`."""
    batches = iter(loader)
    for _ in range(warmup_steps + 2 * loader.num_workers * loader.prefetch_factor):
        step(next(batches))
    waited = 0.0 if until_dry else math.inf
    while waited < 0.005:
        asked = time.perf_counter()
        batch = next(batches)
        waited = time.perf_counter() - asked
        step(batch)
    samples, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        x, y = next(batches)
        step((x, y))
        samples += len(x)
    return samples / (time.perf_counter() - start)


def _by_hand_over_epochs(loader: torch.utils.data.DataLoader, step, seconds: float) -> float:
    """The ground truth over whole epochs, start-ups included: after one epoch (past its backlog), as many whole
    epochs as take at least `seconds`."""
    for batch in loader:
        step(batch)
    samples, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for x, y in loader:
            step((x, y))
            samples += len(x)
    return samples / (time.perf_counter() - start)


def _against_hand(attempt, rate: str = "steady_samples_per_s", tolerance: float = 0.10):
    """`attempt()` measures and times a hand loop: (measurement, hand-timed rate). Tried up to twice more where
    they disagree by more than `tolerance`; the last pair.

    On a shared host a burst of stolen CPU time can slow one loop and not the other (50 s of a 320 s CI run were
    stolen when the step-bound test below read 0.888; in two of three full runs on 2026-12-02 one test here read
    0.855 and 0.891 twice in a row, and passed alone four times in four). A measurement that is wrong is wrong
    three times: every bug these tests guard against read 1.3-1.8x, or 0.6-0.8x, of the hand loop, run after run.
    """
    for _ in range(3):
        measured, truth = attempt()
        if abs(getattr(measured, rate) / truth - 1) <= tolerance:
            break
    return measured, truth


@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes:UserWarning")
@pytest.mark.parametrize(("workers", "prefetch", "sample_s"), [(4, 8, 0.008), (2, 16, 0.004)])
def test_a_loader_bound_loop_is_not_timed_on_the_backlog_its_workers_prefetched(
    workers: int, prefetch: int, sample_s: float
) -> None:
    """4 workers at 8 ms a sample (or 2 at 4 ms) feed about 500 samples/s to a model that could take 890;
    during a 1.5 s warm-up they prefetch 32 batches, which the model drains for over a second.

    Timed right after warm-up, windows of 0.4 s agree with each other while the backlog drains, at the
    speed of the model: the measurement before this one (b1fa441's parent) stated 1.58-1.66x the truth here
    with 4 workers and 1.62-1.68x with 2, three runs each on a 2-core machine. The measurement must agree
    with a loop timed by hand within 10%.
    """
    def loader(batches: int) -> torch.utils.data.DataLoader:
        return _prefetching(batches, sample_s=sample_s, workers=workers, prefetch=prefetch)

    measured, truth = _against_hand(lambda: (
        measure(_slow_model(5, 0.3, 0.018), loader(400), Windows(window_s=0.4, boundaries=0)),
        _by_hand(loader(1200), _slow_model(5, 0.3, 0.018), 5, seconds=1.5)))
    # Taking the 32 prefetched batches (0.6 s) leaves about 18 that the workers made meanwhile: the skip goes
    # on, 2 batches a worker at a time (6 at least), until what they hold stops shrinking (4 workers: 72 in
    # fourteen runs; 32 before. 2 workers: 80 in three).
    assert measured.backlog_steps >= 48, measured.backlog_steps
    assert abs(measured.steady_samples_per_s / truth - 1) <= 0.10, (measured.window_rates, truth)
    # A loop that waits for nearly every batch leaves no growth of its backlog out (0.0 in two runs on two cores).
    assert measured.uncredited_share < 0.05, measured.uncredited_share


@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes:UserWarning")
def test_the_rest_of_an_epoch_that_the_warm_up_handed_out_is_not_timed_as_its_tail() -> None:
    """4 workers at 16 ms a batch, each given 8 ahead (filled during a warm-up of 1.5 s), 60 batches an epoch,
    a model at 5 ms a step.

    Warm-up and the 32 prefetched batches end 23 batches before the epoch's end, inside its last 32, which
    were all handed out during the warm-up. Timed as the epoch's tail (the batches every epoch drains once
    its workers run out of work), their drain stood for every epoch's: 1,170-1,178/s end to end against
    905-914/s by hand. Seen with 16 workers, prefetch 8 and 200 batches an epoch: 1.36x.
    """
    def loader() -> torch.utils.data.DataLoader:
        return _prefetching(60, sample_s=0.004)

    measured, truth = _against_hand(lambda: (measure(_slow_model(5, 0.3, 0.005), loader(), Windows(window_s=0.05)),
                                             _by_hand_over_epochs(loader(), _slow_model(0, 0.0, 0.005), 1.5)),
                                    rate="samples_per_s")
    assert measured.backlog_steps == 55, "the 32 prefetched, then the epoch's other 23"
    assert abs(measured.samples_per_s / truth - 1) <= 0.10, (measured.samples_per_s, truth)


@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes:UserWarning")
def test_an_epoch_start_timed_mid_epoch_costs_what_an_epochs_real_end_costs() -> None:
    """4 persistent workers, each given 8 batches ahead, 64 ms a batch: the loop waits for its loader.

    The windows agree long before the epoch ends, so its start-up is timed mid-epoch. A new epoch's
    iterator first waits for the 32 batches still being made and throws them away (8 x 64 ms), which at
    an epoch's real end were used, not waited for: timed so, the start-up cost 0.59 s (two runs), where a
    real one costs about a batch (64 ms) less the 16 ms the loop waits for any batch (0.05-0.10 s measured).
    """
    measured = _start_up_timed_mid_epoch(_prefetching(250, sample_s=0.004))
    assert measured.epoch_overhead_s < 0.25, measured


@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes:UserWarning")
def test_a_step_bound_loop_is_not_timed_at_its_loaders_speed_while_an_epochs_queue_refills() -> None:
    """4 workers at 3 ms a sample make about 1,300 samples/s for a model that takes 800 (20 ms a batch of 16).

    At the second epoch's start their queues are empty and refill at the difference, for about a second;
    the loop never waits for a batch meanwhile. Windows that counted the batches going into the backlog as
    the loop's ran at the loader's speed, not the model's (1,077-1,343/s here, 1.31x pooled). Seen on an
    H200 host: 16 workers feeding ResNet-50 in fp32 had windows at 3,016-3,429 samples/s where the step
    alone tops out at 2,200. No window may be faster than the model, and the measurement must agree with a
    loop timed by hand within 10%.
    """
    def loader(batches: int) -> torch.utils.data.DataLoader:
        return _prefetching(batches, sample_s=0.003)

    # Epochs of 100 batches: the windows cross the first epoch's end into the second's refill.
    # A warm-up of 5 x 0.1 s: time for the workers to fill their 32 batches (0.4 s) before the backlog is skipped.
    windows = Windows(window_s=0.1, rel_tol=0.0, max_windows=12, extra_windows=0)
    measured, truth = _against_hand(lambda: (
        measure(_slow_model(5, 0.1, 0.02), loader(100), windows),
        _by_hand(loader(300), _slow_model(5, 0.1, 0.02), 5, seconds=1.5, until_dry=False)))
    # The workers keep their 32 batches about full behind the slower model: nothing drains, nothing more is skipped.
    assert measured.backlog_steps <= 32 + 8, measured.backlog_steps
    # The model's own speed, 16 samples a 20 ms step, is the ceiling (not the hand loop's average: a window the
    # loader kept up with all through runs at the model's speed, above the average of a loop that waits at times).
    model = 16 / 0.02
    assert max(measured.window_rates) <= 1.05 * model, (measured.window_rates, truth)
    assert abs(measured.steady_samples_per_s / truth - 1) <= 0.10, (measured.window_rates, truth)
    # What the refill put into the backlog is stated as left out, not lost: about a second at the difference of
    # 1,300 and 800/s in 12 windows of 0.1 s (the refill may start in a window that ran dry, which counts it).
    assert 0.1 < measured.uncredited_share < 0.6, measured.uncredited_share  # 0.356 in four runs on two cores


def _received(x: torch.Tensor, y: torch.Tensor, receive_s: float) -> tuple[torch.Tensor, torch.Tensor]:
    time.sleep(receive_s)
    return x, y


class _SlowToReceive(tuple):
    """A batch that costs 20 ms to arrive in the loop's process, as pinning a batch of 154 MB does."""

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _received, (self[0], self[1], 0.02)


def _slow_to_receive(samples: list[Any]) -> _SlowToReceive:
    return _SlowToReceive(torch.utils.data.default_collate(samples))


@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes:UserWarning")
def test_an_epoch_start_timed_mid_epoch_receives_no_batch_only_to_throw_it_away() -> None:
    """4 persistent workers hold 32 batches ready; each batch costs 20 ms to arrive in the loop's process.

    A new epoch started over one cut short received every batch held ready and threw it away (32 x 20 ms):
    timed so, the start-up cost 0.70 s (two runs); ended as a real epoch ends, 0.02 s. Seen on an H200 host:
    16 persistent workers feeding ResNet-50 held 64 pinned batches of 154 MB; the start-up timed mid-epoch
    cost 2.45 s, 1.71 s by hand.
    """
    loader = torch.utils.data.DataLoader(SleepySamples(16 * 250, sample_s=0.001), batch_size=16, num_workers=4,
                                         prefetch_factor=8, persistent_workers=True, collate_fn=_slow_to_receive)
    measured = _start_up_timed_mid_epoch(loader)
    assert measured.epoch_overhead_s < 0.3, measured


@pytest.mark.filterwarnings("ignore:This DataLoader will create 2 worker processes:UserWarning")
def test_an_epoch_shorter_than_its_backlog_is_timed_whole_from_its_start() -> None:
    """2 workers, each given 8 batches ahead, an epoch of 12 batches that they make far faster than the model
    takes them: they are handed all of it at its start and hold it ready, so no window inside it is steady.

    Corrected for the backlog, each window counted the epoch draining as the loop's shortfall: 798/s here
    against 1,363/s by hand, and, from the tiny workload with 8 workers, prefetch 8 and 32 batches an epoch,
    562/s against 6,052/s. Whole epochs, each timed from its start (1,362/s here), must agree with a loop
    timed by hand over epochs within 10%.
    """
    def loader() -> torch.utils.data.DataLoader:
        return _prefetching(12, sample_s=0.0002, workers=2)

    measured, truth = _against_hand(lambda: (measure(_slow_model(5, 0.05, 0.01), loader(), Windows(window_s=0.3)),
                                             _by_hand_over_epochs(loader(), _slow_model(5, 0.05, 0.01), 1.5)),
                                    rate="samples_per_s")
    assert abs(measured.samples_per_s / truth - 1) <= 0.10, (measured.window_rates, truth)
    assert all(rate <= 1.05 * 16 / 0.01 for rate in measured.window_rates), measured.window_rates
    assert measured.whole_epochs and measured.backlog_steps == 0 and measured.epoch_overhead_s == 0.0


class _Device:
    """Runs each step in the background, `step_s` each, as a GPU runs the kernels a loop launched; `sync` waits."""

    def __init__(self, step_s: float) -> None:
        self.step_s, self.work = step_s, queue.Queue()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            self.work.get()
            time.sleep(self.step_s)
            self.work.task_done()

    def step(self, batch: Any) -> None:
        self.work.put(batch)

    def sync(self) -> None:
        self.work.join()


def test_a_loop_that_loads_in_its_own_process_keeps_loading_while_the_device_runs_a_windows_last_step() -> None:
    """No workers: the loop loads each batch itself (16 ms) while the device runs the step before it (12 ms).

    A window that synchronised the device right after its last step kept the loop from loading the next
    batch meanwhile, as no real loop waits: windows of 3 steps stated 722-747/s against 883-904/s by hand
    here (three runs), and on an H200 host ResNet-50 fed by 0 workers read 0.90 and 0.75 of the hand loop.
    Asked for while the device runs, as a loop asks, the next batch costs the window what it costs the loop
    (884/s against 881/s, 898/s against 891/s).
    """
    def loader() -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(SleepySamples(16 * 400, sample_s=0.001), batch_size=16)

    device = _Device(0.012)

    def by_hand() -> float:
        hand = iter(loader())
        for _ in range(5):
            device.step(next(hand))
        device.sync()
        samples, start = 0, time.perf_counter()
        while time.perf_counter() - start < 1.5:
            x, y = next(hand)
            device.step((x, y))
            samples += len(x)
        device.sync()
        return samples / (time.perf_counter() - start)

    measured, truth = _against_hand(lambda: (
        measure(device.step, loader(), Windows(window_s=0.05, boundaries=0), sync=device.sync), by_hand()))
    assert abs(measured.steady_samples_per_s / truth - 1) <= 0.10, (measured.window_rates, truth)
