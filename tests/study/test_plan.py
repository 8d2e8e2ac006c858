"""The plan: a grid valued from its parts after the baseline, the fastest measured next, the rest recorded."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _pools import FakePool, ran
from optuna.trial import TrialState

from autotune.config import COMPILE_CHOICES, Config
from autotune.knobs import DataFacts, Machine
from autotune.options import SearchOptions
from autotune.procs.trial_process import Outcome
from autotune.study.planning.valuation import VALUED
from autotune.study.space.domains import Space, build_space


def step_rate(config: Config) -> float:
    """A fake step: larger batches, the compiler and amp each faster."""
    return 1000.0 + 10.0 * config.batch_size + (400.0 if config.compile != "off" else 0.0) + (
        150.0 if config.amp != "off" else 0.0)


def loader_rate(config: Config) -> float:
    """A fake loader: each worker makes 700 samples/s; the device-resident data set is not a limit."""
    return 1e9 if config.placement == "device" else 700.0 * max(1, config.num_workers) + 5.0 * config.prefetch_factor \
        if config.prefetch_factor else 700.0 * max(1, config.num_workers)


def true_rate(config: Config) -> float:
    return 0.9 * min(step_rate(config), loader_rate(config))  # a tenth lost to interference, the same everywhere


class Rates(FakePool):
    """A trial pool whose parts and whole loops run at the fake rates above."""

    runs: list[Config] = []
    parts_asked: list[tuple[Config, tuple[str, ...]]] = []
    compile_s = 0.0  # what a compiled step's first steps take, in its step part and its trial

    def run(self, config: Config, lr: float, *args: object, **kwargs: object) -> Outcome:
        Rates.runs.append(config)
        return ran(config, true_rate(config), Rates.compile_s if config.compile != "off" else 0.0)

    def parts(self, config: Config, lr: float, which: list[str], timeout_s: float) -> Outcome:
        Rates.parts_asked.append((config, tuple(which)))
        made = {"step": step_rate(config), "loader": loader_rate(config)}
        took = {"step": Rates.compile_s if config.compile != "off" else 0.0, "loader": 0.0}
        return Outcome("complete", result={w: {"samples_per_s": made[w], "spread": 0.01, "compile_s": took[w]}
                                           for w in which})


@pytest.fixture
def rates(project: Path, monkeypatch: pytest.MonkeyPatch) -> type[Rates]:
    from autotune.study import pools, setup

    def with_compile(*args: object, **kwargs: object) -> Space:
        space = build_space(*args, **kwargs)  # type: ignore[arg-type]
        excluded = {k: v for k, v in space.excluded.items() if k != "compile"}
        return Space({**space.domains, "compile": COMPILE_CHOICES}, excluded)

    monkeypatch.setattr(setup, "build_space", with_compile)
    monkeypatch.setattr(pools, "TrialPool", Rates)
    Rates.runs, Rates.parts_asked, Rates.compile_s = [], [], 0.0
    return Rates


def test_the_plan_values_a_grid_measures_its_fastest_next_and_records_the_rest(rates: type[Rates]) -> None:
    from autotune.study import search, setup
    from autotune.study.planning.plan import MEASURE_AT_MOST, PLAN_ATTRIBUTE

    lines: list[str] = []
    options = SearchOptions(trials=16, seed=1, parity_check=False, rounds=1, time_budget_s=None)
    search("tiny", options, echo=lines.append)
    study = setup.open_study(setup.prepare("tiny", options, echo=lambda line: None)).study
    plan = study.user_attrs[PLAN_ATTRIBUTE]
    valued = [t for t in study.get_trials() if t.user_attrs.get("role") == "valued"]
    # Every grid config is valued; all but the queued ones are recorded unmeasured, pruned, with the predicted rate.
    assert plan["valued"] == plan["queued"] + len(valued) and plan["valued"] >= 20, plan
    assert 1 <= plan["queued"] <= MEASURE_AT_MOST
    assert all(t.state == TrialState.PRUNED and str(t.user_attrs["reason"]).startswith(VALUED)
               and t.user_attrs["predicted_samples_per_s"] > 0 for t in valued)
    # The queued configs are measured right after the baseline, the fastest prediction first.
    queued = Rates.runs[1:1 + plan["queued"]]
    predicted = [true_rate(c) / 0.9 for c in queued]
    assert predicted == sorted(predicted, reverse=True), [c.describe() for c in queued]
    # Nothing recorded unmeasured is faster than what was measured: the prediction is exact here, up to its factor.
    best_measured = max(true_rate(c) for c in Rates.runs)
    assert all(t.user_attrs["predicted_samples_per_s"] <= best_measured * 1.001 for t in valued)
    # --trials counts measurements: the recorded configs are not trials taken.
    measured = [t for t in study.get_trials() if t.user_attrs.get("role") != "valued"]
    ended = [line for line in lines if line.startswith("search: no trial of the last 12 found")]
    assert len(measured) == 16 or (len(measured) < 16 and len(ended) == 1), (len(measured), ended)  # said once
    assert any(line.startswith(f"plan: {plan['valued']} config(s) valued in ") and
               f"measuring the {plan['queued']} predicted fastest end to end next" in line for line in lines), lines
    summary = next(line for line in lines if line.startswith("valuation: "))
    valued_in_all = int(summary.split()[1])  # the plan's grid and the trials valued one by one after it
    assert valued_in_all >= plan["valued"] and "interference factor 0.90" in summary, summary


def test_a_compile_longer_than_the_best_whole_run_rules_out_every_compiled_config_after_it(rates: type[Rates]) -> None:
    """tiny's declared run (2 epochs of 512 samples) takes about a second at its best; its step compiles in 30 s.
    Once one compile has been timed (the plan's first compiled step part), no other compiled step is compiled or
    measured, and each compiled config the search proposes says why it was not run."""
    from autotune.study import search, setup
    from autotune.study.planning.compile_cost import CANNOT_PAY

    Rates.compile_s = 30.0
    lines: list[str] = []
    options = SearchOptions(trials=24, seed=1, parity_check=False, rounds=1, time_budget_s=None)
    search("tiny", options, echo=lines.append)
    compiled_parts = [(c, which) for c, which in Rates.parts_asked if c.compile != "off" and "step" in which]
    assert len(compiled_parts) == 1, [c.describe() for c, _ in compiled_parts]
    assert [c for c in Rates.runs if c.compile != "off"] == []
    study = setup.open_study(setup.prepare("tiny", options, echo=lambda line: None)).study
    skipped = [t for t in study.get_trials() if str(t.user_attrs.get("reason")).startswith(CANNOT_PAY)]
    assert skipped and all(t.state == TrialState.PRUNED for t in skipped)
    best = min((t for t in study.get_trials(states=(TrialState.COMPLETE,))),
               key=lambda t: 2 * t.user_attrs["result"]["epoch_s"])
    run_s = 2 * best.user_attrs["result"]["epoch_s"]
    reason = str(skipped[-1].user_attrs["reason"])
    assert reason == (f"{CANNOT_PAY}: compiling this model's step took 30.0 s (a step part, compile=default), longer "
                      f"than the best config's whole declared run (2 epoch(s) in {run_s:.1f} s, trial {best.number})")
    assert any(f"trial {skipped[-1].number:<3} {CANNOT_PAY}" in line for line in lines)


def test_a_compile_shorter_than_the_best_whole_run_is_measured(rates: type[Rates]) -> None:
    """The same search with a compile of 10 ms: the compiled configs, predicted fastest, are measured and win."""
    from autotune.study import search

    Rates.compile_s = 0.01
    search("tiny", SearchOptions(trials=24, seed=1, parity_check=False, rounds=1, time_budget_s=None),
           echo=lambda line: None)
    assert Rates.runs[1].compile != "off"  # the plan's fastest prediction, measured first after the baseline


def test_a_search_asked_for_few_trials_makes_no_plan(rates: type[Rates]) -> None:
    from autotune.study import search, setup
    from autotune.study.planning.plan import PLAN_ATTRIBUTE

    options = SearchOptions(trials=6, seed=1, parity_check=False, rounds=1, time_budget_s=None)
    search("tiny", options, echo=lambda line: None)
    study = setup.open_study(setup.prepare("tiny", options, echo=lambda line: None)).study
    assert PLAN_ATTRIBUTE not in study.user_attrs
    assert not [t for t in study.get_trials() if t.user_attrs.get("role") == "valued"]


def test_a_resumed_search_does_not_plan_again(rates: type[Rates]) -> None:
    from autotune.study import search

    options = SearchOptions(trials=16, seed=1, parity_check=False, rounds=1, time_budget_s=None)
    search("tiny", options, echo=lambda line: None)
    asked = len(Rates.parts_asked)
    lines: list[str] = []
    search("tiny", SearchOptions(trials=20, seed=1, parity_check=False, rounds=1, time_budget_s=None),
           echo=lines.append)
    assert not any(line.startswith("plan: valuing") for line in lines)
    assert len(Rates.parts_asked) - asked <= 4 * 2  # only the new trials' own parts, two each at most
    # The resumed run's trials were all measured or repeats: it valued none itself, and says whose the values are.
    summary = lines.index(next(line for line in lines if line.startswith("valuation: ")))
    assert lines[summary].startswith("valuation: 0 config(s) valued from their parts"), lines[summary]
    assert re.fullmatch(r"  \(this run valued none; the study holds \d+ config\(s\) an earlier run's plan valued\)",
                        lines[summary + 1]), lines[summary:summary + 2]


def test_a_config_whose_step_alone_runs_out_of_memory_fails_without_running_end_to_end(
        rates: type[Rates], monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.study import search, setup

    too_large = "oom: asked for 1.53 GiB more, holding 138.56 GiB; 1.20 GiB of 139.80 GiB free"

    def parts(self: Rates, config: Config, lr: float, which: list[str], timeout_s: float) -> Outcome:
        Rates.parts_asked.append((config, tuple(which)))
        if "step" in which and config.batch_size >= 128:
            return Outcome("failed", reason=too_large)
        made = {"step": step_rate(config), "loader": loader_rate(config)}
        took = {"step": Rates.compile_s if config.compile != "off" else 0.0, "loader": 0.0}
        return Outcome("complete", result={w: {"samples_per_s": made[w], "spread": 0.01, "compile_s": took[w]}
                                           for w in which})

    monkeypatch.setattr(Rates, "parts", parts)
    options = SearchOptions(trials=16, seed=1, parity_check=False, rounds=1, time_budget_s=None)
    search("tiny", options, echo=lambda line: None)
    study = setup.open_study(setup.prepare("tiny", options, echo=lambda line: None)).study
    large = [t for t in study.get_trials() if t.user_attrs.get("config", {}).get("batch_size", 0) >= 128
             and "duplicate_of" not in t.user_attrs]
    # The first fails for its step's memory; those that would hold as much are skipped for it (study.memory).
    assert large[0].state == TrialState.FAIL and large[0].user_attrs["reason"] == too_large
    assert all(t.state == TrialState.FAIL and t.user_attrs["reason"] == too_large or t.state == TrialState.PRUNED
               and str(t.user_attrs["reason"]).startswith("skipped by prediction: it holds at least what trial")
               for t in large), [(t.number, t.state.name, t.user_attrs.get("reason")) for t in large]
    assert not [c for c in Rates.runs if c.batch_size >= 128], "none measured end to end"
    # Each step is asked for once: the plan's failure stands for the trials of its configs.
    steps = [c for c, which in Rates.parts_asked if "step" in which and c.batch_size >= 128]
    from autotune.study.planning.valuation import step_key
    assert len(steps) == len({step_key(c) for c in steps})


def test_a_step_and_a_loader_that_agree_make_a_config_the_parts_value() -> None:
    from autotune.study.planning.plan import combinations
    from autotune.study.planning.valuation import Valuation

    machine = Machine("cpu", cuda=False, cpu_share=4, amp_dtypes=("bf16",), memory_bytes=2**34)
    facts = DataFacts(size=4096, sample_bytes=3136, image_4d=True, static_shapes=True, deterministic=True,
                      device_dataset=False)
    space = build_space(16, machine, facts)
    v = Valuation()
    eager = Config(batch_size=16, num_workers=2, persistent_workers=True, prefetch_factor=2)
    bf16 = Config(batch_size=16, num_workers=4, persistent_workers=True, prefetch_factor=4, amp="bf16")
    other_batch = Config(batch_size=32, num_workers=3, persistent_workers=True, prefetch_factor=2)
    for config in (eager, bf16, other_batch):
        v.add(config, {"step": {"samples_per_s": 1000.0}, "loader": {"samples_per_s": 900.0}})
    made = set(combinations(space, v))
    # Each step with each loader of its batch: the two measured configs and their two crossings; batch 32's own.
    assert made == {eager, bf16, other_batch, Config(**{**eager.as_dict(), "amp": "bf16"}),
                    Config(**{**bf16.as_dict(), "amp": "off"})}


def test_a_config_the_plan_only_valued_is_judged_again_when_proposed_not_taken_as_measured(
        rates: type[Rates]) -> None:
    from autotune.study import search, setup
    from autotune.study.trials import earlier_trial_of

    options = SearchOptions(trials=16, seed=1, parity_check=False, rounds=1, time_budget_s=None)
    search("tiny", options, echo=lambda line: None)
    made = setup.open_study(setup.prepare("tiny", options, echo=lambda line: None))
    trials = made.study.get_trials()
    measured = next(t for t in trials if t.state == TrialState.COMPLETE)
    ran = {made.config_of(t) for t in trials if t.user_attrs.get("role") != "valued" and "config" in t.user_attrs}
    valued = next(t for t in trials if t.user_attrs.get("role") == "valued" and made.config_of(t) not in ran)
    after = len(trials)
    # Never run, so no outcome to reuse: its prediction is judged again, by what the search learned since.
    assert earlier_trial_of(made, after, made.config_of(valued)) is None
    assert earlier_trial_of(made, after, made.config_of(measured)).number == measured.number


def test_the_plan_measures_each_seed_first_and_skips_what_a_measured_part_bounds_under_the_best() -> None:
    """ResNet-50 from JPEGs, in the rates an H100 host measured: the workers' loader (4,400/s) under the eager bf16
    step (4,700/s); the device's decode feeds 6,300/s; compiled, the step runs 6,700/s."""
    from autotune.study.planning.plan import order
    from autotune.study.planning.valuation import Valuation

    feed = dict(batch_size=256, num_workers=15, pin_memory=True, persistent_workers=True, prefetch_factor=4,
                cudnn_benchmark=True, channels_last=True, amp="bf16")
    workers = Config(**feed, device_normalize=True)
    on_device = Config(**feed, decode="gpu")
    compiled_by_workers = Config(**feed, device_normalize=True, cuda_graph=True, compile="default")
    compiled_by_device = Config(**feed, decode="gpu", decode_share=0.5, cuda_graph=True, compile="default")
    fewer_workers = Config(**{**feed, "num_workers": 8}, device_normalize=True)
    groups = [[workers, fewer_workers], [on_device], [compiled_by_workers], [compiled_by_device]]

    def step(config: Config) -> float:
        return 6700.0 if config.compile != "off" else 4700.0

    def loader(config: Config) -> float:
        return {1.0: 6300.0, 0.5: 7400.0}[config.decode_share] if config.decode == "gpu" else 290.0 * config.num_workers

    v = Valuation()
    measured: list[tuple[Config, list[str]]] = []
    for config in order(groups, v):
        missing = v.missing(config)
        measured.append((config, missing))
        v.add(config, {part: {"samples_per_s": (step if part == "step" else loader)(config)} for part in missing})
    # Each seed in turn; the compiled step fed by the workers is never compiled: their loader (4,350/s) bounds it
    # under the eager step fed by the device (4,700/s). One step rate serves both decode paths: the device's seed
    # needs only its loader.
    assert measured == [(workers, ["step", "loader"]), (on_device, ["loader"]),
                        (compiled_by_device, ["step", "loader"])]
    assert v.raw(compiled_by_device) == 6700.0
    # Nor the 8-worker variant: its step is the 15 workers' one, known at 4,700/s, under the best by then (6,700/s).
    assert fewer_workers not in [c for c, _ in measured]


def test_one_step_rate_serves_every_decode_path_and_the_workers_normalising_or_not() -> None:
    from autotune.study.planning.valuation import loader_key, step_key

    base = dict(batch_size=256, num_workers=15, channels_last=True, amp="bf16")
    paths = [Config(**base), Config(**base, device_normalize=True), Config(**base, decode="gpu"),
             Config(**base, decode="gpu", decode_share=0.5)]
    assert len({step_key(c) for c in paths}) == 1
    assert len({loader_key(c) for c in paths}) == 4
    assert step_key(Config(**{**base, "channels_last": False})) != step_key(paths[0])  # the batch's layout is seen
