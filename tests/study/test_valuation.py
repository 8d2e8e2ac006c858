"""The loop valued from its parts: the prediction against the end-to-end measurement on a loader-bound and a
step-bound CPU fixture, and what the valuation learns and states."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import torch

from autotune.config import Config
from autotune.procs.trial_process import Outcome
from autotune.study.planning.valuation import VALUED, Valuation, combine, loader_key, step_key
from autotune.trial import parts
from autotune.trial.runner import Runner
from autotune.trial.timing import Windows
from autotune.workloads import RecipeRef, load

FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.mark.slow
@pytest.mark.alone  # times real work: beside a load that came and went, one run read -24.0% of its 25% bound
@pytest.mark.parametrize(("fixture", "bound"), [("heavy_reads", "loader"), ("heavy_step", "step")])
def test_the_prediction_from_the_parts_is_within_25_percent_of_the_loop(
    fixture: str, bound: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As the search uses it: the interference factor learned from one config measured end to end (the workload's
    own), the prediction made for another (twice its batch) before that one is measured."""
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    torch.set_num_threads(1)  # one core's work, as a trial process beside another on a shared host
    path = FIXTURES / f"{fixture}.py"
    workload = load(RecipeRef(fixture, path, path.with_suffix(".tuned.toml"), False))
    runner = Runner(workload, torch.device("cpu"), cpu_share=1)
    # Up to three tries: a host whose load changes between the parts and the loops (another tenant's job) moved
    # one try by 25.5%; an error of the prediction's own is there every time.
    errors = []
    for _ in range(3):
        errors.append(_prediction_error(runner, workload, fixture, bound, capsys))
        if abs(errors[-1]) <= 0.25:
            break
    assert abs(errors[-1]) <= 0.25, errors


def _prediction_error(runner: Runner, workload: object, fixture: str, bound: str,
                      capsys: pytest.CaptureFixture[str]) -> float:
    lr, bs = float(workload.defaults["lr"]), workload.defaults["batch_size"]
    learned_on, predicted_for = Config(batch_size=bs), Config(batch_size=2 * bs)
    # Three rounds, each part beside its loop, medians of each: on a shared host the cores' speed drifts by a third
    # within a minute (the load of other processes), and a part measured in one minute, the loop in another, would
    # compare two hosts.
    rounds: dict[Config, list[tuple[dict[str, dict[str, float]], float]]] = {learned_on: [], predicted_for: []}
    for _ in range(3):
        for config in rounds:
            found = parts.measure(runner, config, lr, ["step", "loader"])
            rounds[config].append((found, runner.run(config, lr, Windows())["samples_per_s"]))
    valuation = Valuation()
    measured = {}
    for config, made in rounds.items():
        valuation.add(config, {part: {"samples_per_s": statistics.median(f[part]["samples_per_s"] for f, _ in made)}
                               for part in ("step", "loader")})
        measured[config] = statistics.median(m for _, m in made)
    step, loader = valuation.steps[step_key(predicted_for)], valuation.loaders[loader_key(predicted_for)]
    assert (step < loader) == (bound == "step"), rounds
    valuation.learn(learned_on, measured[learned_on])
    predicted = valuation.predict(predicted_for)
    assert predicted is not None
    error = predicted / measured[predicted_for] - 1
    with capsys.disabled():
        print(f"\n{fixture} ({bound}-bound), bs={predicted_for.batch_size}: step {step:,.0f}/s, "
              f"loader {loader:,.0f}/s, "
              f"interference factor {valuation.factor():.2f} (from bs={bs}), predicted {predicted:,.0f}/s, measured "
              f"{measured[predicted_for]:,.0f}/s end to end: error {error:+.1%}")
    return error


def test_a_step_rate_serves_every_loader_and_a_loader_rate_every_step() -> None:
    a = Config(batch_size=64, num_workers=2, persistent_workers=True, prefetch_factor=2)
    b = Config(batch_size=64, num_workers=4, persistent_workers=True, prefetch_factor=4)
    c = Config(batch_size=64, num_workers=2, persistent_workers=True, prefetch_factor=2, amp="bf16")
    assert step_key(a) == step_key(b) and loader_key(a) != loader_key(b)
    assert step_key(a) != step_key(c) and loader_key(a) == loader_key(c)
    assert step_key(a) != step_key(Config(batch_size=128, num_workers=2))


