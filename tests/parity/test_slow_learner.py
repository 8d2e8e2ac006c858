"""A baseline that learns slowly: a verdict from what it learned against its noise, in the time the search leaves.

mnist_cnn on a 2-core CPU learned 0.4% of its initial loss in the 26,624 samples a 90 s search's check could pay
for, under the 1.5% that always suffices, and every larger batch stayed unjudged (docs/parity.md, "A slow learner").
The runs here are made up, with their noise: per-step losses that wander from batch to batch, probe losses batch
by batch; the check, its signal and its budget are the real ones.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from autotune.config import Config
from autotune.parity import signal
from autotune.parity import verdict as parity
from autotune.parity.check import ParityCheck
from autotune.parity.reasons import inconclusive_reason
from autotune.parity.run import ParityRun

BASE = Config(batch_size=128)
L0 = 2.3
PROBE_BATCHES = 32  # 4,096 probe samples in batches of 128


def run_of(batch: int, learned: float, samples: int = 26_624, step_noise: float = 0.004, probe_noise: float = 0.0005,
           seed: int = 0) -> ParityRun:
    """A run that learns `learned` of L0 by its end, evenly over its samples; each step's loss off the trend by about
    `step_noise`, each probe batch's change by about `probe_noise`. Its probe batches differ from one another as a
    data set's do, the same in every run."""
    draw = random.Random(seed)
    content = random.Random(99)
    steps = -(-samples // batch)  # whole batches until `samples` are seen
    ends = tuple(batch * (i + 1) for i in range(steps))
    losses = tuple(L0 * (1 - learned * end / samples) + draw.gauss(0, step_noise) for end in ends)
    initial = tuple(L0 + content.gauss(0, 0.004) for _ in range(PROBE_BATCHES))
    final = tuple(x - learned * L0 + draw.gauss(0, probe_noise) for x in initial)
    shuffled = tuple(x + learned * L0 + draw.gauss(0, probe_noise) for x in final)

    def mean(xs: tuple[float, ...]) -> float:
        return sum(xs) / len(xs)

    return ParityRun(batch, 0.01 * batch / 128, mean(initial), mean(final), ends, losses, True, 1.0, mean(shuffled),
                     initial, final, shuffled)


def test_a_slow_learner_clearly_above_its_noise_is_conclusive_where_the_fixed_share_is_not() -> None:
    run = run_of(128, 0.004)
    window = 26_624 // parity.WINDOW_PARTS
    assert parity.progress(run, 26_624, window) < parity.MIN_PROGRESS
    z = signal.clear(run, 26_624, window)
    assert z is not None and z > signal.SIGNAL_Z
    assert parity.conclusive(run, 26_624, window)
    # The same share learned through noise ten times as large: not clearly learned, inconclusive as before.
    noisy = run_of(128, 0.004, step_noise=0.04, probe_noise=0.005)
    assert not parity.conclusive(noisy, 26_624, window)
    said = inconclusive_reason(noisy, 26_624, window, extended=False)
    assert said.startswith("the baseline learned 0.4% of its initial loss 2.3")
    assert said.endswith(f"a verdict needs 1.5%, or 0.25% at 5 times its noise (it stood "
                         f"{signal.clear(noisy, 26_624, window):.1f} times)")


def test_a_run_without_its_noise_is_judged_by_the_fixed_share_alone() -> None:
    run = run_of(128, 0.004)
    bare = ParityRun(run.batch_size, run.lr, run.initial_loss, run.final_loss, run.ends, run.losses, True, 1.0,
                     run.shuffled_loss)
    assert signal.clear(bare, 26_624, 6_656) is None
    assert not parity.conclusive(bare, 26_624, 6_656)


def test_too_little_learned_is_inconclusive_however_clear() -> None:
    # 0.2% with no noise at all: clear, but no unit a deviation could be measured in.
    run = run_of(128, 0.002, step_noise=0.0, probe_noise=0.0)
    assert not parity.conclusive(run, 26_624, 6_656)


def test_against_a_slow_learner_a_candidate_that_learned_half_as_much_is_rejected() -> None:
    # Held at the 1% floor, a deviation of a candidate that learned half of 0.4% read 0.2: a pass at the batch size
    # tolerance of 0.25. In units of what the baseline learned it reads 0.5.
    base, half = run_of(128, 0.004), run_of(1024, 0.002, seed=1)
    verdict = parity.compare(base, half, "batch_size", 26_624, 6_656)
    assert verdict.word == "REJECT"
    assert verdict.probe_deviation == pytest.approx(0.5, abs=0.05)
    bare = [ParityRun(r.batch_size, r.lr, r.initial_loss, r.final_loss, r.ends, r.losses, True, 1.0, r.shuffled_loss)
            for r in (base, half)]
    assert parity.compare(*bare, "batch_size", 26_624, 6_656).probe_deviation == pytest.approx(0.2, abs=0.02)


def make_runs(learned: dict[int, float]) -> tuple[list[tuple[int, int]], object]:
    calls: list[tuple[int, int]] = []

    def make_run(config: Config, lr: float, samples: int) -> ParityRun:
        calls.append((config.batch_size, samples))
        return run_of(config.batch_size, learned[config.batch_size], samples=samples, seed=config.batch_size)

    return calls, make_run


def test_the_check_passes_a_correct_rule_and_rejects_a_capped_one_on_a_slow_learner() -> None:
    # As measured on mnist_cnn (docs/parity.md): at 26,624 samples batch 1024 at the linear rule's rate learned what
    # the baseline did, batch 2048 at the capped rate about half.
    calls, make_run = make_runs({128: 0.004, 1024: 0.004, 2048: 0.002})
    lines: list[str] = []
    check = ParityCheck(BASE, lambda c: 0.01 * c.batch_size / 128, make_run, [], lines.append, max_batch=2048,
                        baseline_rate=7_800.0, budget_s=13.5)
    large, good = Config(batch_size=2048), Config(batch_size=1024)
    assert check.select([large, good], want=1, max_runs=4) == [good]
    assert check.conclusive is True and not check.base.extended
    assert check.verdicts[large].word == "REJECT"
    assert [b for b, _ in calls] == [128, 2048, 1024]
    z = signal.clear(run_of(128, 0.004, samples=26_325, seed=128), 26_325, 26_325 // parity.WINDOW_PARTS)
    assert lines[0] == (f"parity: the baseline learned 0.4% of its initial loss in 26,325 samples, {z:.1f} times its "
                        f"noise: enough to judge by")
    assert lines[1].startswith("  parity REJECT  deviation +")


@pytest.mark.parametrize(("spare_s", "longer"), [(0.0, None), (20.0, 16384)])
def test_an_inconclusive_baseline_is_run_longer_in_the_time_the_search_can_spare(spare_s: float,
                                                                                  longer: int | None) -> None:
    # A 60 s search's 9 s share: its baseline run took 5 s and learned too little clearly; twice as long costs 10 s
    # more, and a candidate's run as much. The share alone leaves no room; 20 s the trials left unused do.
    calls: list[int] = []

    def make_run(config: Config, lr: float, samples: int) -> ParityRun:
        calls.append(samples)
        return run_of(config.batch_size, 0.003 * samples / 8192, samples=samples, step_noise=0.1)

    lines: list[str] = []
    # The baseline's trial ran 3,641 samples/s: a quarter of the share (2.25 s) trains 8,192 samples.
    check = ParityCheck(BASE, lambda c: 0.01, make_run, [], lines.append, baseline_rate=8192 / 2.25, budget_s=9.0,
                        spare_s=lambda: spare_s)
    made = run_of(128, 0.003, samples=8192, step_noise=0.1)
    check.adopt_baseline(ParityRun(**{**made.__dict__, "seconds": 5.0}), "made elsewhere")
    check.select([Config(batch_size=1024)], want=1, max_runs=1)
    assert calls[:1] == ([longer] if longer else [])
    if longer is None:
        assert lines[0] == "parity: the check's budget (9 s, 5.0 s spent) leaves no time to run the baseline longer"
    else:
        assert lines[0].startswith("parity: the baseline learned ")
        assert lines[0].endswith("under the 1.5% a verdict needs; running it again for 16,384")


@pytest.mark.steady  # a tiny model in this process, on one thread
def test_a_run_with_no_time_left_stops_after_a_step_and_keeps_what_it_learned(tmp_path: Path) -> None:
    from parity.test_run import WORKLOADS, runner_for

    from autotune.parity import run as parity_run

    runner = runner_for(WORKLOADS / "tiny.py", "cpu", tmp_path)
    probe_set = parity_run.probe(runner.dataset, samples=256)
    run = parity_run.train(runner.build, Config(batch_size=16), 0.05, 8192, probe_set, 16, stop_after_s=0.0)
    assert (run.samples, len(run.losses)) == (16, 1)
    assert run.initial_parts is not None and run.final_parts is not None and len(run.final_parts) == 16
    whole = parity_run.train(runner.build, Config(batch_size=16), 0.05, 512, probe_set, 16)
    assert whole.samples == 512


def test_a_baseline_run_stopped_in_time_sets_every_run_s_length_and_larger_batches_go_unrun() -> None:
    # A busy host: the baseline's run, asked for 26,325 samples, reached 13,056 when its trial process stopped it to
    # answer within its limit. Every run is then that long; batch 2048's 8 steps (16,384 samples) are longer.
    asked: list[tuple[int, int]] = []

    def make_run(config: Config, lr: float, samples: int) -> ParityRun:
        asked.append((config.batch_size, samples))
        reached = min(samples, 13_056) if config == BASE else samples
        return run_of(config.batch_size, 0.008 * reached / 26_325, samples=reached, seed=config.batch_size)

    lines: list[str] = []
    check = ParityCheck(BASE, lambda c: 0.01 * c.batch_size / 128, make_run, [], lines.append, max_batch=2048,
                        baseline_rate=7_800.0, budget_s=13.5)
    assert check.samples == 26_325
    good, large = Config(batch_size=1024), Config(batch_size=2048)
    assert check.select([large, good], want=1, max_runs=4) == [good]
    assert asked == [(128, 26_325), (1024, 13_056)]
    z = signal.clear(run_of(128, 0.008 * 13_056 / 26_325, samples=13_056, seed=128), 13_056, 3_264)
    assert lines[:3] == [
        "parity: the baseline's run stopped in time at 13,056 of its 26,325 samples; every run is compared over those",
        f"parity: the baseline learned 0.4% of its initial loss in 13,056 samples, {z:.1f} times its noise: enough to "
        f"judge by",
        "  parity inconclusive  it changes batch_size, and its shortest run (8 steps: 16,384 samples) is longer than "
        "the baseline's, which stopped in time at 13,056: cannot be judged  bs=2048 workers=0"]
    assert (check.samples, check.window, check.conclusive) == (13_056, 3_264, True)
    assert check.verdicts[large].reason == (
        "it changes batch_size, and its shortest run (8 steps: 16,384 samples) is longer than the baseline's, which "
        "stopped in time at 13,056: cannot be judged")


def test_the_probe_is_no_larger_than_the_runs_it_judges() -> None:
    # text_transformer on the 2-core CPU: its baseline's 64 batches of 32 are a 2,048-sample run at 89 samples/s, and
    # a 4,096-sample probe, evaluated before and after every run, took the check's whole 16 s share on its own.
    check = ParityCheck(Config(batch_size=32), lambda c: 5e-4, lambda c, lr, s: run_of(32, 0.01, samples=s), [],
                        lambda line: None, max_batch=32, baseline_rate=89.0, budget_s=16.5)
    assert (check.samples, check.probe_samples) == (2048, 682)
    assert ParityCheck(BASE, lambda c: 0.01, lambda c, lr, s: run_of(128, 0.01, samples=s), [], lambda line: None,
                       max_batch=2048, baseline_rate=7_800.0, budget_s=13.5).probe_samples == 4096
