"""The search around the trials: seeds, failures learnt, finalists, the profile; the expensive trial is faked."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import optuna
import pytest

from autotune.config import Config
from autotune.options import SearchOptions
from autotune.parity.run import ParityRun
from autotune.procs.trial_process import Outcome
from autotune.study import SearchError, pools, search
from autotune.study.checks import baseline_run
from autotune.study.profile import measured_values, spread_of
from autotune.study.setup import open_study, prepare
from autotune.study.space.pruner import ClearlyWorsePruner
from autotune.study.space.seeds import seed_configs
from autotune.tuned import file as tuned_file

# The trials are faked and the search runs in this process, on one thread: these may run beside the alone tests
# (tests/conftest.py).
pytestmark = pytest.mark.steady


class FakePool:
    """Trials without processes: a config's speed is a known function of its knobs; channels_last breaks the model."""

    startup_s = 0.0  # no process starts here: nothing to reserve for a round's

    runs: list[Config] = []

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    @staticmethod
    def rate(config: Config) -> float:
        return config.batch_size * 100.0 + (5000.0 if config.placement == "device" else config.num_workers * 10.0)

    def run(
        self, config: Config, lr: float, windows: object = None, on_window: object = None, fresh: bool = False,
        give_up_s: float | None = None, limit_s: float | None = None,
    ) -> Outcome:
        FakePool.runs.append(config)
        if config.channels_last:
            return Outcome(
                "failed", reason="error: RuntimeError: view size is not compatible with input tensor's size and stride"
            )
        rate = self.rate(config)
        result = dict(
            samples_per_s=rate,
            steady_samples_per_s=rate,
            spread=0.01,
            step_s=config.batch_size / rate,
            epoch_s=512 / rate,
            setup_s=0.5,
            materialize_s=0.0,
            stopped_early=False,
        )
        return Outcome("complete", result=result, windows=(rate,))

    def parity_run(self, config: Config, lr: float, samples: int, probe_batch: int, timeout_s: float,
                   probe_samples: int | None = None) -> Outcome:
        # Every config trains alike here: the parity check passes them all (tests/study/test_parity*.py test the check).
        run = ParityRun(config.batch_size, lr, 2.0, 1.0, (samples,), (1.0,), True, 0.1)
        return Outcome("complete", result=run.as_dict())

    def numerics_check(self, baseline: Config, config: Config, lr: float, timeout_s: float) -> Outcome:
        # Every config's gradients are fp32's here: amp and compile at the baseline's batch pass it, with no run
        # (tests/parity/test_by_gradients.py tests the check).
        found = {"error": 0.0, "noise": 1.0, "signal": 0.5, "finite": True, "batches": 8,
                 "batch_size": baseline.batch_size, "seconds": 0.1}
        return Outcome("complete", result=found)

    def parts(self, config: Config, lr: float, which: list[str], timeout_s: float) -> Outcome:
        # No parts here unless a test gives them (tests/study/test_valuation.py): every config runs end to end.
        return Outcome("failed", reason="error: no parts in this fake")

    def prestart(self, n: int) -> None:
        pass

    def ask_to_exit(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def kill(self) -> None:
        pass


@pytest.fixture
def fake_pool(monkeypatch: pytest.MonkeyPatch) -> type[FakePool]:
    FakePool.runs = []
    monkeypatch.setattr(pools, "TrialPool", FakePool)
    return FakePool


def test_search_learns_a_broken_value_and_writes_the_fastest_config(project: Path, fake_pool: type[FakePool]) -> None:
    lines: list[str] = []
    result = search("tiny", SearchOptions(trials=20, seed=3), echo=lines.append)
    ran = [c for c in fake_pool.runs]
    warned = [
        i
        for i, line in enumerate(lines)
        if line.startswith("  not trying again: channels_last=on failed in every trial that used it")
    ]
    assert len(warned) == 1
    trial_lines = [line for line in lines if line.startswith("[")]
    # 20 trials, or fewer where 12 in a row after the plan found nothing faster (autotune.study.clock.patience)
    ended = any(line.startswith("search: no trial of the last 12 found") for line in lines)
    assert len(trial_lines) == 20 or (len(trial_lines) < 20 and ended), (len(trial_lines), ended)
    # After the warning, no trial measures channels_last again.
    first_after = sum(1 for line in lines[: warned[0]] if line.startswith("["))
    assert not any(c.channels_last for c in ran[first_after:20])

    profile = result.profile
    knobs = profile["knobs"]
    assert knobs["channels_last"] is False
    best = max((FakePool.rate(c) for c in ran if not c.channels_last))
    assert profile["samples_per_s"] == best
    assert profile["baseline_samples_per_s"] == FakePool.rate(Config(batch_size=16))
    assert profile["speedup"] == round(best / FakePool.rate(Config(batch_size=16)), 2)
    assert profile["trials_complete"] + profile["trials_failed"] + profile["trials_pruned"] == len(trial_lines)
    assert tuned_file.read(project / "recipes" / "tiny.tuned.toml")["profiles"]["cpu"] == profile


def test_seeds_come_first_and_the_baseline_is_trial_0(project: Path, fake_pool: type[FakePool]) -> None:
    search("tiny", SearchOptions(trials=6), echo=lambda line: None)
    assert fake_pool.runs[0] == Config(batch_size=16)  # the workload's own settings
    # Then the data set kept in memory (the device of a CPU), which the tiny one allows: at its own batch size and
    # 8x, in bf16 (amp's only choice on a CPU) and fp32, and at 2x in fp32 (fp16's seed; no fp16 or graph here).
    assert fake_pool.runs[1:5] == [Config(batch_size=16, placement="device", amp="bf16"),
                                   Config(batch_size=128, placement="device", amp="bf16"),
                                   Config(batch_size=128, placement="device"),
                                   Config(batch_size=32, placement="device")]
    # Then every knob on at the workload's own batch size (it fits wherever the baseline fits), before any larger
    # streaming batch, with a worker on every core but the loop's own; no device decode is offered.
    workers = max(1, len(os.sched_getaffinity(0)) - 1)
    assert fake_pool.runs[5] == Config(batch_size=16, num_workers=workers, persistent_workers=True, prefetch_factor=4,
                                       channels_last=True, amp="bf16")


def test_a_failing_baseline_stops_the_search(
    project: Path, fake_pool: type[FakePool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(FakePool, "rate", staticmethod(lambda config: 1.0))
    original = FakePool.run

    def run(self: FakePool, config: Config, *args: object, **kwargs: object) -> Outcome:
        if config == Config(batch_size=16):
            return Outcome("failed", reason="error: ValueError: bad data")
        return original(self, config, *args, **kwargs)

    monkeypatch.setattr(FakePool, "run", run)
    with pytest.raises(
        SearchError,
        match=r"the workload's own settings \(bs=16 workers=0\) fail: error: ValueError: bad data\.",
    ):
        search("tiny", SearchOptions(trials=5), echo=lambda line: None)
    assert not (project / "recipes" / "tiny.tuned.toml").exists()


def test_seeds_on_a_gpu_try_the_fast_loop_at_a_larger_batch_in_bf16_and_in_fp32() -> None:
    from autotune.knobs import DataFacts, Machine
    from autotune.study.space.domains import build_space
    from autotune.workloads import load, resolve

    gpu = Machine("NVIDIA H200", cuda=True, cpu_share=16, amp_dtypes=("bf16", "fp16"), memory_bytes=140 * 2**30)
    mnist = DataFacts(
        size=60_000,
        sample_bytes=28 * 28 * 4 + 8,
        image_4d=True,
        static_shapes=True,
        deterministic=True,
        device_dataset=False,
    )
    workload = load(resolve("mnist_cnn"))
    seeds = seed_configs(workload, gpu, build_space(128, gpu, mnist))
    assert seeds[0] == Config(batch_size=128, pin_memory=True)  # the baseline
    fast = [c for c in seeds if c.placement == "device" and c.cuda_graph and c.batch_size == 1024]
    assert sorted(c.amp for c in fast) == ["bf16", "off"]
    assert len(set(seeds)) == len(seeds)
    # The streaming seeds leave a core to the loop's own process; the second seed's advice keeps its 8 workers.
    assert sorted({c.num_workers for c in seeds if c.placement == "stream"}) == [0, 8, 15]


def test_nothing_faster_than_the_baseline_keeps_the_workloads_own_settings(
    project: Path, fake_pool: type[FakePool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        FakePool, "rate", staticmethod(lambda config: 1000.0 if config == Config(batch_size=16) else 500.0)
    )
    lines: list[str] = []
    profile = search("tiny", SearchOptions(trials=6), echo=lines.append).profile
    assert "no config ran faster than the baseline; measuring it, 2 round(s), fresh processes" in lines
    assert not any(line.startswith("parity: checking") for line in lines)  # nothing to check
    assert tuned_file.knobs_to_config(profile["knobs"]) == Config(batch_size=16)
    assert (profile["speedup"], profile["parity"]) == (1.0, {"checked": False})


def test_a_finalist_slower_than_the_baseline_when_measured_again_does_not_win(
    project: Path, fake_pool: type[FakePool], monkeypatch: pytest.MonkeyPatch
) -> None:
    original = FakePool.run
    seen: set[Config] = set()

    def run(self: FakePool, config: Config, *args: object, **kwargs: object) -> Outcome:
        outcome = original(self, config, *args, **kwargs)
        if config != Config(batch_size=16) and config in seen and outcome.result is not None:
            # Fast once, slow ever after.
            outcome.result.update(samples_per_s=10.0, steady_samples_per_s=10.0, epoch_s=512 / 10.0)
        seen.add(config)
        return outcome

    monkeypatch.setattr(FakePool, "run", run)
    lines: list[str] = []
    profile = search("tiny", SearchOptions(trials=6), echo=lines.append).profile
    assert any(
        line.startswith(
            "finalists: none beat the baseline when measured again (10/s against 1,600/s; the declared run 102.9 s "
            "against 1.1 s)"
        )
        for line in lines
    ), lines
    assert tuned_file.knobs_to_config(profile["knobs"]) == Config(batch_size=16) and profile["speedup"] == 1.0


def test_the_pruner_never_stops_the_baseline() -> None:
    study = optuna.create_study(
        direction="maximize", pruner=ClearlyWorsePruner(ratio=0.5, warmup_windows=2)
    )
    study.add_trial(optuna.trial.create_trial(value=1000.0, params={}, distributions={}))
    for role, pruned in (("baseline", False), ("seed", True)):
        trial = study.ask()
        trial.set_user_attr("role", role)
        trial.report(10.0, 0)
        trial.report(10.0, 1)
        assert trial.should_prune() is pruned, role


def test_a_configs_noise_counts_every_process_that_measured_it() -> None:
    # One-GPU study on an H200: its rounds drew 1.603M and 1.616M, its own trial 1.741M (cuDNN autotunes per process).
    rounds = [{"samples_per_s": 1_603_009.0, "spread": 0.004}, {"samples_per_s": 1_616_256.0, "spread": 0.006}]
    assert round(spread_of(rounds), 5) == 0.00823  # the rounds alone: 0.8%
    assert round(spread_of(rounds, [1_741_003.0]), 5) == 0.08538  # with the trial: 8.5%
    assert spread_of(rounds[:1]) == 0.004  # one round: its within-run spread

    on = Config(batch_size=1024, placement="device", cuda_graph=True, cudnn_benchmark=True)

    def trial(number: int, value: float, config: Config, **attrs: object) -> optuna.trial.FrozenTrial:
        made = optuna.trial.create_trial(value=value, user_attrs={"config": config.as_dict(), **attrs})
        made.number = number
        return made

    trials = [
        trial(0, 1_741_003.0, on),
        trial(1, 1_741_003.0, on, duplicate_of=0),
        trial(2, 1_562_073.0, dataclasses.replace(on, cudnn_benchmark=False)),
    ]
    assert measured_values(trials, on, lambda c: c) == [1_741_003.0]  # the duplicate reused trial 0's number


def test_the_writer_waits_for_a_workers_baseline_run_only_while_it_may_come(project: Path) -> None:
    options = SearchOptions(trials=2, run_id="run-1")
    writer = open_study(prepare("tiny", options, echo=lambda line: None))
    run = {"run": "run-1", "config": writer.baseline.as_dict(), "lr": writer.lr(writer.baseline), "samples": 8192}
    looks: list[int] = []

    def pending(alive_for: int) -> bool:
        looks.append(1)
        return len(looks) <= alive_for

    # The worker ends after three looks, having stored nothing.
    assert baseline_run.wait_for(writer, lambda: pending(3)) is None and len(looks) == 4
    writer.study.set_user_attr(baseline_run.ATTRIBUTE, {"run": "run-1", "failed": "oom", "searcher": "w"})
    looks.clear()
    # Alive, but it stored why its run failed: no wait.
    assert baseline_run.wait_for(writer, lambda: pending(50)) is None and looks == []
    writer.study.set_user_attr(baseline_run.ATTRIBUTE, {**run, "run": "an earlier search"})
    looks.clear()
    # Not this search's: waits while the worker lives.
    assert baseline_run.wait_for(writer, lambda: pending(2)) is None and len(looks) == 3
    writer.study.set_user_attr(baseline_run.ATTRIBUTE, run)
    # Ended, but stored its run first: it is used.
    assert baseline_run.wait_for(writer, lambda: False) == run


@pytest.mark.parametrize(("trial_s", "out"), [(10.0, False), (80.0, True)])
def test_no_trial_starts_once_the_time_left_would_not_cover_the_end_of_the_search(
    project: Path, trial_s: float, out: bool
) -> None:
    """400 s budget, 3 finalists: a trial, the parity check, the first round's 4 measurements (a second round
    runs only on what is left)."""
    from autotune.study.clock.deadline import out_of_time

    setup = open_study(prepare("tiny", SearchOptions(trials=2, time_budget_s=400.0), echo=lambda line: None))
    assert not out_of_time(setup)  # nothing measured yet: the budget alone
    baseline = {"config": setup.baseline.as_dict(), "duration_s": trial_s}
    larger = {**baseline, "config": dataclasses.replace(setup.baseline, batch_size=2 * setup.baseline.batch_size)
              .as_dict()}  # a new batch size: the check's training runs are reserved
    for i in range(4):  # four complete trials: three besides the baseline, so the three finalists are costed
        setup.study.add_trial(optuna.trial.create_trial(value=1000.0, user_attrs=baseline if i == 0 else larger))
    # The check: the baseline's 512 steps of 16 (8,192 samples) at its 1,000/s, and half that for each finalist:
    # 8.2 s x 2.5 = 20.5 s. 10 s trials: 10 + 20.5 + 40 = 70.5 s of the 400 left; 80 s: 80 + 20.5 + 320 = 420.5.
    assert out_of_time(setup) is out
    assert not out_of_time(dataclasses.replace(setup, options=dataclasses.replace(setup.options, time_budget_s=None)))


@pytest.mark.parametrize("raw", ["abc", "0", "-1", "61"])
def test_a_window_length_that_is_not_seconds_is_refused(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.study.setup import window_seconds

    monkeypatch.setenv("AUTOTUNE_WINDOW_S", raw)
    rule = rf"AUTOTUNE_WINDOW_S must be a number of seconds in \(0, 60\], but got '{raw}'"
    with pytest.raises(SearchError, match=rule):
        window_seconds()
    monkeypatch.setenv("AUTOTUNE_WINDOW_S", "0.5")
    assert window_seconds() == 0.5


def test_a_search_that_replaces_a_profile_keeps_the_old_one_and_says_where(
    project: Path, fake_pool: type[FakePool]
) -> None:
    first = search("tiny", SearchOptions(trials=8, seed=3), echo=lambda line: None).profile
    lines: list[str] = []
    # A narrower search on the same hardware: its answer replaces the first one's in the recipe's tuned file.
    second = search("tiny", SearchOptions(trials=2, seed=3, study="probe", fixes={"batch_size": (16,)}),
                    echo=lines.append).profile
    assert tuned_file.read(project / "recipes" / "tiny.tuned.toml")["profiles"]["cpu"] == second
    kept = list((project / ".autotune" / "replaced").glob("tiny.cpu.*.tuned.toml"))
    assert len(kept) == 1 and tuned_file.read(kept[0])["profiles"]["cpu"] == first  # whole, and readable as it was
    said = [line for line in lines if line.startswith("replaced the profile of study ")]
    slower = "; the new one states a smaller speed-up than the one it replaced" \
        if second["speedup"] < first["speedup"] else ""
    assert said == [f"replaced the profile of study 'tiny@cpu' ({first['speedup']}x, made {first['created']} by "
                    f"`{first['command']}`){slower}; it is kept in {kept[0]}"], lines


def test_the_banner_names_a_local_recipe_that_replaces_a_built_in(project: Path, fake_pool: type[FakePool]) -> None:
    (project / "recipes" / "tiny.py").rename(project / "recipes" / "mnist_cnn.py")  # ./recipes wins over the built-in
    lines: list[str] = []
    search("mnist_cnn", SearchOptions(trials=2, parity_check=False, finalists=1, rounds=1), echo=lines.append)
    assert lines[0].startswith("autotune: tuning 'mnist_cnn' on cpu (")
    assert lines[1] == "  recipe: ./recipes/mnist_cnn.py, which replaces the built-in mnist_cnn"
    (project / "recipes" / "mnist_cnn.py").rename(project / "recipes" / "tiny.py")
    lines.clear()
    search("tiny", SearchOptions(trials=2, parity_check=False, finalists=1, rounds=1), echo=lines.append)
    assert not [line for line in lines if line.startswith("  recipe: ")]


def test_a_trial_an_interrupt_stopped_is_counted_as_interrupted_not_failed(
    project: Path, fake_pool: type[FakePool]
) -> None:
    from optuna.trial import TrialState, create_trial

    from autotune.study.shared import sharing

    options = SearchOptions(trials=3, parity_check=False, finalists=1, rounds=1)
    made = search("tiny", options, echo=lambda line: None).profile
    assert (made["trials_failed"], made["trials_interrupted"]) == (0, 0)
    # As the heartbeat leaves a trial whose searcher died once its retries are spent: failed, reason and all.
    study = optuna.load_study(study_name="tiny@cpu", storage=f"sqlite:///{project}/.autotune/tiny.db")
    last = study.trials[-1]
    study.add_trial(create_trial(
        state=TrialState.FAIL, params=last.params, distributions=last.distributions,
        user_attrs={**last.user_attrs, "reason": f"{sharing.INTERRUPTED}: its searcher host:1 stopped during the "
                    f"trial; the config was queued again"}))
    made = search("tiny", dataclasses.replace(options, trials=5), echo=lambda line: None).profile
    assert (made["trials_failed"], made["trials_interrupted"]) == (0, 1)
    assert made["trials_complete"] + made["trials_pruned"] + made["trials_interrupted"] == 5
    written = tuned_file.read(project / "recipes" / "tiny.tuned.toml")["profiles"]["cpu"]
    assert written["trials_interrupted"] == 1
