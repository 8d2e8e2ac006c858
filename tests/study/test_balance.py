"""The hybrid decode's share solved from one measured hybrid, and the best share measured next."""

from __future__ import annotations

from pathlib import Path

import pytest
from _pools import FakePool, ran
from optuna.trial import TrialState

from autotune.config import COMPILE_CHOICES, DECODE_CHOICES, DECODE_SHARES, Config
from autotune.options import SearchOptions
from autotune.procs.trial_process import Outcome
from autotune.study.planning.balance import SOLVED, Balance, solve
from autotune.study.space.domains import Space, build_space


def test_one_hybrid_on_the_h100_host_gives_the_share_both_sides_balance_at() -> None:
    """lab/results/h100_2026-12-06: the half hybrid ran 4,445/s beside a compiled step of 5,735/s alone and 15
    workers that made 4,970/s of uint8 images alone."""
    model = solve(0.5, 4445.0, 5735.0, 4970.0)
    assert model is not None
    assert model.decode_s == pytest.approx((1 / 4445 - 1 / 5735) / 0.5)  # 0.101 ms a device-decoded sample
    assert model.best_share() == pytest.approx(0.0887, abs=5e-4)
    assert model.rate(0.5) == pytest.approx(4445.0)  # the measured point, back
    assert round(model.rate(0.125)) == 5347 and round(model.rate(0.25)) == 5008
    assert max(DECODE_SHARES[1:], key=model.rate) == 0.125
    # A faster step (an H200's, 6,814/s) with the same workers and decode cost: a larger share pays.
    faster = Balance(host_s=model.host_s, step_s=1 / 6814, decode_s=model.decode_s)
    assert max(DECODE_SHARES[1:], key=faster.rate) == 0.25 and faster.best_share() == pytest.approx(0.180, abs=1e-3)


def test_a_hybrid_the_workers_could_explain_or_no_faster_than_its_step_gives_no_model() -> None:
    # The workers make their half at 850/s: the loop at 1,700/s, and 1,650/s measured is within the host's margin of
    # it. The workers explain the rate, and it shows nothing of what the device's half costs.
    assert solve(0.5, 1650.0, 5000.0, 850.0) is None
    assert solve(0.5, 1400.0, 5000.0, 850.0) is not None  # 18% under what the workers make: the device limited it
    assert solve(0.5, 5000.0, 4800.0, 9000.0) is None  # the loop no slower than its step alone: no decode cost seen
    assert solve(1.0, 3000.0, 5000.0, 4000.0) is None and solve(0.5, 3000.0, 5000.0, 0.0) is None


def test_the_best_share_is_none_of_the_batch_where_the_workers_alone_outrun_the_step() -> None:
    model = Balance(host_s=1 / 8000, step_s=1 / 5000, decode_s=1e-4)
    assert model.best_share() == 0.0 and model.rate(0.0) == pytest.approx(5000.0)


STEP = 6000.0  # the fake card: the step alone, each decode path alike
HOST = 4000.0  # the workers' host-decoded loader alone, at any count
DECODE_S = 1e-4  # what a device-decoded sample costs the step


def fake_true_rate(config: Config) -> float:
    if config.decode == "gpu":
        return Balance(1 / HOST, 1 / STEP, DECODE_S).rate(config.decode_share if config.decode_share < 1 else 1.0)
    return min(STEP, HOST)


class Card(FakePool):
    """A trial pool of one card and host: every step runs STEP alone, the workers HOST, the hybrid as the model."""

    runs: list[Config] = []

    def run(self, config: Config, lr: float, *args: object, **kwargs: object) -> Outcome:
        Card.runs.append(config)
        return ran(config, fake_true_rate(config))

    def parts(self, config: Config, lr: float, which: list[str], timeout_s: float) -> Outcome:
        # Each alone: the hybrid's loader overlaps both halves on an idle device, which is why its parts overrate it.
        loader = HOST / (1 - config.decode_share) if config.decode == "gpu" and config.decode_share < 1 else HOST
        made = {"step": STEP, "loader": loader}
        return Outcome("complete", result={w: {"samples_per_s": made[w], "spread": 0.01, "compile_s": 0.0}
                                           for w in which})


@pytest.fixture
def card(project: Path, monkeypatch: pytest.MonkeyPatch) -> type[Card]:
    from autotune.study import pools, setup

    def with_device_decode(*args: object, **kwargs: object) -> Space:
        space = build_space(*args, **kwargs)  # type: ignore[arg-type]
        opened = ("compile", "decode", "decode_share", "device_normalize")
        excluded = {k: v for k, v in space.excluded.items() if k not in opened}
        return Space({**space.domains, "compile": COMPILE_CHOICES, "decode": DECODE_CHOICES,
                      "decode_share": DECODE_SHARES, "device_normalize": (False, True)}, excluded)

    monkeypatch.setattr(setup, "build_space", with_device_decode)
    monkeypatch.setattr(pools, "TrialPool", Card)
    Card.runs = []
    return Card


def test_after_the_half_hybrid_the_search_measures_the_balanced_share_next_and_it_wins(card: type[Card]) -> None:
    from autotune.study import search, setup

    lines: list[str] = []
    options = SearchOptions(trials=16, seed=1, parity_check=False, rounds=1, time_budget_s=None)
    search("tiny", options, echo=lines.append)
    hybrids = [(i, c) for i, c in enumerate(Card.runs) if c.decode == "gpu" and c.decode_share < 1]
    first, half = hybrids[0]
    assert half.decode_share == 0.5
    # 1/4000 s of host time per host-decoded sample against 1/6000 s + 0.1 ms per device-decoded one: at the half,
    # 4,615/s, the device's side; the two take as long at 24%, and the grid's 25% is predicted at 5,217/s.
    balanced = Card.runs[first + 1]
    assert balanced.decode_share == 0.25 and balanced == Config(**{**half.as_dict(), "decode_share": 0.25})
    said = next(line for line in lines if line.startswith("balance: "))
    assert said == ("balance: the hybrid at 50% ran 4,615/s beside a step of 6,000/s alone and workers of 4,000/s "
                    "alone: a device-decoded sample costs the step 0.100 ms, so both sides take as long at 24%; "
                    "measuring it at 25% next (predicted 5,217/s)")
    study = setup.open_study(setup.prepare("tiny", options, echo=lambda line: None)).study
    trial = next(t for t in study.get_trials() if SOLVED in t.user_attrs)
    assert trial.state == TrialState.COMPLETE and trial.value == pytest.approx(5217.4, abs=0.1)
    assert trial.user_attrs["predicted_samples_per_s"] == 5217.4
    assert study.best_value == pytest.approx(5217.4, abs=0.1)
    # Measured as a trial once, and solved for once: at the balanced share the workers' side explains the rate as
    # well as the device's, so it shows no new decode cost.
    trials = [t for t in study.get_trials() if t.user_attrs.get("config") == balanced.as_dict()]
    assert [t.number for t in trials if "duplicate_of" not in t.user_attrs] == [trial.number]
    assert [line for line in lines if line.startswith("balance: ")] == [said]