def test_the_interference_factor_is_learned_and_rules_out_only_once_trusted() -> None:
    v = Valuation()
    a = Config(batch_size=64, num_workers=2, prefetch_factor=2)
    b = Config(batch_size=64, num_workers=1, prefetch_factor=2)
    v.add(a, {"step": {"samples_per_s": 1000.0}, "loader": {"samples_per_s": 800.0}})
    v.add(b, {"loader": {"samples_per_s": 300.0}})
    assert (v.predict(a), v.predict(b)) == (800.0, 300.0)  # overlapped: the slower part
    assert v.why_skip(b, 800.0, 0.5) is None, "no end-to-end trial yet: nothing is ruled out"
    assert v.learn(a, 640.0) == pytest.approx(0.25)  # predicted 800, measured 640: workers took the loop's cores
    assert v.factor() == 0.8 and v.predict(b) == pytest.approx(240.0)
    assert v.why_skip(b, 640.0, 0.5) == (f"{VALUED}: predicted 240/s (step 1,000/s, loader 300/s, x0.80), under 50% "
                                         f"of the best measured 640/s")
    serial = Config(batch_size=64)
    assert combine(serial, 1000.0, 1000.0) == 500.0  # no workers: one process loads, then steps
    assert v.record()["configs_measured"] == 1 and v.record()["interference_factor"] == 0.8


def test_a_streams_loader_is_valued_over_whole_passes_by_its_busiest_workers_share_of_the_shards() -> None:
    # 64 shards: 16 workers read 4 each and end together; of 15, four read a fifth shard while the rest wait, so
    # the pass takes 5 shards' time: within a pass 15 workers make more, over passes 16 do.
    v = Valuation(shards=64)
    fifteen, sixteen = (Config(batch_size=256, num_workers=n, prefetch_factor=2) for n in (15, 16))
    v.add(fifteen, {"step": {"samples_per_s": 5000.0}, "loader": {"samples_per_s": 3900.0}})
    v.add(sixteen, {"loader": {"samples_per_s": 4000.0}})
    assert v.predict(fifteen) == pytest.approx(3900.0 * 64 / 15 / 5) and v.predict(sixteen) == 4000.0
    assert v.predict(sixteen) > v.predict(fifteen)
    by_index = Valuation()  # a data set read by index: every worker busy to the epoch's end
    by_index.add(fifteen, {"step": {"samples_per_s": 5000.0}, "loader": {"samples_per_s": 3900.0}})
    assert by_index.predict(fifteen) == 3900.0


