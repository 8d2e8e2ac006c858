"""The `compile` knob in the space, the failures a search learns from, parity, the tuned file, the trial's limits."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import optuna
import pytest

from autotune.config import COMPILE_ALLOWANCE_S, COMPILE_CHOICES, Config
from autotune.knobs import DataFacts, Machine, SpaceError
from autotune.parity.check import ParityCheck
from autotune.parity.numerics import NumericsVerdict, judge, label
from autotune.parity.run import ParityRun
from autotune.parity.verdict import changes_math, family
from autotune.procs import compile_cache
from autotune.study.failed.hopeless import Finished, blocks, hopeless_values
from autotune.study.space.domains import build_space, parse_fix
from autotune.tuned.file import knobs_to_config
from autotune.tuned.schema import SCHEMA_VERSION, validate

GPU = Machine("NVIDIA H200", cuda=True, cpu_share=16, amp_dtypes=("bf16", "fp16"), memory_bytes=140 * 2**30)
NO_TRITON = dataclasses.replace(
    GPU, compiler_missing="Inductor needs the triton package to compile for a CUDA device, and it is not installed")
CPU = Machine("cpu", cuda=False, cpu_share=2, amp_dtypes=("bf16",), memory_bytes=24 * 2**30)
IMAGES = DataFacts(size=60_000, sample_bytes=3136, image_4d=True, static_shapes=True, deterministic=True,
                   device_dataset=False)
BREAK = ("compile: graph break (2 in the step; Dynamo stopped at /r/w.py, line 46: `if loss > 1e6:`: Data-dependent "
         "branching): a compiled step must be one graph; change that line (no Python branch on a tensor, no .item()), "
         "or leave compile off")


def test_the_space_lists_its_values_on_a_gpu_and_leaves_it_out_with_a_reason_elsewhere() -> None:
    assert build_space(128, GPU, IMAGES).domains["compile"] == ("off", "default", "max-autotune-no-cudagraphs")
    assert "compile: off/default/max-autotune-no-cudagraphs" in build_space(128, GPU, IMAGES).describe()
    assert build_space(128, CPU, IMAGES).excluded["compile"] == "needs CUDA"
    space = build_space(128, NO_TRITON, IMAGES)
    assert (space.excluded["compile"], space.domains["compile"]) == (NO_TRITON.compiler_missing, ("off",))
    with pytest.raises(SpaceError, match=r"--fix compile: default is outside its domain \{off\} \(compile is left "
                                         r"out here: Inductor needs the triton package"):
        build_space(128, NO_TRITON, IMAGES, {"compile": ("default",)})


def test_shapes_that_vary_leave_cuda_graph_out_but_compile_in() -> None:
    text = dataclasses.replace(IMAGES, image_4d=False, static_shapes=False, varying="lengths 16..512")
    space = build_space(32, GPU, text)
    assert "cuda_graph" in space.excluded and "compile" not in space.excluded


def test_a_fix_parses_and_a_config_round_trips_through_the_sampler() -> None:
    assert parse_fix("compile=off,default") == ("compile", ("off", "default"))
    space = build_space(128, GPU, IMAGES, {"compile": ("default", "max-autotune-no-cudagraphs")})
    config = Config(batch_size=256, placement="device", cuda_graph=True, amp="bf16", compile="default")
    params = space.params(config)
    assert params is not None and params["compile"] == "default"
    assert space.suggest(optuna.trial.FixedTrial(params)) == config
    assert config.describe() == "bs=256 device-resident graph bf16 compile=default"


def test_seeds_compile_only_where_the_space_may(project: Path) -> None:
    from autotune.study.space.seeds import seed_configs
    from autotune.workloads import load, resolve

    workload = load(resolve("tiny"))
    seeds = seed_configs(workload, GPU, build_space(16, GPU, dataclasses.replace(IMAGES, size=4096)))
    assert [c.describe() for c in seeds if c.compile != "off"] == [
        "bs=16 device-resident cudnn.benchmark graph bf16 compile=default",
        "bs=16 workers=15 pinned persistent prefetch=4 cudnn.benchmark channels_last graph bf16 compile=default",
    ]
    without = seed_configs(workload, NO_TRITON, build_space(16, NO_TRITON, dataclasses.replace(IMAGES, size=4096)))
    assert [c.compile for c in without] == ["off"] * (len(seeds) - 2)


def finished(number: int, reason: str | None, **knobs: object) -> Finished:
    config = {**Config(batch_size=16).as_dict(), **knobs}
    return Finished(number, config, ran=reason is None, reason=reason)


def test_a_graph_break_rules_out_every_mode_with_its_batch_layout_after_one_failure() -> None:
    found = hopeless_values([finished(0, None), finished(1, BREAK, compile="default", amp="bf16")])
    layout = (("placement", "stream"), ("channels_last", False), ("device_normalize", False))
    assert [h.values for h in found] == [(("compile", "default"), *layout),
                                         (("compile", "max-autotune-no-cudagraphs"), *layout)]
    assert found[0].short() == ("compile=default with placement=stream with channels_last=off with "
                                "device_normalize=off cannot compile this workload's step as one graph (1)")
    assert found[0].reason == BREAK
    assert blocks(Config(batch_size=64, compile="max-autotune-no-cudagraphs").as_dict(), found) is found[1]
    assert blocks(Config(batch_size=64).as_dict(), found) is None
    # A channels_last batch (mnist_cnn's `view` broke on one) says nothing of a contiguous one, on the device.
    assert blocks(Config(batch_size=64, compile="default", channels_last=True).as_dict(), found) is None
    assert blocks(Config(batch_size=64, compile="default", placement="device").as_dict(), found) is None


def test_a_graph_break_in_a_second_batch_layout_rules_out_every_mode() -> None:
    found = hopeless_values([finished(0, None), finished(1, BREAK, compile="default", channels_last=True),
                             finished(2, BREAK, compile="default", placement="device")])
    assert [h.values for h in found] == [(("compile", "default"),), (("compile", "max-autotune-no-cudagraphs"),)]
    assert blocks(Config(batch_size=64, compile="default", device_normalize=True).as_dict(), found) is found[0]


def test_recompiles_rule_out_compile_at_those_shapes_only() -> None:
    reason = "compile: recompiled: 8 graphs, Dynamo's limit of 8 (it runs any further call eagerly): ..."
    found = hopeless_values([finished(3, reason, compile="default", pad_multiple=0)])
    assert [h.values for h in found] == [
        (("compile", mode), ("pad_multiple", 0), ("bucketing", False)) for mode in COMPILE_CHOICES[1:]]
    assert blocks(Config(batch_size=16, compile="default").as_dict(), found) is found[0]
    assert blocks(Config(batch_size=16, compile="default", pad_multiple=64, bucketing=True).as_dict(), found) is None


def test_a_compiler_error_rules_out_its_own_mode() -> None:
    reason = "compile: compiler error (max-autotune-no-cudagraphs): RuntimeError: ...; leave compile=... off"
    found = hopeless_values([finished(5, reason, compile="max-autotune-no-cudagraphs")])
    assert [(h.values, h.rule) for h in found] == [
        ((("compile", "max-autotune-no-cudagraphs"),), "failed to compile")]
    assert blocks(Config(batch_size=16, compile="default").as_dict(), found) is None


def test_compile_changes_the_math_and_is_judged_as_numerics() -> None:
    base, compiled = Config(batch_size=16), Config(batch_size=16, compile="default", num_workers=4)
    assert changes_math(base, compiled) == ["compile"]
    assert family(base, compiled) == "numerics"
    assert label(compiled) == "off with compile=default" and label(Config(batch_size=16, amp="bf16")) == "bf16"


def inconclusive_run(config: Config, lr: float, samples: int) -> ParityRun:
    """Random labels: every run, the baseline's included, learns 0.4% of its initial loss 2.0."""
    return ParityRun(config.batch_size, lr, 2.0, 1.992, (samples,), (1.992,), True, 0.0)


