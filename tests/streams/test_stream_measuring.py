"""Measuring a stream: its pass as declared, or as it ends when it ends sooner (a partial last batch counted as what
it holds); its time to the first batch apart; a pass nobody declared ranked by its steady rate, and the profile
stating that its declared run is unknown, never a made-up number of seconds."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.utils.data import IterableDataset

from autotune.config import Config
from autotune.study import profile
from autotune.trial.timing import UNBOUNDED_PASS, Windows, measure, stream_steps
from autotune.tuned import file as tuned_file
from autotune.tuned.schema import validate
from autotune.tuned.show import render

WINDOWS = Windows(warmup_steps=2, window_s=0.05, min_windows=3, max_windows=10, rel_tol=0.0)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Samples(IterableDataset):
    def __iter__(self):
        return iter(())


class StreamLoader:
    """A loader over a stream: `samples` a pass in batches of `batch` (the last one partial), or endless; opening the
    stream costs `first_s` of fake time before its first batch. No len(): a stream has none."""

    def __init__(self, clock: Clock, samples: int | None, batch: int, first_s: float) -> None:
        self.clock, self.samples, self.batch_size, self.first_s = clock, samples, batch, first_s
        self.dataset, self.drop_last, self.num_workers = _Samples(), False, 0

    def __iter__(self):
        self.clock.now += self.first_s
        left = self.samples
        while left is None or left > 0:
            n = self.batch_size if left is None else min(self.batch_size, left)
            left = None if left is None else left - n
            yield torch.zeros(n, 1), torch.zeros(n)


def _step(clock: Clock, seconds: float):
    def step(batch: Any) -> None:
        clock.now += seconds

    return step


def test_a_stream_that_ends_before_its_declared_pass_is_timed_by_the_pass_it_yields() -> None:
    clock = Clock()
    loader = StreamLoader(clock, samples=100, batch=16, first_s=0.5)  # 6 batches of 16, then one of 4
    m = measure(_step(clock, 0.01), loader, WINDOWS, clock=clock, pass_samples=512)
    assert m.steps_per_epoch == 7
    assert m.samples_per_s * m.epoch_s == pytest.approx(100)  # not 7 x 16 = 112
    assert m.first_batch_s == pytest.approx(0.5)
    assert m.setup_s == pytest.approx(0.5 + 2 * 0.01)  # the first batch is a one-time cost of the run


def test_a_declared_pass_is_timed_as_declared_and_a_pass_nobody_declared_by_its_steady_rate() -> None:
    clock = Clock()
    m = measure(_step(clock, 0.01), StreamLoader(clock, None, 16, 0.5), WINDOWS, clock=clock, pass_samples=320)
    assert (m.steps_per_epoch, m.first_batch_s) == (20, pytest.approx(0.5))
    assert m.samples_per_s == pytest.approx(320 / (20 * 0.01 + 0.5))  # every pass opens the stream again
    clock = Clock()
    m = measure(_step(clock, 0.01), StreamLoader(clock, None, 16, 0.5), WINDOWS, clock=clock)
    assert m.steps_per_epoch == stream_steps(StreamLoader(clock, None, 16, 0.5), None) == UNBOUNDED_PASS // 16
    assert m.samples_per_s == pytest.approx(m.steady_samples_per_s, rel=1e-6)


BASELINE, FASTER = Config(batch_size=16), Config(batch_size=16, num_workers=2, prefetch_factor=2)


def _rounds(rate: float, first_s: float) -> dict[str, Any]:
    """One round's measurement of a stream nobody declared a pass of: an epoch of UNBOUNDED_PASS samples."""
    return {"samples_per_s": rate, "steady_samples_per_s": rate, "epoch_s": UNBOUNDED_PASS / rate, "setup_s": 0.2,
            "materialize_s": 0.0, "first_batch_s": first_s, "spread": 0.01, "step_s": 16 / rate}


def _setup(size: int, lines: list[str]) -> SimpleNamespace:
    return SimpleNamespace(baseline=BASELINE, echo=lines.append, facts=SimpleNamespace(size=size, stream_refused=()),
                           workload=SimpleNamespace(defaults={"epochs": 2}))


