"""bucketing and pad_multiple in the space, the trial line, the tuned file, `autotune show`, parity and memory."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import optuna
import pytest

from autotune.config import Config
from autotune.knobs import DataFacts, Machine, SpaceError
from autotune.parity import verdict as parity
from autotune.study.planning import memory
from autotune.study.space.domains import build_space, parse_fix
from autotune.study.space.seeds import seed_configs
from autotune.tuned import file as tuned_file
from autotune.tuned.schema import validate
from autotune.tuned.show import render
from autotune.workloads import load, resolve

GPU = Machine("NVIDIA H200", cuda=True, cpu_share=16, amp_dtypes=("bf16", "fp16"), memory_bytes=140 * 2**30)
TEXT = DataFacts(
    size=32_768, sample_bytes=600, image_4d=False, static_shapes=False, deterministic=True, device_dataset=False,
    varying="batch['input_ids']: shape (8, 198) vs (8, 72)", unstackable="rows differ in shape",
    pad_refused="", bucket_refused="",
)


def test_both_knobs_are_offered_when_the_facts_allow_them() -> None:
    space = build_space(32, GPU, TEXT)
    assert space.domains["bucketing"] == (False, True) and space.domains["pad_multiple"] == (0, 8, 64)
    assert "bucketing" not in space.excluded and "pad_multiple" not in space.excluded
    assert "bucketing: off/on" in space.describe() and "pad_multiple: off/8/64" in space.describe()


def test_each_is_left_out_with_the_reason_the_facts_give() -> None:
    facts = dataclasses.replace(
        TEXT, pad_refused="the workload's collate_fn takes no keyword argument pad_to_multiple_of",
        bucket_refused="the workload gives no sample_lengths(dataset)",
    )
    space = build_space(32, GPU, facts)
    assert space.excluded["pad_multiple"] == "the workload's collate_fn takes no keyword argument pad_to_multiple_of"
    assert space.excluded["bucketing"] == "the workload gives no sample_lengths(dataset)"
    assert space.domains["pad_multiple"] == (0,) and space.domains["bucketing"] == (False,)
    with pytest.raises(SpaceError, match=r"--fix bucketing: on is outside its domain \{off\} \(bucketing is left out "
                                         r"here: the workload gives no sample_lengths\(dataset\)\)\."):
        build_space(32, GPU, facts, {"bucketing": (True,)})


def test_they_are_asked_for_only_for_a_streamed_data_set() -> None:
    space = build_space(32, GPU, dataclasses.replace(TEXT, unstackable=""))
    flags = dict(cudnn_benchmark=False, amp="off", pin_memory=False, num_workers=0, compile="off")
    trial = optuna.trial.FixedTrial(dict(placement="stream", batch_size=256, bucketing=True, pad_multiple=64, **flags))
    assert space.suggest(trial) == Config(batch_size=256, bucketing=True, pad_multiple=64)
    assert {"bucketing", "pad_multiple"} <= set(trial.params)
    trial = optuna.trial.FixedTrial(
        dict(placement="device", batch_size=256, cudnn_benchmark=False, amp="off", compile="off"))
    assert space.suggest(trial) == Config(batch_size=256, placement="device")
    assert not {"bucketing", "pad_multiple"} & set(trial.params)
    config = Config(batch_size=256, bucketing=True, pad_multiple=8)
    assert space.suggest(optuna.trial.FixedTrial(space.params(config))) == config
    # On the device the data set's own order and shapes are sliced: both knobs fall back to off.
    assert space.normalise(dataclasses.replace(config, placement="device")) == Config(256, placement="device")


def test_fixes_parse_off_and_multiples() -> None:
    assert parse_fix("pad_multiple=off,64") == ("pad_multiple", (0, 64))
    assert parse_fix("bucketing=on") == ("bucketing", (True,))
    with pytest.raises(SpaceError, match=r"--fix pad_multiple: 16 is outside its domain \{off, 8, 64\}\."):
        build_space(32, GPU, TEXT, {"pad_multiple": parse_fix("pad_multiple=16")[1]})


def test_the_trial_line_names_both() -> None:
    config = Config(batch_size=256, num_workers=4, bucketing=True, pad_multiple=64, amp="bf16")
    assert config.describe() == "bs=256 workers=4 bucketed pad=64 bf16"


def test_seeds_try_bucketed_padded_loops_only_where_the_space_has_them() -> None:
    workload = load(resolve("text_transformer"))
    seeds = seed_configs(workload, GPU, build_space(32, GPU, TEXT))
    bucketed = [c for c in seeds if c.bucketing]
    assert [(c.batch_size, c.amp, c.pad_multiple) for c in bucketed] == [
        (32, "bf16", 64), (32, "off", 64), (256, "bf16", 64), (256, "off", 64)
    ]
    plain = dataclasses.replace(TEXT, pad_refused="no", bucket_refused="no")
    assert not any(c.bucketing or c.pad_multiple for c in seed_configs(workload, GPU, build_space(32, GPU, plain)))


def _profile(config: Config) -> dict:
    return {
        "samples_per_s": 2000.0, "baseline_samples_per_s": 500.0, "speedup": 4.0,
        "knobs": tuned_file.config_to_knobs(config), "versions": {"torch": "2.14.1"},
    }


def test_the_tuned_file_stores_both_and_show_prints_them(tmp_path: Path) -> None:
    path = tmp_path / "text.tuned.toml"
    config = Config(batch_size=256, num_workers=4, prefetch_factor=2, bucketing=True, pad_multiple=64)
    tuned_file.write_profile(path, "text", "NVIDIA H200", _profile(config))
    data = tuned_file.read(path)
    assert tuned_file.knobs_to_config(data["profiles"]["NVIDIA H200"]["knobs"]) == config
    lines = render(data, path).splitlines()
    assert [line.split() for line in lines if line.startswith(("bucketing", "pad_multiple"))] == [
        ["bucketing", "on"], ["pad_multiple", "64"]
    ]
    tuned_file.write_profile(path, "text", "cpu", _profile(Config(batch_size=32)))
    lines = render(tuned_file.read(path), path).splitlines()
    assert [line.split() for line in lines if line.startswith("pad_multiple")] == [["pad_multiple", "64", "off"]]


def test_the_schema_checks_both_and_accepts_files_written_before_them() -> None:
    old = _profile(Config(batch_size=32))
    del old["knobs"]["bucketing"], old["knobs"]["pad_multiple"]
    assert validate({"schema": 1, "profiles": {"cpu": old}}) == []
    bad = _profile(Config(batch_size=32))
    bad["knobs"].update(pad_multiple=-8, bucketing="yes")
    assert validate({"schema": 1, "profiles": {"cpu": bad}}) == [
        "profiles.'cpu'.knobs.pad_multiple must be in 0..4096 (0: off), but got -8",
        "profiles.'cpu'.knobs.bucketing must be bool, but got 'yes'",
    ]


def test_parity_judges_both_as_numerics_that_change_the_math() -> None:
    baseline = Config(batch_size=32)
    for config in (Config(batch_size=32, bucketing=True), Config(batch_size=32, pad_multiple=8)):
        assert parity.family(baseline, config) == "numerics"
        assert parity.changes_math(baseline, config) == [k for k in ("bucketing", "pad_multiple") if
                                                         getattr(config, k) != getattr(baseline, k)]
        assert parity.numerics(config) != parity.numerics(baseline)


@pytest.mark.parametrize(("failed", "config", "skipped"), [
    (Config(256, bucketing=True), Config(256), False),  # random batches may stay shorter than bucketed ones
    (Config(256), Config(256, bucketing=True), True),
    (Config(256, pad_multiple=8), Config(256, pad_multiple=64), True),  # 64 pads at least as far as 8
    (Config(256, pad_multiple=64), Config(256, pad_multiple=8), False),
    (Config(256, pad_multiple=8), Config(256), False),
])
def test_memory_skips_follow_how_far_a_config_pads(failed: Config, config: Config, skipped: bool) -> None:
    assert memory.holds_at_least(config, failed) == skipped