def test_an_inconclusive_check_judges_compile_and_amp_together_by_one_gradient_check() -> None:
    base = Config(batch_size=16)
    compiled = Config(batch_size=16, compile="default")
    both = Config(batch_size=16, compile="default", amp="bf16")
    larger = Config(batch_size=64, compile="default")
    checked: list[Config] = []

    def check_numerics(config: Config) -> NumericsVerdict:
        checked.append(config)
        return judge({"error": 0.1 if config.amp == "off" else 0.4, "noise": 1.0, "signal": 0.5, "finite": True,
                      "batches": 8, "batch_size": 16, "seconds": 2.0}, label(config))

    lines: list[str] = []
    gate = ParityCheck(base, lambda c: 0.05, inconclusive_run, [compiled], lines.append,
                       check_numerics=check_numerics)
    passed = gate.select([larger, compiled, both], want=3, max_runs=5)
    assert checked == [compiled, both], "one check each; a new batch size is judged by a run alone"
    assert passed == [compiled]
    assert gate.verdicts[both].word == "REJECT" and gate.verdicts[larger].word == "inconclusive"
    assert ("  numerics FAIL   bf16 with compile=default's gradients are beyond the batch's own noise: their error is "
            "0.4x the variance of fp32's gradient from batch to batch (limit 0.25x), 8 batches of 16  [2.0 s]") in lines


def profile(**knobs: object) -> dict:
    base = dict(batch_size=256, num_workers=15, pin_memory=True, persistent_workers=True, prefetch_factor=4,
                cudnn_benchmark=True, channels_last=True, amp="bf16", cuda_graph=False, placement="stream")
    return {"schema": SCHEMA_VERSION, "recipe": "imagenet_resnet50", "profiles": {"NVIDIA H200": {
        "samples_per_s": 6000.0, "baseline_samples_per_s": 1000.0, "speedup": 6.0, "cpu_share": 16,
        "knobs": {**base, **knobs}, "versions": {}}}}


