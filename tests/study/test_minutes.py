"""A search that uses its minutes: a compile only where it fits, parts remembered across studies, the plan's faster
guesses measured before patience ends the trials, the winner measured twice, and where the budget went.

The clock and the rates are made up (a fake pool, trials recorded with their times); the decisions are the real ones.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
from _pools import FakePool, ran
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from autotune.config import COMPILE_CHOICES, Config
from autotune.options import SearchOptions
from autotune.procs.trial_process import Outcome
from autotune.study.clock import patience
from autotune.study.clock.deadline import out_of_time, spare_s
from autotune.study.clock.spent import Spent
from autotune.study.planning import compile_cost, remembered
from autotune.study.planning.compile_cost import CANNOT_PAY
from autotune.study.planning.valuation import Valuation, loader_key, step_key
from autotune.study.profile import rests_on_one
from autotune.study.rounds import Measured, measure_rounds
from autotune.study.shared.tickets import VALUED_ROLE
from autotune.tuned.schema import validate_budget

BASELINE = Config(256, num_workers=4)
LEADER = Config(256, num_workers=4, amp="bf16")


def _trial(config: Config, value: float, seconds: float, **attrs: object) -> optuna.trial.FrozenTrial:
    return create_trial(state=TrialState.COMPLETE, value=value, params={"x": 0.0},
                        distributions={"x": FloatDistribution(0, 1)},
                        user_attrs={"duration_s": seconds, "config": dataclasses.asdict(config), **attrs})


def _setup(trials: list[optuna.trial.FrozenTrial], clock: list[float], budget_s: float | None = 480.0,
           tmp: Path | None = None, digest: str = "abc", epochs: int = 1) -> SimpleNamespace:
    """A search whose study holds `trials`, at `clock[0]` seconds into `budget_s`."""
    study = optuna.create_study(direction="maximize")
    for t in trials:
        study.add_trial(t)
    return SimpleNamespace(
        options=SearchOptions(time_budget_s=budget_s, state_dir=tmp or Path(".autotune")), study=study,
        baseline=BASELINE, space=SimpleNamespace(domains={"batch_size": [256], "compile": list(COMPILE_CHOICES)},
                                                 normalise=lambda c: c),
        config_of=lambda t: Config.from_dict(t.user_attrs["config"]),
        workload=SimpleNamespace(defaults={"epochs": epochs}),
        facts=SimpleNamespace(size=51_200, stream_refused=()), elapsed=lambda: clock[0], lr=lambda config: 0.1,
        windows=None,
        machine=SimpleNamespace(hardware="NVIDIA H100 80GB HBM3", cpu_share=16),
        identity=SimpleNamespace(digest=digest),
    )


def test_a_compile_that_the_budget_left_cannot_pay_for_twice_is_not_measured() -> None:
    # The text workload on an H100 at --time-budget 110: one compile=default trial took 57 s of it, and no batch size
    # but the workload's own was measured. Its compile timed once (here, remembered from an earlier search): 57 s,
    # and trials measure in 5 s. 40 s in, what is left before the end's reserve cannot pay for the compile and a
    # measurement twice (the trial, and its round should it win): skipped. With 480 s it can: measured. The declared
    # run is long (90 epochs): the compile alone would not lose it.
    clock = [40.0]
    trials = [_trial(BASELINE, 1_000.0, 5.0), _trial(LEADER, 2_000.0, 5.0)]
    valuation = Valuation(remembered_compiles={"default": 57.0})
    compiled = dataclasses.replace(LEADER, compile="default")
    why = compile_cost.why_skip(_setup(trials, clock, budget_s=110.0, epochs=90), compiled, valuation)
    assert why is not None and why.startswith(
        f"{CANNOT_PAY}: its compile (57 s, an earlier search on this GPU model, compile=default) and a measurement "
        f"(5 s), in its trial and again in a final round, need 124 s; the budget has ")
    assert compile_cost.why_skip(_setup(trials, clock, budget_s=480.0, epochs=90), compiled, valuation) is None
    assert compile_cost.why_skip(_setup(trials, clock, budget_s=110.0, epochs=90), LEADER, valuation) is None
    assert compile_cost.why_skip(_setup(trials, clock, budget_s=110.0, epochs=90), compiled, Valuation()) is None


def test_a_compile_its_step_part_made_is_weighed_at_what_its_trial_pays_again() -> None:
    # webdataset_resnet50 on an H100 at its default 480 s: the compiled config predicted fastest was skipped, its
    # compile (30 s, cold, in its step part) and a measurement (41 s) counted twice against 105 s left. Its step part
    # then timed the compile again in its process, as the trial there compiles it: 6 s; the round's fresh process is
    # still counted at the whole compile. Another batch size's compiled step, never compiled, pays it in both.
    from autotune.study.clock.deadline import reserve_s

    trials = [_trial(BASELINE, 1_000.0, 41.0), _trial(LEADER, 3_700.0, 41.0)]
    clock = [0.0]
    clock[0] = 480.0 - 120.0 - reserve_s(_setup(trials, clock, epochs=90))  # 120 s left before the end's reserve
    compiled = dataclasses.replace(LEADER, compile="default", cuda_graph=True)
    other_batch = dataclasses.replace(compiled, batch_size=512)
    cold = Valuation(compiles={"default": 30.0})
    assert compile_cost.why_skip(_setup(trials, clock, epochs=90), compiled, cold) == (
        f"{CANNOT_PAY}: its compile (30 s, a step part, compile=default) and a measurement (41 s), in its trial and "
        f"again in a final round, need 142 s; the budget has 120 s left before the parity check and the final rounds")
    warm = Valuation(compiles={"default": 30.0}, recompiles={step_key(compiled): 6.0})
    assert compile_cost.why_skip(_setup(trials, clock, epochs=90), compiled, warm) is None  # 6 + 30 + 82 = 118 s
    assert compile_cost.why_skip(_setup(trials, clock, epochs=90), other_batch, warm) == (
        f"{CANNOT_PAY}: its compile (30 s, a step part, compile=default) and a measurement (41 s), in its trial and "
        f"again in a final round, need 142 s; the budget has 120 s left before the parity check and the final rounds")


def test_the_plan_ends_early_where_the_rest_of_its_share_would_leave_the_fastest_compiled_config_no_time() -> None:
    # webdataset_resnet50 on an H100: the compiled config was predicted fastest, and the plan spent the rest of its
    # share on loader variants; 105 s were left, and its compile could not pay. Here it needs 118 s (6 s compiling
    # again in its trial, 30 s in its round, two measurements of 41 s) and 120 s are left.
    from autotune.study.clock.deadline import reserve_s
    from autotune.study.planning.plan import yields_to

    trials = [_trial(BASELINE, 1_000.0, 41.0), _trial(LEADER, 3_700.0, 41.0)]
    clock = [0.0]
    clock[0] = 480.0 - 120.0 - reserve_s(_setup(trials, clock, epochs=90))
    setup = _setup(trials, clock, epochs=90)
    compiled = dataclasses.replace(LEADER, compile="default", cuda_graph=True)
    valuation = Valuation(compiles={"default": 30.0}, recompiles={step_key(compiled): 6.0})
    valuation.steps.update({step_key(LEADER): 3_900.0, step_key(compiled): 5_700.0})
    valuation.loaders[loader_key(LEADER)] = 5_000.0
    groups = [[LEADER, compiled]]
    assert yields_to(setup, groups, valuation, 30.0) == compiled  # fits now, and not after 30 s more of the plan
    assert yields_to(setup, groups, valuation, 1.0) is None  # fits after the plan's last second too
    assert yields_to(setup, groups, dataclasses.replace(valuation, recompiles={}), 30.0) is None  # fits neither way
    eager = dataclasses.replace(LEADER, num_workers=8)  # not measured yet, predicted faster than the compiled one
    eager_faster = dataclasses.replace(valuation, steps={step_key(LEADER): 6_000.0, step_key(compiled): 5_700.0},
                                       loaders={loader_key(LEADER): 5_000.0, loader_key(eager): 6_500.0})
    assert yields_to(setup, [[eager, compiled]], eager_faster, 30.0) is None  # the fastest prediction compiles nothing
    ran = _setup([*trials, _trial(compiled, 4_000.0, 41.0)], clock, epochs=90)
    assert yields_to(ran, groups, valuation, 30.0) is None  # measured already: the plan queues it no more
    slow = dataclasses.replace(valuation, steps={step_key(LEADER): 3_900.0, step_key(compiled): 2_000.0})
    assert yields_to(setup, groups, slow, 30.0) is None  # under 70% of the best measured: the plan would not queue it


def test_what_a_host_measured_is_recalled_by_the_next_study_of_the_same_workload(tmp_path: Path) -> None:
    measured = Valuation()
    measured.steps[step_key(LEADER)] = 5_000.0
    measured.loaders[loader_key(LEADER)] = 4_000.0
    measured.compiles["default"] = 38.0
    setup = _setup([], [0.0], tmp=tmp_path)
    assert remembered.sync(setup, measured, None) == (1, 1, 1)
    assert json.loads((tmp_path / remembered.FILE).read_text())["version"] == remembered.VERSION
    later = Valuation()
    assert remembered.sync(_setup([], [0.0], tmp=tmp_path), later, None) == (1, 1, 0)
    assert (later.recalled, later.steps, later.loaders) == (2, measured.steps, measured.loaders)
    assert later.remembered_compiles == {"default": 38.0}
    assert later.predict(LEADER) == 4_000.0
    other = Valuation()  # another workload (its source, DEFAULTS or data set changed): nothing of the first
    remembered.sync(_setup([], [0.0], tmp=tmp_path, digest="def"), other, None)
    assert (other.recalled, other.steps, other.remembered_compiles) == (0, {}, {})


class Parts(FakePool):
    """Parts and trials at made-up rates: a larger batch steps faster; the loader keeps up."""

    asked: list[str] = []

    def run(self, config: Config, lr: float, *args: object, **kwargs: object) -> Outcome:
        return ran(config, 0.9 * (1_000.0 + 10.0 * config.batch_size))

    def parts(self, config: Config, lr: float, which: list[str], timeout_s: float) -> Outcome:
        Parts.asked.append(config.describe())
        made = {"step": 1_000.0 + 10.0 * config.batch_size, "loader": 1e9}
        return Outcome("complete", result={w: {"samples_per_s": made[w], "spread": 0.01, "compile_s": 0.0}
                                           for w in which})


def test_a_second_study_of_the_workload_values_its_plan_from_the_parts_the_first_measured(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.study import pools, search

    monkeypatch.setattr(pools, "TrialPool", Parts)
    Parts.asked = []
    lines: list[str] = []
    options = SearchOptions(trials=16, seed=1, parity_check=False, rounds=1, time_budget_s=None)

    def echo(line: str) -> None:
        lines.append(line)
        if line.startswith("plan: "):
            Parts.asked.append(line)

    def plan_of(asked: list[str]) -> tuple[int, int]:
        """The parts a plan measured, and the configs it valued."""
        valuing, valued = [a for a in asked if a.startswith("plan: ")]
        return asked.index(valued) - asked.index(valuing) - 1, int(valued.split()[1])

    search("tiny", dataclasses.replace(options, study="first"), echo=echo)
    first_parts, first_valued = plan_of(Parts.asked)
    Parts.asked = []
    search("tiny", dataclasses.replace(options, study="second"), echo=echo)
    second_parts, second_valued = plan_of(Parts.asked)
    assert "part rate(s) known from earlier searches here" in next(a for a in Parts.asked if a.startswith("plan: "))
    # Every part the first plan measured is known: the second measures only what the first skipped, if anything.
    assert second_parts < first_parts and second_valued >= first_valued


def _valued(config: Config, predicted: float) -> optuna.trial.FrozenTrial:
    return create_trial(state=TrialState.PRUNED, params={"x": 0.0}, distributions={"x": FloatDistribution(0, 1)},
                        user_attrs={"role": VALUED_ROLE, "config": dataclasses.asdict(config),
                                    "predicted_samples_per_s": predicted})


def test_patience_does_not_end_the_trials_while_the_plan_predicted_a_faster_config_that_never_ran() -> None:
    faster, slower, tried = Config(1024, num_workers=4), Config(512, num_workers=4), Config(2048, num_workers=4)
    trials = [_trial(BASELINE, 1_000.0, 5.0), _valued(slower, 1_010.0), _valued(faster, 3_000.0),
              _valued(tried, 5_000.0), _trial(tried, 900.0, 5.0)]
    setup = _setup(trials, [0.0])
    found = patience.predicted_faster(setup.study.get_trials(), setup.config_of)
    assert found is not None and setup.config_of(found) == faster
    # Once it has been taken (whatever it became), it is not asked for again: the trials may end.
    setup.study.add_trial(_trial(BASELINE, 1_000.0, 5.0, predicted_of=found.number))
    assert patience.predicted_faster(setup.study.get_trials(), setup.config_of) is None


def test_the_trials_end_in_time_for_the_leader_and_the_baseline_to_be_measured_twice() -> None:
    # The H100 ResNet-50 search whose winner rested on one round (stated 3,140/s, timed by hand 3,676/s): the trials
    # reserved only the first round. Trials of 18 s (the baseline) and 16 s (the leader), each measured again as long.
    clock = [300.0]
    setup = _setup([_trial(BASELINE, 1_000.0, 18.0), _trial(LEADER, 4_000.0, 16.0)], clock)
    while not out_of_time(setup):
        clock[0] += 1.0
    clock[0] += 17.0  # the last trial started runs to its end

    class Rounds:
        def run(self, config: Config, lr: float, windows: object, fresh: bool = False,
                limit_s: float | None = None) -> Outcome:
            clock[0] += {BASELINE: 18.0, LEADER: 16.0}[config]
            return Outcome("complete", result={"samples_per_s": 1.0})

    setup.echo = lambda line: None
    results = measure_rounds(setup, SimpleNamespace(rounds=[Rounds()], trials=SimpleNamespace(stop=lambda: None)),
                             [LEADER])  # type: ignore[arg-type]
    assert [len(results[c]) for c in (BASELINE, LEADER)] == [2, 2]
    assert clock[0] <= 480.0


def test_a_winner_on_one_round_says_so_and_why() -> None:
    setup = _setup([], [0.0], budget_s=90.0)
    results = Measured({BASELINE: [{}, {}], LEADER: [{}]})
    results.failed = {}
    assert rests_on_one(setup, LEADER, results) == "the time budget (90 s) left no time for a second"
    results.failed = {LEADER: 1}
    assert rests_on_one(setup, LEADER, results) == "its other round failed (see above)"
    assert rests_on_one(setup, BASELINE, results) is None
    setup.options = SearchOptions(rounds=1)
    assert rests_on_one(setup, LEADER, results) is None, "--rounds 1 asked for one"


def test_the_check_may_take_what_the_budget_holds_past_the_final_rounds() -> None:
    # 40 s into 90: the first round (the baseline's 10 s, the leader's 8 s) and both measured again (18 s) leave 14 s,
    # 4 s of it the check's own share still: 10 s to spare. Without a budget, none: the share is no bound then.
    clock = [40.0]
    trials = [_trial(BASELINE, 1_000.0, 10.0), _trial(LEADER, 4_000.0, 8.0)]
    assert spare_s(_setup(trials, clock, budget_s=90.0), check_left_s=4.0) == pytest.approx(10.0)
    assert spare_s(_setup(trials, clock, budget_s=None), check_left_s=4.0) == 0.0


def test_the_budget_line_says_where_each_second_went() -> None:
    spent = Spent(budget_s=90.0, total_s=86.0, setup_s=5.0, plan_s=14.0, trials_s=36.0, parity_s=12.0, rounds_s=19.0)
    assert spent.line() == "budget: 90 s: setup 5 s, plan 14 s, trials 36 s, parity 12 s, final rounds 19 s, unused 4 s"
    record = spent.record()
    assert record == {"setup_s": 5.0, "plan_s": 14.0, "trials_s": 36.0, "parity_s": 12.0, "rounds_s": 19.0,
                      "other_s": 0.0, "total_s": 86.0, "budget_s": 90.0, "unused_s": 4.0}
    assert validate_budget("b", record) == []
    assert validate_budget("b", {"plan_s": -1.0, "lunch_s": 3.0}) == [
        "b.plan_s must be >= 0, but got -1.0",
        "b has unknown key 'lunch_s'; known: budget_s, setup_s, plan_s, trials_s, parity_s, rounds_s, other_s, "
        "total_s, unused_s",
    ]
    over = Spent(budget_s=60.0, total_s=63.0, trials_s=50.0, rounds_s=13.0)
    assert over.line() == "budget: 60 s: trials 50 s, final rounds 13 s, 3 s past it"


def test_a_candidate_s_run_that_stopped_in_time_short_of_the_baseline_s_is_unjudged() -> None:
    from autotune.parity.budget import ParityBudget
    from autotune.parity.run import ParityRun
    from autotune.parity.verdict import ParityRunOutOfTime
    from autotune.study.checks.parity import _InTrialProcesses

    class Short:
        """Every parity run stops in time at 4,096 samples, as a trial process on a busy host stops one."""

        def parity_run(self, config: Config, lr: float, samples: int, probe_batch: int, timeout_s: float,
                       probe_samples: int | None = None) -> Outcome:
            run = ParityRun(config.batch_size, lr, 2.0, 1.9, (4096,), (1.9,), True, timeout_s)
            return Outcome("complete", result=run.as_dict())

    setup = SimpleNamespace(baseline=BASELINE, options=SearchOptions(time_budget_s=90.0))
    measures = _InTrialProcesses(setup, Short())  # type: ignore[arg-type]
    measures.check = SimpleNamespace(budget=ParityBudget(13.5), base=SimpleNamespace(run=None),  # type: ignore[assignment]
                                     probe_samples=4096)
    assert measures.run(BASELINE, 0.1, 8192).samples == 4096, "the baseline's short run sets every run's length"
    with pytest.raises(ParityRunOutOfTime, match=r"^timeout: it reached 4,096 of its 8,192 samples within 14 s, what "
                                                 r"was left of the check's time$"):
        measures.run(Config(512, num_workers=4), 0.2, 8192)


def test_a_later_run_takes_spare_time_only_up_to_three_baseline_runs() -> None:
    # The 2-core host: the baseline's run took 7.3 s of a 14 s share, and the search could spare 40 s more. A streaming
    # candidate's run, given all of it, reached 31,744 of its 56,832 samples in 42 s: the trials' time for nothing.
    from autotune.parity.budget import ParityBudget
    from autotune.study.checks.parity import _InTrialProcesses

    budget = ParityBudget(13.5, spare_s=lambda: 40.0)
    budget.seconds = budget.last_base_s = 7.3
    setup = SimpleNamespace(baseline=BASELINE, options=SearchOptions(time_budget_s=90.0))
    measures = _InTrialProcesses(setup, None)  # type: ignore[arg-type]
    measures.check = SimpleNamespace(budget=budget, base=SimpleNamespace(run=object()))  # type: ignore[assignment]
    assert measures.timeout() == (pytest.approx(21.9), True)
    measures.check.base.run = None  # the baseline's first run: the share alone
    assert measures.timeout() == (pytest.approx(6.2), True)