@pytest.mark.steady
def test_a_search_values_configs_from_their_parts_and_labels_every_predicted_rate(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from study.test_search import FakePool

    from autotune.options import SearchOptions
    from autotune.procs.trial_process import Outcome
    from autotune.study import pools, search
    from autotune.study.setup import open_study, prepare

    FakePool.runs = []
    monkeypatch.setattr(pools, "TrialPool", FakePool)

    def fake_parts(self: FakePool, config: Config, lr: float, which: list[str], timeout_s: float) -> Outcome:
        # The fake loop's rate is its step's; its loader is ten times faster. Loop and parts agree: error 0.
        step = FakePool.rate(config)
        made = {"step": {"samples_per_s": step}, "loader": {"samples_per_s": 10 * step}}
        return Outcome("complete", result={part: made[part] for part in which})

    monkeypatch.setattr(FakePool, "parts", fake_parts)
    lines: list[str] = []
    search("tiny", SearchOptions(trials=30, seed=3, finalists=1, rounds=1, parity_check=False), echo=lines.append)
    trials = open_study(prepare("tiny", SearchOptions(trials=30, parity_check=False), echo=lambda line: None)).study
    # A config valued once is not valued again: a later trial of it is a duplicate that keeps its reason.
    valued = [t for t in trials.trials if str(t.user_attrs.get("reason") or "").startswith(VALUED)
              and "duplicate_of" not in t.user_attrs]
    measured = [t for t in trials.trials if "prediction_error" in t.user_attrs]
    assert valued and measured
    assert all(t.state.name == "PRUNED" and "duration_s" not in t.user_attrs and t.value is None for t in valued)
    assert all(t.user_attrs["predicted_samples_per_s"] > 0 for t in valued + measured)
    record = trials.user_attrs["valuation"]
    assert record["configs_ruled_out"] == len(valued) and record["configs_measured"] == len(measured)
    # Measured over predicted: 1 where the loader overlaps the step (workers, or the data on the device), 1.1 where
    # one process does both in turn (the fake loop does not pay for its loader); most measured configs overlap.
    # (Each error is against the factor known when it was made: after the baseline alone, 1.1.)
    assert record["interference_factor"] == 1.0
    assert sorted({round(e, 3) for e in record["errors"]}) == sorted({round(e, 3) for e in (
        t.user_attrs["prediction_error"] for t in measured)})
    said = [line for line in lines if line.startswith("valuation: ")]
    assert len(said) == 1 and f"{len(valued)} ruled out by their predicted rate" in said[0]
    assert any(line.startswith("[") and VALUED in line for line in lines)


class TimingOut:
    """A pool whose every part measurement runs out of its time."""

    asked: list[float] = []

    def parts(self, config: Config, lr: float, which: list[str], timeout_s: float) -> Outcome:
        TimingOut.asked.append(timeout_s)
        return Outcome("failed", reason=f"timeout: no result within {timeout_s:g} s")


def test_a_part_gets_the_time_the_budget_has_left_and_a_timeout_that_cut_short_is_not_its_failure() -> None:
    from types import SimpleNamespace

    from autotune.study.clock.deadline import MIN_PART_S, part_timeout

    def setup(budget_s: float | None, elapsed_s: float, trial_timeout_s: float = 90.0) -> SimpleNamespace:
        # No trial complete yet: the end of the search costs nothing so far (deadline.reserve_s), all is left.
        return SimpleNamespace(options=SimpleNamespace(trial_timeout_s=trial_timeout_s, time_budget_s=budget_s),
                               elapsed=lambda: elapsed_s, study=SimpleNamespace(get_trials=lambda **kw: []))

    assert part_timeout(setup(None, 500.0)) == (90.0, False)
    assert part_timeout(setup(150.0, 100.0)) == (50.0, True)
    assert part_timeout(setup(150.0, 10.0), stage_left_s=12.5) == (12.5, True)  # the plan's own share left
    assert part_timeout(setup(150.0, 149.0)) == (MIN_PART_S, True)
    assert part_timeout(setup(150.0, 149.0, trial_timeout_s=3.0)) == (3.0, False)  # never past the trial's own
    valuation, config = Valuation(), Config(batch_size=32)
    why = valuation.measure(TimingOut(), config, 0.1, *part_timeout(setup(150.0, 100.0)))
    assert why == "timeout: no result within 50 s" and valuation.failure(config) is None  # asked again later
    assert valuation.measure(TimingOut(), config, 0.1, 90.0) == "timeout: no result within 90 s"
    assert valuation.failure(config) == "timeout: no result within 90 s"  # a whole trial's time: it failed
    assert TimingOut.asked == [50.0, 90.0]
    # A trial whose parts the clock cut short is not then measured whole, past the budget: it says why it did not run.
    from autotune.study.clock.deadline import OUT_OF_TIME
    from autotune.study.planning import skip

    trial = SimpleNamespace(user_attrs={}, set_user_attr=lambda k, v: None)
    spared = skip.valued(setup(150.0, 120.0), trial, Config(batch_size=64), 0.1, TimingOut(), Valuation())
    assert spared is not None and spared.state == "pruned"
    assert spared.reason == (f"{OUT_OF_TIME}: the search's time ran out while its parts were measured (timeout: no "
                             f"result within 30 s)")


def test_a_step_part_s_compile_served_by_an_earlier_part_s_caches_is_not_taken_as_the_whole_compile() -> None:
    # The compiled seed, then its step with the graph flipped: the same model traced again in the same process,
    # served by what the first left. ResNet-50 on an H100: 41.5 s cold, 1.8 s again.
    compiled = Config(256, num_workers=15, amp="bf16", cuda_graph=True, compile="default")
    flipped = Config(256, num_workers=15, amp="bf16", compile="default")
    valuation = Valuation()
    valuation.add(compiled, {"step": {"samples_per_s": 5_731.0, "compile_s": 41.5, "recompile_s": 1.8}})
    valuation.add(flipped, {"step": {"samples_per_s": 5_600.0, "compile_s": 2.4, "recompile_s": 1.7}})
    assert valuation.compiles == {"default": 41.5}
    assert valuation.recompiles == {step_key(compiled): 1.8, step_key(flipped): 1.7}