def test_the_tuned_file_takes_it_and_an_older_file_without_it_reads_as_off() -> None:
    assert validate(profile(compile="default")) == [] and validate(profile()) == []
    assert validate(profile(compile="reduce-overhead")) == [
        "profiles.'NVIDIA H200'.knobs.compile must be one of off, default, max-autotune-no-cudagraphs, "
        "but got 'reduce-overhead'"]
    assert knobs_to_config(profile()["profiles"]["NVIDIA H200"]["knobs"]).compile == "off"
    knobs = profile(compile="max-autotune-no-cudagraphs")["profiles"]["NVIDIA H200"]["knobs"]
    assert knobs_to_config(knobs).compile == "max-autotune-no-cudagraphs"


def test_every_mode_has_a_compile_allowance_and_off_none() -> None:
    assert set(COMPILE_ALLOWANCE_S) == set(COMPILE_CHOICES) and COMPILE_ALLOWANCE_S["off"] == 0.0


def test_trial_processes_share_a_compile_cache_in_the_search_s_state_directory(tmp_path: Path) -> None:
    env = compile_cache.environment(tmp_path / ".autotune", Path("recipes/mnist_cnn.py"), base={"PATH": "/bin"})
    assert env == {"PATH": "/bin", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / ".autotune/compile_cache/mnist_cnn")}
    mine = {"TORCHINDUCTOR_CACHE_DIR": "/mine"}
    assert compile_cache.environment(tmp_path, Path("w.py"), base=mine) == mine  # the user's own wins


def test_a_search_names_a_graph_break_once_skips_compile_after_it_and_reports_it(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search around the trials, with compile in the space as on a GPU and every compiling trial breaking."""
    from autotune.options import SearchOptions
    from autotune.procs.trial_process import Outcome
    from autotune.reporting.trials import failure_groups
    from autotune.study import pools, search, setup
    from autotune.study.clock.deadline import GIVE_UP_FACTOR, GIVE_UP_MARGIN_S
    from autotune.study.space.domains import Space

    def with_compile(*args: object, **kwargs: object) -> Space:
        space = build_space(*args, **kwargs)  # type: ignore[arg-type]
        excluded = {k: v for k, v in space.excluded.items() if k != "compile"}
        return Space({**space.domains, "compile": COMPILE_CHOICES}, excluded)

    class Breaks:
        startup_s = 0.0
        runs: list[Config] = []
        give_up: list[float | None] = []

        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def run(self, config: Config, lr: float, *args: object, give_up_s: float | None = None,
                **kwargs: object) -> Outcome:
            Breaks.runs.append(config)
            Breaks.give_up.append(give_up_s)
            if config.compile != "off":
                return Outcome("failed", reason=BREAK)
            rate = 1000.0 + config.batch_size
            return Outcome("complete", windows=(rate,), result=dict(
                samples_per_s=rate, steady_samples_per_s=rate, spread=0.01, step_s=config.batch_size / rate,
                epoch_s=512 / rate, setup_s=0.5, materialize_s=0.0, stopped_early=False))

        def parts(self, config: Config, lr: float, which: list[str], timeout_s: float) -> Outcome:
            return Outcome("failed", reason="error: no parts in this fake")  # every config runs end to end

        def prestart(self, n: int) -> None:
            pass

        ask_to_exit = stop = kill = lambda self: None

    monkeypatch.setattr(setup, "build_space", with_compile)
    monkeypatch.setattr(pools, "TrialPool", Breaks)
    lines: list[str] = []
    options = SearchOptions(trials=12, seed=1, parity_check=False, rounds=1, time_budget_s=None)
    search("tiny", options, echo=lines.append)
    # One break per batch layout, at most two: the first rules compile out with its layout, the second everywhere.
    compiled = [c for c in Breaks.runs if c.compile != "off"]
    assert len(compiled) == 2 and len({(c.placement, c.channels_last, c.device_normalize) for c in compiled}) == 2, [
        c.describe() for c in Breaks.runs]
    # While it compiles a trial sends no window: it is given up only past the best run's time and the allowance.
    compiling = next(i for i, c in enumerate(Breaks.runs) if c.compile != "off")
    epochs = 2  # tests/fixtures/tiny.py's declared run: setup_s, then 2 epochs of 512 samples
    best_run_s = 0.5 + epochs * 512 / (1000.0 + max(c.batch_size for c in Breaks.runs[:compiling]))
    assert Breaks.give_up[compiling] == pytest.approx(
        GIVE_UP_FACTOR * best_run_s + GIVE_UP_MARGIN_S + COMPILE_ALLOWANCE_S[Breaks.runs[compiling].compile])
    trials = setup.open_study(setup.prepare("tiny", options, echo=lambda line: None)).study.get_trials()
    broke = [t for t in trials if t.user_attrs.get("reason") == BREAK]
    assert len(broke) == 2
    assert (f"  not trying again: compile=default cannot compile this workload's step as one graph "
            f"({broke[0].number}): {BREAK}") in lines
    skipped = [t for t in trials if str(t.user_attrs.get("reason", "")).startswith("skipped: compile=")]
    assert all(t.number > broke[1].number for t in skipped)
    groups = [g for g in failure_groups(trials) if g.state == "failed"]
    assert [(g.reason, g.trials) for g in groups if g.reason == BREAK] == [(BREAK, tuple(t.number for t in broke))]