def test_a_pass_nobody_declared_states_no_declared_run_in_the_profile_or_its_lines() -> None:
    lines: list[str] = []
    setup = _setup(0, lines)
    results = {BASELINE: [_rounds(1000.0, 0.3)], FASTER: [_rounds(900.0, 0.5)]}
    assert profile.winner(setup, [FASTER], results) == BASELINE
    assert lines == [f"finalists: none beat the baseline when measured again (900/s against 1,000/s; "
                     f"{profile.UNKNOWN_RUN}); the profile keeps the workload's own settings"]
    assert profile.declared_run(setup, BASELINE, results) == {}
    assert profile.steady_choice(setup, BASELINE, results) is None
    assert profile.first_batch(results[FASTER]) == {"first_batch_s": 0.5}
    declared = _setup(512, [])
    assert profile.declared_run(declared, BASELINE, results)["run_epochs"] == 2


def test_a_streams_profile_keeps_its_first_batch_and_show_says_its_run_is_unknown() -> None:
    made = {"samples_per_s": 1000.0, "baseline_samples_per_s": 1000.0, "speedup": 1.0, "first_batch_s": 0.3,
            "knobs": tuned_file.config_to_knobs(BASELINE), "versions": {"torch": torch.__version__}}
    data = {"schema": 1, "recipe": "tiny_stream", "profiles": {"cpu": made}}
    assert validate(data) == []
    assert validate({**data, "profiles": {"cpu": {**made, "first_batch_s": -1.0}}}) == [
        "profiles.'cpu'.first_batch_s must be >= 0, but got -1.0"]
    table = render(data, Path("recipes/tiny_stream.tuned.toml")).splitlines()
    assert "declared run, s          unknown" in table and "first batch, s           0.3" in table


def test_a_baseline_whose_workers_repeat_the_stream_is_never_the_answer() -> None:
    duplicated = "duplicated samples: each worker yields the whole stream; shard by `get_worker_info()`"
    own, one = Config(batch_size=16, num_workers=2, prefetch_factor=2), Config(batch_size=16, num_workers=1)
    lines: list[str] = []
    setup = SimpleNamespace(baseline=own, echo=lines.append, workload=SimpleNamespace(defaults={"epochs": 2}),
                            facts=SimpleNamespace(size=512, stream_refused=((2, duplicated),)))
    declared = {"epoch_s": 0.5, "setup_s": 0.1, "materialize_s": 0.0}
    results = {own: [{**declared, "samples_per_s": 2000.0}],
               one: [{**declared, "epoch_s": 1.0, "samples_per_s": 500.0}]}
    assert profile.winner(setup, [one], results) == one  # slower, but it keeps the stream's samples
    assert lines == [f"finalists: the workload's own settings ({own.describe()}) cannot be the answer: {duplicated}; "
                     f"the answer is the fastest config that keeps the stream's samples"]
    lines.clear()
    assert profile.winner(setup, [], {own: results[own]}) == own
    assert lines[0].startswith(f"warning: the workload's own settings ({own.describe()}) are the answer, as no other")


