"""Learning rates that follow the optimizer: linear for SGD, sqrt for adaptive ones, `--lr-scaling` over both.

A batch size is tried at the gentler rates before the parity check rejects it; the rate that passed, and why, is in
the profile and in `autotune show`.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

from autotune import cli
from autotune.config import Config, LrRule, lr_rule_for
from autotune.options import SearchOptions
from autotune.parity.check import ParityCheck
from autotune.parity.run import ParityRun
from autotune.parity.verdict import ParityRunFailed, ParityRunOutOfTime
from autotune.procs.trial_process import Outcome
from autotune.study import pools, search
from autotune.tuned import file as tuned_file
from autotune.tuned.schema import validate_parity
from autotune.tuned.show import render
from autotune.workloads import load, resolve
from autotune.workloads.settings import workload_lr_rule

FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.mark.parametrize(
    ("optimizer", "rule"),
    [
        (torch.optim.SGD, "linear"),
        (torch.optim.ASGD, "linear"),
        (torch.optim.Adam, "sqrt"),
        (torch.optim.AdamW, "sqrt"),
        (torch.optim.Adamax, "sqrt"),
        (torch.optim.NAdam, "sqrt"),
        (torch.optim.RAdam, "sqrt"),
        (torch.optim.Adadelta, "sqrt"),
        (torch.optim.Adagrad, "sqrt"),
        (torch.optim.RMSprop, "sqrt"),
    ],
)
def test_sgd_family_scales_linearly_and_adaptive_optimizers_by_the_square_root(optimizer: type, rule: str) -> None:
    assert lr_rule_for(optimizer([torch.nn.Parameter(torch.zeros(2))], lr=0.1)).name == rule


def test_the_rule_s_reason_names_the_optimizer_and_an_unknown_one_is_judged_by_its_eps() -> None:
    class Lion(torch.optim.Optimizer):  # a sign-based optimizer of no known family, with no eps
        def __init__(self, params: Any, lr: float) -> None:
            super().__init__(params, {"lr": lr})

    class Sophia(Lion):  # divides by a curvature estimate, guarded by an eps
        def __init__(self, params: Any, lr: float) -> None:
            torch.optim.Optimizer.__init__(self, params, {"lr": lr, "eps": 1e-12})

    class MyAdamW(torch.optim.AdamW):
        pass

    params = [torch.nn.Parameter(torch.zeros(2))]
    assert lr_rule_for(torch.optim.Adadelta(params)) == LrRule(
        "sqrt", "Adadelta is an adaptive optimizer: sqrt rule (Malladi et al., NeurIPS'22)"
    )
    assert lr_rule_for(torch.optim.SGD(params, lr=0.1)) == LrRule(
        "linear", "SGD is an SGD-family optimizer: linear rule (Goyal et al., 2017)"
    )
    assert lr_rule_for(MyAdamW(params)).why == (
        "MyAdamW (an AdamW) is an adaptive optimizer: sqrt rule (Malladi et al., NeurIPS'22)"
    )
    assert lr_rule_for(Lion(params, 1e-4)) == LrRule(
        "linear", "Lion is not a known optimizer and has no eps: linear rule, as for SGD"
    )
    assert lr_rule_for(Sophia(params, 1e-4)).name == "sqrt"
    assert lr_rule_for(torch.optim.Adam(params), override="none") == LrRule("none", "--lr-scaling none")
    with pytest.raises(ValueError, match=r"`override` must be one of \('linear', 'sqrt', 'none'\) or None, but got "
                                         r"'cubic'"):
        lr_rule_for(None, override="cubic")
    assert LrRule("linear", "").gentler() == ("sqrt", "none") and LrRule("none", "").gentler() == ()


def test_the_workload_s_optimizer_is_built_once_on_a_stand_in_or_else_on_its_model(project: Path) -> None:
    shutil.copy(FIXTURES / "tiny_adam.py", project / "recipes" / "tiny_adam.py")
    workload = load(resolve("tiny_adam"))
    assert workload_lr_rule(workload).name == "sqrt"
    assert workload_lr_rule(workload, "linear") == LrRule("linear", "--lr-scaling linear")

    def by_name(params: Any, lr: float) -> torch.optim.Optimizer:  # wants the model's own weights: 4-D and 2-D
        weights = [p for p in params if p.dim() == 4]
        if not weights:
            raise ValueError("no convolution weights among the parameters")
        return torch.optim.RMSprop(weights, lr=lr)

    picky = dataclasses.replace(workload, build_optimizer=by_name)
    assert workload_lr_rule(picky).why.startswith("RMSprop is an adaptive optimizer")


def test_the_cli_leaves_the_rule_to_the_optimizer_unless_told(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[SearchOptions] = []
    from autotune.study import run

    monkeypatch.setattr(run, "search", lambda recipe, options, echo, early=None: seen.append(options))
    for args in ([], ["--lr-scaling", "sqrt"]):
        result = CliRunner().invoke(cli.main, ["search", "--recipe", "tiny", *args])
        assert result.exit_code == 0, result.output
    assert [o.lr_rule for o in seen] == [None, "sqrt"]
    result = CliRunner().invoke(cli.main, ["search", "--recipe", "tiny", "--lr-scaling", "cubic"])
    assert result.exit_code == 2 and "'cubic' is not one of 'linear', 'sqrt', 'none'" in result.output


# -- the gentler rates, on fabricated runs -------------------------------------------------------------------------

BASE = Config(batch_size=16)
LINEAR = LrRule("linear", "SGD is an SGD-family optimizer: linear rule (Goyal et al., 2017)")


def lr_at(config: Config, rule: str) -> float:
    """tiny.py's rate (0.05 at batch 16) by each rule, capped at 0.4 as a workload's LR_MAX would."""
    ratio = config.batch_size / 16
    return round(min(0.4, 0.05 * {"linear": ratio, "sqrt": ratio**0.5, "none": 1.0}[rule]), 12)


def unstable_above(lr_max: float, calls: list[tuple[int, float]], crash: int | None = None) -> Any:
    """Runs that train like the baseline at a rate up to `lr_max` and learn far less above it."""

    def make_run(config: Config, lr: float, samples: int) -> ParityRun:
        calls.append((config.batch_size, lr))
        if config.batch_size == crash:
            raise ParityRunFailed("oom")
        loss = 1.0 if config == BASE or lr <= lr_max else 1.9
        return ParityRun(config.batch_size, lr, 2.0, loss, (samples,), (loss,), True, 0.0)

    return make_run


def gate_for(make_run: Any, ranked: list[Config], lines: list[str]) -> ParityCheck:
    return ParityCheck(
        BASE, lambda c: lr_at(c, "linear"), make_run, ranked, lines.append, lr_rule=LINEAR, lr_at=lr_at
    )


def test_a_batch_size_that_fails_at_its_rule_s_rate_passes_at_the_next_gentler_one() -> None:
    calls: list[tuple[int, float]] = []
    lines: list[str] = []
    big, big_bf16 = Config(batch_size=64), Config(batch_size=64, amp="bf16")
    gate = gate_for(unstable_above(0.1, calls), [big, big_bf16], lines)
    assert gate.select([big, big_bf16], want=2, max_runs=5) == [big, big_bf16]
    # Linear's 0.2 fails by a wide margin, so the bf16 twin of batch 64 starts at sqrt's 0.1 unrun at 0.2.
    assert calls == [(16, 0.05), (64, 0.2), (64, 0.1), (64, 0.1)]
    verdict = gate.verdicts[big]
    assert (verdict.passed, verdict.lr, verdict.lr_rule) == (True, 0.1, "sqrt")
    assert verdict.lr_reason == (
        "the linear rate (lr 0.2) failed: deviation +90.0%, probe +90.0%; sqrt is the next gentler rate"
    )
    assert lines[0].startswith("  parity REJECT  deviation +90.0%, probe +90.0% (tolerance ±25%, batch_size)")
    assert lines[0].endswith("lr 0.2 (linear)  [0.0 s]  bs=64 workers=0")
    assert lines[1].startswith("  parity pass    deviation +0.0%") and "lr 0.1 (sqrt)" in lines[1]
    record = gate.record(big)
    assert (record["lr"], record["lr_rule"], record["baseline_lr"]) == (0.1, "sqrt", 0.05)
    assert validate_parity("parity", record) == []


def test_a_batch_larger_than_one_that_failed_at_every_rate_of_its_ladder_is_not_run() -> None:
    calls: list[tuple[int, float]] = []

    def make_run(config: Config, lr: float, samples: int) -> ParityRun:
        calls.append((config.batch_size, lr))
        loss = 1.9 if config.batch_size == 64 else 1.0  # batch 64 learns too little at any rate; 128 would pass
        return ParityRun(config.batch_size, lr, 2.0, loss, (samples,), (loss,), True, 0.0)

    lines: list[str] = []
    big, bigger, smaller = Config(batch_size=64), Config(batch_size=128), Config(batch_size=32)
    gate = gate_for(make_run, [big, bigger, smaller], lines)
    assert gate.select([big, bigger, smaller], want=1, max_runs=9) == [smaller]
    assert calls == [(16, 0.05), (64, 0.2), (64, 0.1), (64, 0.05), (32, 0.1)]  # linear, sqrt, none; then 32
    assert gate.verdicts[bigger].lr == 0.4 and not gate.verdicts[bigger].passed  # linear's 0.8, capped
    assert lines[3] == (f"  parity REJECT  (batch 64 learned too little at every rate, and batch 128 is larger: see "
                        f"{big.describe()})  {bigger.describe()}")


def test_every_gentler_rate_is_tried_in_turn_and_a_capped_rate_only_once() -> None:
    calls: list[tuple[int, float]] = []
    large, huge = Config(batch_size=256), Config(batch_size=1024)
    gate = gate_for(unstable_above(0.07, calls), [huge, large], [])
    assert gate.select([huge, large], want=2, max_runs=9) == [huge, large]
    # Batch 1024: linear's 3.2 and sqrt's 0.4 are both capped at 0.4, tried once; none's 0.05 passes. Batch 256:
    # linear's 0.8 (capped at 0.4: its failure at batch 1024 says nothing of batch 256) and sqrt's 0.2 fail.
    assert calls == [(16, 0.05), (1024, 0.4), (1024, 0.05), (256, 0.4), (256, 0.2), (256, 0.05)]
    assert gate.verdicts[huge].lr_rule == "none" and gate.verdicts[huge].lr_reason == (
        "the linear rate (lr 0.4) failed: deviation +90.0%, probe +90.0%; none is the next gentler rate"
    )
    assert gate.verdicts[large].lr_reason == (
        "the linear rate (lr 0.4) failed: deviation +90.0%, probe +90.0%; the sqrt rate (lr 0.2) failed: deviation "
        "+90.0%, probe +90.0%; none is the next gentler rate"
    )


def test_a_crash_is_not_retried_at_a_gentler_rate_nor_is_a_rejection_without_a_gentler_one_left() -> None:
    calls: list[tuple[int, float]] = []
    crashing, hopeless = Config(batch_size=64), Config(batch_size=128)
    gate = gate_for(unstable_above(0.0, calls, crash=64), [crashing, hopeless], [])
    assert gate.select([crashing, hopeless], want=1, max_runs=9) == []
    assert calls == [(16, 0.05), (64, 0.2), (128, 0.4), (128, 0.141421356237), (128, 0.05)]
    assert gate.verdicts[crashing].reason == "oom"
    assert not gate.verdicts[hopeless].passed and gate.verdicts[hopeless].lr_rule == "none"
    assert gate.verdicts[hopeless].lr_reason.endswith("none is the next gentler rate")


# -- through a search: the rate that passed, and why, in the profile and in `autotune show` -------------------------


class FakePool:
    """Trials and parity runs without processes: batch 64 is 4x faster, and learns like batch 16 only up to lr 0.15."""

    startup_s = 0.0  # no process starts here: nothing to reserve for a round's

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def run(
        self, config: Config, lr: float, windows: object = None, on_window: object = None, fresh: bool = False,
        give_up_s: float | None = None, limit_s: float | None = None,
    ) -> Outcome:
        rate = config.batch_size * 100.0
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
        loss = 1.0 if lr <= 0.15 else 1.9
        return Outcome("complete", result=ParityRun(config.batch_size, lr, 2.0, loss, (samples,), (loss,), True, 0.1)
                       .as_dict())

    def parts(self, config: Config, lr: float, which: list[str], timeout_s: float) -> Outcome:
        return Outcome("failed", reason="error: no parts in this fake")  # every config runs end to end

    def prestart(self, n: int) -> None:
        pass

    def ask_to_exit(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def kill(self) -> None:
        pass


def test_the_profile_and_show_state_the_rate_that_passed_and_why(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pools, "TrialPool", FakePool)
    fixes = {"batch_size": (16, 64), "placement": ("stream",), "num_workers": (0,), "amp": ("off",),
             "channels_last": (False,)}
    lines: list[str] = []
    profile = search("tiny", SearchOptions(trials=2, fixes=fixes, finalists=1, rounds=1), echo=lines.append).profile
    assert "  learning rate for a new batch size: SGD is an SGD-family optimizer: linear rule (Goyal et al., 2017)" \
        in lines
    reason = "the linear rate (lr 0.2) failed: deviation +90.0%, probe +90.0%; sqrt is the next gentler rate"
    assert (profile["knobs"]["batch_size"], profile["lr"], profile["lr_rule"], profile["lr_reason"]) == (
        64, 0.1, "sqrt", reason
    )
    assert (profile["parity"]["lr"], profile["parity"]["lr_rule"], profile["parity"]["lr_reason"]) == (
        0.1, "sqrt", reason
    )
    path = project / "recipes" / "tiny.tuned.toml"
    table = render(tuned_file.read(path), path)
    assert f"cpu: lr 0.1 (sqrt): {reason}" in table.splitlines()


def test_an_adam_workload_at_4x_its_batch_is_written_at_twice_its_rate(project: Path) -> None:
    shutil.copy(FIXTURES / "tiny_adam.py", project / "recipes" / "tiny_adam.py")
    # --fix batch_size=64: 4x tiny_adam's 16 (--fix takes absolute values). One thread per trial process: two
    # contending for two shared cores slow a trial tenfold.
    fixes = {"batch_size": (64,), "placement": ("stream",), "num_workers": (0,), "amp": ("off",),
             "channels_last": (False,)}
    lines: list[str] = []
    options = SearchOptions(trials=1, fixes=fixes, finalists=1, rounds=1, cpu_share=1)
    profile = search("tiny_adam", options, echo=lines.append).profile
    why = "Adam is an adaptive optimizer: sqrt rule (Malladi et al., NeurIPS'22)"
    assert (profile["knobs"]["batch_size"], profile["lr"], profile["lr_rule"], profile["lr_reason"]) == (
        64, 0.02, "sqrt", why
    )
    check = profile["parity"]
    assert (check["passed"], check["conclusive"], check["lr"], check["baseline_lr"]) == (True, True, 0.02, 0.01)
    assert f"  learning rate for a new batch size: {why}" in lines


def held_back_below(lr_min: float, calls: list[tuple[int, float]]) -> Any:
    """Runs whose loss falls with the rate: too few steps at a low one; like the baseline from `lr_min` up."""

    def make_run(config: Config, lr: float, samples: int) -> ParityRun:
        calls.append((config.batch_size, lr))
        loss = 1.0 if config == BASE or lr >= lr_min else 1.0 + 0.9 * (lr_min - lr) / lr_min
        return ParityRun(config.batch_size, lr, 2.0, loss, (samples,), (loss,), True, 0.0)

    return make_run


SQRT = LrRule("sqrt", "AdamW is an adaptive optimizer: sqrt rule (Malladi et al., NeurIPS'22)")


def test_when_the_gentler_rate_trains_further_behind_the_bolder_one_is_tried() -> None:
    # text_transformer on an H200 (AdamW, batch 32 to 256): +89% at sqrt's rate, +167% unscaled, a pass at linear's.
    calls: list[tuple[int, float]] = []
    lines: list[str] = []
    big, big_bf16 = Config(batch_size=64), Config(batch_size=64, amp="bf16")
    gate = ParityCheck(BASE, lambda c: lr_at(c, "sqrt"), held_back_below(0.2, calls), [big, big_bf16], lines.append,
                       lr_rule=SQRT, lr_at=lr_at)
    assert gate.select([big, big_bf16], want=2, max_runs=9) == [big, big_bf16]
    assert calls == [(16, 0.05), (64, 0.1), (64, 0.05), (64, 0.2), (64, 0.2)]  # the bf16 twin starts at linear's
    verdict = gate.verdicts[big]
    assert (verdict.passed, verdict.lr, verdict.lr_rule) == (True, 0.2, "linear")
    assert verdict.lr_reason == (
        "the sqrt rate (lr 0.1) failed: deviation +45.0%, probe +45.0%; the none rate (lr 0.05) failed: deviation "
        "+67.5%, probe +67.5%; the gentler rates trained further from the baseline, so linear, a bolder rate, is next"
    )


def test_the_cap_on_runs_ends_no_batch_size_s_ladder_before_its_last_rate() -> None:
    # text_transformer on one H100: the cap on the check's runs was reached after batch 128's sqrt and unscaled runs,
    # and the batch stood rejected "at every rate" without its linear run, at which it had passed a search before.
    calls: list[tuple[int, float]] = []
    big = Config(batch_size=64)
    gate = ParityCheck(BASE, lambda c: lr_at(c, "sqrt"), held_back_below(0.2, calls), [big], lambda line: None,
                       lr_rule=SQRT, lr_at=lr_at)
    assert gate.select([big], want=1, max_runs=1) == [big]
    assert calls == [(16, 0.05), (64, 0.1), (64, 0.05), (64, 0.2)]
    assert (gate.verdicts[big].passed, gate.verdicts[big].lr) == (True, 0.2)
    # The cap still bounds how many configs are judged: a second batch size starts no run once it is reached.
    other = Config(batch_size=32)
    assert gate.select([other], want=1, max_runs=0) == [] and other not in gate.verdicts


def test_a_rate_that_failed_for_being_too_high_is_never_followed_by_a_bolder_one() -> None:
    calls: list[tuple[int, float]] = []
    big = Config(batch_size=64)
    gate = ParityCheck(BASE, lambda c: lr_at(c, "sqrt"), unstable_above(0.0, calls), [big], lambda line: None,
                       lr_rule=SQRT, lr_at=lr_at)
    assert gate.select([big], want=1, max_runs=9) == []
    assert calls == [(16, 0.05), (64, 0.1), (64, 0.05)]  # as far behind at both: linear's 0.2 is not tried


def test_a_rejection_stands_when_the_check_s_share_stops_the_gentler_rate_s_run() -> None:
    # Linear's 0.2 fails batch 64 by a wide margin; sqrt's run is then stopped by what is left of the check's share.
    # That run judged nothing: the rejection at 0.2 is the verdict, so batch 64's family is ruled out as rejected.
    calls: list[tuple[int, float]] = []
    unstable = unstable_above(0.1, calls)

    def make_run(config: Config, lr: float, samples: int) -> ParityRun:
        if config.batch_size == 64 and lr < 0.2:
            raise ParityRunOutOfTime("timeout: no result within 3 s, what was left of the check's share")
        return unstable(config, lr, samples)

    big = Config(batch_size=64)
    gate = gate_for(make_run, [big], [])
    assert gate.select([big], want=1, max_runs=5) == []
    verdict = gate.verdicts[big]
    assert (verdict.passed, verdict.conclusive, verdict.lr) == (False, True, 0.2)
    assert verdict.deviation is not None and verdict.deviation > 0.25
