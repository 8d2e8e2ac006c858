"""The parity check inside a real search: a config that trains differently cannot win, and its numbers reach
the tuned file, the study, `autotune show` and the first-use note."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import tomli_w
from click.testing import CliRunner

from autotune import cli
from autotune.options import SearchOptions
from autotune.study import pools, search
from autotune.tuned import api
from autotune.tuned import file as tuned_file
from autotune.tuned.show import render

# Two configs only: the baseline (batch 16) and batch 128, so which one is fastest is never in doubt on a CPU.
FIXES: dict[str, tuple[Any, ...]] = {
    "batch_size": (16, 128),
    "placement": ("stream",),
    "num_workers": (0,),
    "amp": ("off",),
    "channels_last": (False,),
}


def run(rule: str, check: bool = True) -> tuple[list[str], dict[str, Any]]:
    lines: list[str] = []
    # One thread per trial process: two contending for two busy cores slow a trial tenfold, and the parity runs'
    # length follows the baseline trial's rate (the check's share of the time budget).
    options = SearchOptions(
        trials=2, fixes=FIXES, lr_rule=rule, parity_check=check, finalists=1, rounds=1, cpu_share=1
    )
    result = search("tiny", options, echo=lines.append)
    return lines, result.profile


@pytest.mark.e2e
@pytest.mark.slow
def test_a_rejected_config_cannot_win_and_without_the_check_it_does(project: Path) -> None:
    # Batch 128 at the batch-16 learning rate learns far less in the same samples: rejected, and nothing else is
    # faster. The workload's own settings are the answer, at 1.0x, and the profile says why.
    lines: list[str] = []
    kept = search(
        "tiny",
        SearchOptions(trials=2, fixes=FIXES, lr_rule="none", finalists=1, rounds=1, cpu_share=1),
        echo=lines.append,
    ).profile
    rejected = [line for line in lines if line.startswith("  parity REJECT")]
    assert len(rejected) == 1 and rejected[0].endswith("bs=128 workers=0")
    assert "(tolerance ±25%, batch_size)" in rejected[0] and "lr 0.05" in rejected[0]
    assert (kept["knobs"]["batch_size"], kept["speedup"]) == (16, 1.0)
    assert kept["parity"]["reason"] == (
        "kept the workload's own settings: no config faster than the baseline trains like it: all 1 checked, the "
        "fastest first, were rejected; to search further, narrow the search (e.g. --fix batch_size=16) or try "
        "--lr-scaling"
    )

    # The same study without the check: the config the check rejected is the winner.
    lines, profile = run("none", check=False)
    assert profile["knobs"]["batch_size"] == 128 and profile["lr"] == 0.05
    assert profile["parity"] == {"checked": False}
    # The line before the last, which says where the search's time went (autotune.study.clock.spent).
    assert lines[-2] == "parity: not checked (--no-parity-check): the winner may train differently from the baseline"
    assert lines[-1].startswith("budget: 480 s: ")

    # Scaled linearly (8x the rate), batch 128 trains like the baseline and wins, with the numbers recorded.
    lines, profile = run("linear")
    check = profile["parity"]
    assert profile["knobs"]["batch_size"] == 128 and profile["lr"] == 0.4 and profile["lr_rule"] == "linear"
    assert (check["checked"], check["passed"], check["family"], check["tolerance"]) == (True, True, "batch_size", 0.25)
    assert (check["lr"], check["baseline_lr"], check["samples"], check["window"]) == (0.4, 0.05, 8192, 2048)
    assert abs(check["deviation"]) <= 0.25 and abs(check["probe_deviation"]) <= 0.25
    assert (check["configs_checked"], check["configs_rejected"]) == (1, 0) and check["check_s"] > 0
    assert any(line.startswith("  parity pass    deviation ") and line.endswith("bs=128 workers=0") for line in lines)
    assert lines[-2].startswith("parity: the winner trains like the baseline (deviation ")

    written = tuned_file.read(project / "recipes" / "tiny.tuned.toml")
    assert written["profiles"]["cpu"]["parity"] == check
    table = render(written, project / "recipes" / "tiny.tuned.toml")
    assert "parity                   passed (batch_size, ±25%)" in table
    assert "parity check, s          " in table and "(1 checked, 0 rejected)" in table

    # Optuna keeps finished trials read-only: each verdict is on the study, under the trial that found the config.
    study = optuna.load_study(
        study_name="tiny@cpu+amp=off+batch_size=16,128+channels_last=False+num_workers=0+placement=stream",
        storage=f"sqlite:///{project / '.autotune' / 'tiny.db'}",
    )
    assert study.trials[1].user_attrs["config"]["batch_size"] == 128
    stored = study.user_attrs["parity:trial-1"]
    assert stored["passed"] and stored["lr"] == 0.4 and stored["config"] == "bs=128 workers=0"


def test_the_cli_flag_turns_the_check_off(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[SearchOptions] = []
    from autotune.study import run

    monkeypatch.setattr(run, "search", lambda recipe, options, echo, early=None: seen.append(options))
    for args in ([], ["--no-parity-check"]):
        result = CliRunner().invoke(cli.main, ["search", "--recipe", "tiny", *args])
        assert result.exit_code == 0, result.output
    assert [o.parity_check for o in seen] == [True, False]


def test_first_use_says_the_learning_rate_and_what_the_check_found(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = {
        "samples_per_s": 9000.0,
        "baseline_samples_per_s": 1000.0,
        "speedup": 9.0,
        "lr": 0.4,
        "lr_rule": "linear",
        "knobs": {
            "batch_size": 128,
            "num_workers": 0,
            "pin_memory": False,
            "persistent_workers": False,
            "cudnn_benchmark": False,
            "channels_last": False,
            "amp": "off",
            "cuda_graph": False,
            "placement": "stream",
        },
        "versions": {"torch": "2.14.1"},
        "parity": {
            "checked": True,
            "passed": True,
            "family": "batch_size",
            "tolerance": 0.25,
            "samples": 8192,
            "window": 2048,
            "lr": 0.4,
            "baseline_lr": 0.05,
            "deviation": -0.01,
            "probe_deviation": 0.02,
            "configs_checked": 1,
            "configs_rejected": 0,
            "check_s": 3.0,
        },
    }
    (project / "recipes" / "tiny.tuned.toml").write_text(
        tomli_w.dumps({"schema": 1, "recipe": "tiny", "profiles": {"cpu": profile}})
    )
    api._told.clear()
    assert api.load_tuned("tiny", "cpu").lr == 0.4
    api.load_tuned("tiny", "cpu")  # told once, not twice
    assert capsys.readouterr().err == (
        "autotune: tiny on cpu uses batch size 128 (the workload's is 16); its learning rate is 0.4 by the linear "
        "rule. "
        "The parity check trained it at that rate like the baseline (tolerance ±25%); "
        "build your optimizer with load_tuned('tiny').lr.\n"
    )


def test_a_broken_parity_table_is_a_recipe_error(project: Path) -> None:
    path = project / "recipes" / "tiny.tuned.toml"
    profile = {
        "samples_per_s": 2.0,
        "baseline_samples_per_s": 1.0,
        "speedup": 2.0,
        "versions": {},
        "knobs": {
            "batch_size": 128,
            "num_workers": 0,
            "pin_memory": False,
            "persistent_workers": False,
            "cudnn_benchmark": False,
            "channels_last": False,
            "amp": "off",
            "cuda_graph": False,
            "placement": "stream",
        },
        "parity": {"checked": True, "passed": "yes"},
    }
    path.write_text(tomli_w.dumps({"schema": 1, "recipe": "tiny", "profiles": {"cpu": profile}}))
    with pytest.raises(
        tuned_file.TunedFileError,
        match=r"has 10 problem\(s\):\n  - profiles.'cpu'.parity.passed must be bool, but got 'yes'\n"
        r"  - profiles.'cpu'.parity lacks 'family'",
    ):
        tuned_file.read(path)


def test_a_parity_run_in_a_trial_process_matches_one_in_this_process(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from autotune.config import Config
    from autotune.parity import run as parity_run
    from autotune.procs.pool import TrialPool
    from autotune.trial.runner import Runner
    from autotune.workloads import load, resolve

    ref = resolve("tiny")
    runner = Runner(load(ref), torch.device("cpu"))
    here = parity_run.train(runner.build, Config(batch_size=64), 0.2, 2048, parity_run.probe(runner.dataset), 16)
    monkeypatch.setenv("TINY_FAIL", "oom")  # batch >= 64 raises "CUDA out of memory." in the child
    # The child's share is this process's thread count: it computes with as many threads, so the sums agree bit for bit.
    pool = TrialPool(ref.workload_path, "cpu", torch.get_num_threads(), project / "logs", timeout_s=60)
    try:
        ok = pool.parity_run(Config(batch_size=32), 0.1, 2048, 16, timeout_s=60)
        oom = pool.parity_run(Config(batch_size=64), 0.2, 2048, 16, timeout_s=60)
        monkeypatch.delenv("TINY_FAIL")
        # A fresh trial process replaces the failed one.
        again = pool.parity_run(Config(batch_size=64), 0.2, 2048, 16, timeout_s=60)
    finally:
        pool.stop()
    assert ok.state == "complete" and parity_run.ParityRun.from_dict(ok.result).samples == 2048
    assert (oom.state, oom.reason) == ("failed", "oom: asked for 2.00 GiB")
    assert again.state == "complete" and parity_run.ParityRun.from_dict(again.result).losses == here.losses
    assert pool.children_started == 2


class FakePool:
    """Trials and parity runs without processes: larger batches run faster, and above batch 32 learn too little."""

    startup_s = 0.0  # no process starts here: nothing to reserve for a round's

    runs: list[Any] = []  # the configs of the parity runs made, in order
    lrs: list[tuple[Any, float]] = []  # and each with its learning rate

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def run(
        self, config: Any, lr: float, windows: object = None, on_window: object = None, fresh: bool = False,
        give_up_s: float | None = None, limit_s: float | None = None,
    ) -> Any:
        from autotune.procs.trial_process import Outcome

        rate = config.batch_size * 100.0 + config.num_workers
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

    def parity_run(self, config: Any, lr: float, samples: int, probe_batch: int, timeout_s: float,
                   probe_samples: int | None = None) -> Any:
        from autotune.parity.run import ParityRun
        from autotune.procs.trial_process import Outcome

        FakePool.runs.append(config)
        FakePool.lrs.append((config, lr))
        loss = 1.0 if config.batch_size <= 32 else 1.9
        return Outcome(
            "complete", result=ParityRun(config.batch_size, lr, 2.0, loss, (samples,), (loss,), True, 0.1).as_dict()
        )

    def parts(self, config: Any, lr: float, which: list[str], timeout_s: float) -> Any:
        from autotune.procs.trial_process import Outcome

        return Outcome("failed", reason="error: no parts in this fake")  # every config runs end to end

    def prestart(self, n: int) -> None:
        pass

    def ask_to_exit(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def kill(self) -> None:
        pass


def test_the_finalists_are_the_fastest_configs_that_pass_checked_before_they_are_measured(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    FakePool.runs, FakePool.lrs = [], []
    monkeypatch.setattr(pools, "TrialPool", FakePool)
    lines: list[str] = []
    fixes = {"batch_size": (16, 32, 64, 128), "placement": ("stream",), "amp": ("off",), "channels_last": (False,)}
    result = search("tiny", SearchOptions(trials=10, fixes=fixes, finalists=2, seed=1), echo=lines.append)
    profile = result.profile
    assert profile["knobs"]["batch_size"] == 32 and profile["lr"] == 0.1
    check = profile["parity"]
    assert check["passed"] and check["family"] == "batch_size" and check["configs_rejected"] >= 2
    # The check comes first; only configs that passed it are measured again, so no round is spent on a loser.
    start = next(i for i, line in enumerate(lines) if line.startswith("parity: checking the fastest"))
    measuring = next(i for i, line in enumerate(lines) if line.startswith("finalists: measuring"))
    assert start < measuring
    measured = {line.split("/s  ", 1)[1] for line in lines[measuring:] if line.startswith("  round ")}
    assert measured and all(d.startswith(("bs=32", "bs=16 ")) for d in measured), measured
    baseline = FakePool.runs[0]
    assert baseline.batch_size == 16 and FakePool.runs.count(baseline) == 1  # the baseline first, once
    # Judged inside the search, as each became a contender: batch 128 rejected at the linear rule's rate, then
    # sqrt's, then none's, which sends the search to batches 32 and 64 next; 32 passes, 64 fails alike. Each family
    # once; the finalists' check reuses every verdict. Batch 16 with other workers has the baseline's numerics and
    # passes without a run.
    assert [(c.batch_size, lr) for c, lr in FakePool.lrs[1:]] == [
        (128, 0.4), (128, 0.141421356237), (128, 0.05), (32, 0.1), (64, 0.2), (64, 0.1), (64, 0.05)
    ]
    assert any(line.startswith("  parity pass    the baseline's own numerics") for line in lines), lines


def test_under_gpus_the_writer_checks_while_another_searcher_ends_its_last_trial(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from autotune.study import finalists, run
    from autotune.study.setup import open_study, prepare

    FakePool.runs, FakePool.lrs = [], []
    monkeypatch.setattr(pools, "TrialPool", FakePool)
    lines: list[str] = []
    fixes = {"batch_size": (16, 32, 64, 128), "placement": ("stream",), "amp": ("off",), "channels_last": (False,)}
    setup = open_study(prepare("tiny", SearchOptions(trials=8, fixes=fixes, finalists=2, seed=1), echo=lines.append))
    others: list[optuna.Trial] = []
    own_tickets = run.run_trials

    def then_another_searcher_takes_one(*args: Any, **kwargs: Any) -> Any:
        learned = own_tickets(*args, **kwargs)
        others.append(setup.study.ask())  # another searcher's last trial, still running when this one's are done
        return learned

    monkeypatch.setattr(run, "run_trials", then_another_searcher_takes_one)
    team = pools.Team(round_devices=("cpu", "cpu"))  # under --gpus: this process writes
    search_pools = pools.SearchPools(setup, team=team)
    checked = threading.Event()
    parity_run = FakePool.parity_run

    def run_and_say(self: FakePool, *args: Any, **kwargs: Any) -> Any:
        outcome = parity_run(self, *args, **kwargs)
        if len(FakePool.runs) == 8:  # the baseline's, two contenders' at three rates each, a third's (a fourth
            # has its numerics)
            checked.set()
        return outcome

    monkeypatch.setattr(FakePool, "parity_run", run_and_say)

    def finish() -> None:  # the other searcher's trial ends once the check has run and the writer waits for it
        checked.wait(30)
        deadline = time.monotonic() + 30
        while not any(line.startswith("waiting for 1 trial") for line in lines) and time.monotonic() < deadline:
            time.sleep(0.05)
        setup.study.tell(others[0], state=optuna.trial.TrialState.FAIL)

    finisher = threading.Thread(target=finish)
    finisher.start()
    began, _ = run._trials(setup, search_pools, team)
    finisher.join()
    assert checked.is_set() and began is not None
    waiting = next(
        i for i, line in enumerate(lines) if line.startswith("waiting for 1 trial(s) still running on other searchers")
    )
    # The check ran inside the trials, before the wait: every contender's family judged as it appeared.
    assert waiting > next(i for i, line in enumerate(lines) if line.startswith("parity: checking the fastest"))
    early = list(FakePool.runs)
    # The baseline, then each batch size as it became a contender; 128 fails at every rate (linear, sqrt, none).
    assert [c.batch_size for c in early] == [16, 128, 128, 128, 32, 64, 64, 64]

    chosen, _ = finalists.choose(setup, search_pools, team, began)
    # Batch 32 twice: the search went to it, with two loaders, once batch 128 failed at every rate.
    assert [c.batch_size for c in chosen] == [32, 32]
    assert FakePool.runs == early, "the check after the trials reused every verdict"
    assert sum(line.startswith("parity: checking the fastest") for line in lines) == 1