class StragglerLoader(StreamLoader):
    """A pass of `samples` in full batches, then one partial batch from each of `stragglers` workers that end their
    shards last, each kept waiting `tail_s` of fake time: a pass's end as a stream's workers make it."""

    def __init__(self, clock: Clock, samples: int, batch: int, first_s: float, stragglers: int, partial: int,
                 tail_s: float) -> None:
        super().__init__(clock, samples, batch, first_s)
        self.stragglers, self.partial, self.tail_s = stragglers, partial, tail_s

    def __iter__(self):
        self.clock.now += self.first_s
        for _ in range((self.samples - self.stragglers * self.partial) // self.batch_size):
            yield torch.zeros(self.batch_size, 1), torch.zeros(self.batch_size)
        for _ in range(self.stragglers):
            self.clock.now += self.tail_s
            yield torch.zeros(self.partial, 1), torch.zeros(self.partial)


def test_a_streams_pass_is_read_to_its_own_end_and_its_stragglers_are_in_its_rate() -> None:
    # 1,648 samples declared: 100 batches of 16, then 4 workers' partial batches of 12, each 0.1 s late. Its
    # declared count (103 batches of 16) would stop before the last partial batch and never wait for the others.
    clock = Clock()
    loader = StragglerLoader(clock, samples=1648, batch=16, first_s=0.5, stragglers=4, partial=12, tail_s=0.1)
    m = measure(_step(clock, 0.01), loader, Windows(warmup_steps=2, window_s=0.05, rel_tol=0.03), clock=clock,
                pass_samples=1648)
    assert m.steps_per_epoch == 104
    # A pass as a loop over it takes: its start, 104 steps, the stragglers' waits.
    assert m.epoch_s == pytest.approx(0.5 + 104 * 0.01 + 4 * 0.1)
    assert m.samples_per_s == pytest.approx(1648 / 1.94)


def test_a_short_batchs_one_off_work_at_the_pass_end_is_left_out_of_the_pass() -> None:
    # As above, and the first batch of 12 costs 2 s more than a step (a new shape, benchmarked once): a run pays
    # that once, in its first pass, not at the end of each.
    clock = Clock()
    loader = StragglerLoader(clock, samples=1648, batch=16, first_s=0.5, stragglers=4, partial=12, tail_s=0.1)
    sizes: set[int] = set()

    def step(batch: Any) -> None:
        clock.now += 0.01 + (2.0 if len(batch[0]) not in sizes else 0.0)
        sizes.add(len(batch[0]))

    m = measure(step, loader, Windows(warmup_steps=2, window_s=0.05, rel_tol=0.03), clock=clock, pass_samples=1648)
    assert m.epoch_s == pytest.approx(0.5 + 104 * 0.01 + 4 * 0.1)
    assert m.short_batches_once_s == pytest.approx(2.0)


def test_a_stream_that_goes_on_past_its_declared_pass_keeps_the_declared_pass() -> None:
    clock = Clock()
    m = measure(_step(clock, 0.01), StreamLoader(clock, None, 16, 0.5), Windows(warmup_steps=2, window_s=0.05,
                rel_tol=0.03), clock=clock, pass_samples=1600)
    assert m.steps_per_epoch == 100
    assert m.samples_per_s == pytest.approx(1600 / (100 * 0.01 + 0.5))  # the declared pass, its start timed


def test_windows_that_reach_the_pass_end_read_the_stream_to_its_own_end_not_a_restart() -> None:
    # As above, with 4 workers holding 8 batches ready, and windows that do not stop before the pass ends (40 of them
    # at least): the windows reach its last batches. Ended there by a restart at its declared 103 batches, the pass
    # lost its 104th batch and the last straggler's wait: 1.81 s, where a loop over it takes 1.94 s.
    clock = Clock()
    loader = StragglerLoader(clock, samples=1648, batch=16, first_s=0.5, stragglers=4, partial=12, tail_s=0.1)
    loader.num_workers, loader.prefetch_factor = 4, 2
    windows = Windows(warmup_steps=2, window_s=0.05, min_windows=40, max_windows=40)
    m = measure(_step(clock, 0.01), loader, windows, clock=clock, pass_samples=1648)
    assert len(m.window_rates) == 40 and m.steps_per_epoch == 104
    assert m.epoch_s == pytest.approx(0.5 + 104 * 0.01 + 4 * 0.1)


@pytest.mark.parametrize("boundaries", [1, 2])
def test_pass_ends_past_the_timed_boundaries_are_read_through_not_counted_again_as_a_tail(boundaries: int) -> None:
    # 80 windows cross three pass ends and more. Once the boundaries were timed, a pass end read as a tail (its last
    # 8 batches, stragglers and all) was counted beside the crossings that had timed it already: 2.19 s a pass.
    clock = Clock()
    loader = StragglerLoader(clock, samples=1648, batch=16, first_s=0.5, stragglers=4, partial=12, tail_s=0.1)
    loader.num_workers, loader.prefetch_factor = 4, 2
    windows = Windows(warmup_steps=2, window_s=0.05, min_windows=80, max_windows=80, boundaries=boundaries)
    m = measure(_step(clock, 0.01), loader, windows, clock=clock, pass_samples=1648)
    assert len(m.window_rates) == 80 and m.steps_per_epoch == 104
    assert m.epoch_s == pytest.approx(0.5 + 104 * 0.01 + 4 * 0.1)


def test_a_rate_that_moves_within_a_run_is_told_apart_from_processes_that_disagree() -> None:
    # A user's stream at 2 workers: its windows 2,226-6,369/s (±45% within a run), its processes 2,877-2,963/s.
    assert profile.noise_said("the winner's", 0.447, [2_888.0, 2_963.0, 2_877.0]) == (
        "note: the winner's rate moves by ±45% within a run (its windows: a stream's feed within its pass, a "
        "loader's bursts), while its 3 processes agree within ±3%; the stated rate is over whole passes")
    disagree = profile.noise_said("the baseline's", 0.30, [1_000.0, 1_400.0])
    assert disagree is not None and disagree.startswith("warning: the baseline's measurements disagree by ±30%")
    alone = profile.noise_said("the winner's", 0.30, [1_000.0])  # one process says nothing of the others
    assert alone is not None and alone.startswith("warning:")
    assert profile.noise_said("the winner's", 0.25, [1_000.0, 2_000.0]) is None  # within NOISY: nothing said
