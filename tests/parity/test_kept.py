"""A check's state, kept as JSON and taken up by a new check: every verdict stands, and nothing is judged again."""

from __future__ import annotations

import json
from typing import Any

from autotune.config import Config, LrRule, scaled_lr
from autotune.parity import kept
from autotune.parity.check import ParityCheck
from autotune.parity.numerics import NumericsVerdict, judge, label
from autotune.parity.run import ParityRun

BASE = Config(batch_size=16)
LINEAR = LrRule("linear", "SGD is an SGD-family optimizer")
TOO_FAR = 64  # batches from this one up learn too little at every rate


def lr_at(config: Config, rule: str) -> float:
    return scaled_lr(0.05, 16, config.batch_size, rule, None)


def new_check(calls: list[Any], lines: list[str]) -> ParityCheck:
    def make_run(config: Config, lr: float, samples: int) -> ParityRun:
        calls.append((config.batch_size, lr))
        loss = 1.9 if config.batch_size >= TOO_FAR else 1.0
        return ParityRun(config.batch_size, lr, 2.0, loss, (samples,), (loss,), True, 0.5)

    def check_numerics(config: Config) -> NumericsVerdict:
        calls.append(("numerics", config.amp))
        return judge({"error": 0.1, "noise": 1.0, "signal": 0.5, "finite": True, "batches": 8, "batch_size": 16,
                      "seconds": 0.5}, label(config))

    return ParityCheck(BASE, lambda c: lr_at(c, "linear"), make_run, [Config(batch_size=1024)], lines.append,
                       baseline_rate=1000.0, budget_s=100.0, lr_rule=LINEAR, lr_at=lr_at, check_numerics=check_numerics)


def test_a_check_taken_up_from_its_kept_state_reaches_every_verdict_again_without_a_run() -> None:
    too_far, its_twin, good, bf16 = (Config(batch_size=64), Config(batch_size=64, num_workers=2),
                                     Config(batch_size=32), Config(batch_size=16, amp="bf16"))
    calls: list[Any] = []
    first = new_check(calls, [])
    assert first.select([too_far, its_twin, good, bf16], want=4, max_runs=9) == [good, bf16]
    # The baseline, batch 64 at each rate it is tried at (linear, sqrt, none), batch 32, bf16's gradients.
    assert len(calls) == 6 and first.samples == 8192
    stored = json.loads(json.dumps(kept.state(first)))  # as the study keeps it

    calls.clear()
    lines: list[str] = []
    again = new_check(calls, lines)
    assert kept.take_up(again, stored)
    assert (again.samples, again.window, again.runs, again.conclusive) == (first.samples, first.window, 4, True)
    assert again.verdicts == first.verdicts
    assert again.summary() == first.summary()
    assert again.record(good) == first.record(good)
    assert again.select([too_far, its_twin, good, bf16], want=4, max_runs=0) == [good, bf16]
    assert calls == [] and lines == []
    # What a verdict rules out for others stands too: batch 64 with other numerics is rejected without a run, and
    # bf16 with other loader knobs reuses the gradients' verdict.
    other, bf16_loaded = Config(batch_size=64, channels_last=True), Config(batch_size=16, amp="bf16", num_workers=2)
    assert again.select([other, bf16_loaded], want=2, max_runs=9) == [bf16_loaded]
    assert calls == [] and lines[0].startswith("  parity REJECT  (batch 64 at lr 0.05 is too far whatever the numerics")
    assert again.why_hopeless(Config(batch_size=64, channels_last=True)) is not None


def test_a_state_of_another_layout_leaves_the_new_check_as_it_was() -> None:
    first = new_check([], [])
    first.select([Config(batch_size=32)], want=1, max_runs=1)
    stored = {**kept.state(first), "version": kept.VERSION + 1}
    again = new_check([], [])
    assert not kept.take_up(again, stored)
    assert again.verdicts == {} and again.runs == 0 and again.conclusive is None
