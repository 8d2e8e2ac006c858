"""When a search stops starting trials: the end it reserves time for is costed from measurements, not failures."""

from __future__ import annotations

import dataclasses
import datetime
import time
from types import SimpleNamespace

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from autotune.config import COMPILE_ALLOWANCE_S, Config
from autotune.options import SearchOptions
from autotune.procs.trial_process import Outcome
from autotune.study.clock.deadline import out_of_time, trial_limit_s
from autotune.study.rounds import measure_rounds

BASELINE = Config(256, num_workers=4, pin_memory=True)


def _setup(trials: list[tuple[TrialState, float]], elapsed_s: float, budget_s: float = 480.0,
           larger_batch: bool = True, first_wall_s: float | None = None) -> SimpleNamespace:
    """A search `elapsed_s` into its budget whose study holds `trials`: (state, seconds each took)."""
    study = optuna.create_study(direction="maximize")
    for i, (state, seconds) in enumerate(trials):
        # The baseline first, then a larger batch: a config that needs a parity run, so the check is reserved.
        config = BASELINE if i == 0 or not larger_batch else dataclasses.replace(BASELINE, batch_size=512)
        trial = create_trial(
            state=state, value=1_100.0 if state == TrialState.COMPLETE else None,
            params={"x": 0.0}, distributions={"x": FloatDistribution(0, 1)},
            user_attrs={"duration_s": seconds, "config": dataclasses.asdict(config)},
        )
        if i == 0 and first_wall_s is not None:  # the first trial's process started this long before it ended
            trial.datetime_start = trial.datetime_complete - datetime.timedelta(seconds=first_wall_s)
        study.add_trial(trial)
    return SimpleNamespace(
        options=SearchOptions(time_budget_s=budget_s),
        study=study,
        baseline=BASELINE,
        space=SimpleNamespace(domains={"batch_size": [64, 8192]}, normalise=lambda config: config),
        config_of=lambda t: Config.from_dict(t.user_attrs["config"]),
        workload=SimpleNamespace(defaults={"epochs": 1}),
        facts=SimpleNamespace(stream_refused=(), size=60_000),
        started=time.monotonic() - elapsed_s,
        elapsed=lambda: elapsed_s,
    )


def test_a_long_failed_trial_does_not_set_what_a_round_costs() -> None:
    # The H200 ResNet-50 search: the baseline's trial took 10 s, a batch-2048 trial ran out of memory after 63 s,
    # 79 s in. Costing the rounds at the median (36 s) and the check at its uncapped length ended the search there.
    setup = _setup([(TrialState.COMPLETE, 10.0), (TrialState.FAIL, 63.0)], elapsed_s=79.0)
    assert not out_of_time(setup)


def test_the_parity_check_is_reserved_at_most_its_share_of_the_budget() -> None:
    # Four complete trials, so three finalists: a first round of 4 configs at 10 s plus a trial, 50 s, and the
    # baseline and the leader (a median trial while no contender leads) once more, 20 s; the check is capped at 15%
    # of 480 s, 72 s: 142 s of end to reserve.
    assert not out_of_time(_setup([(TrialState.COMPLETE, 10.0)] * 4, elapsed_s=480.0 - 143.0))
    assert out_of_time(_setup([(TrialState.COMPLETE, 10.0)] * 4, elapsed_s=480.0 - 141.0))


def test_no_parity_run_is_reserved_while_every_config_keeps_the_baselines_batch() -> None:
    # Four complete trials at batch 256: amp and compile are judged by their gradients, the rest keep the math, so
    # no training run is reserved: a first round of 4 configs at 10 s, the baseline and the leader again (20 s), plus
    # a trial, 70 s of end.
    same = [(TrialState.COMPLETE, 10.0)] * 4
    assert not out_of_time(_setup(same, elapsed_s=480.0 - 71.0, larger_batch=False))
    assert out_of_time(_setup(same, elapsed_s=480.0 - 69.0, larger_batch=False))


def test_what_the_check_spent_during_the_trials_is_not_reserved_again() -> None:
    # The check's 72 s share, 60 s of it spent judging families during the trials: 12 s of it left to reserve, beside
    # the 70 s of rounds and a trial.
    setup = _setup([(TrialState.COMPLETE, 10.0)] * 4, elapsed_s=480.0 - 83.0)
    assert not out_of_time(setup, check_spent_s=60.0)
    assert out_of_time(setup, check_spent_s=58.0)


def test_the_rounds_first_process_start_is_reserved_only_where_no_training_run_of_the_check_hides_it() -> None:
    # The rounds' processes start as the trials end, beside the check's runs. With a larger batch tried, 72 s of them
    # are reserved and a 15 s start hides behind them: the end is 142 s, as without it. At the baseline's batch no run
    # is left: the 70 s of end and the start, 15 s, beyond the baseline's trial (measured in 10 s, no start of its own).
    assert not out_of_time(_setup([(TrialState.COMPLETE, 10.0)] * 4, elapsed_s=480.0 - 143.0), start_s=15.0)
    assert out_of_time(_setup([(TrialState.COMPLETE, 10.0)] * 4, elapsed_s=480.0 - 141.0), start_s=15.0)
    same = [(TrialState.COMPLETE, 10.0)] * 4
    assert not out_of_time(_setup(same, elapsed_s=480.0 - 86.0, larger_batch=False), start_s=15.0)
    assert out_of_time(_setup(same, elapsed_s=480.0 - 84.0, larger_batch=False), start_s=15.0)


def test_the_rounds_are_costed_for_no_more_finalists_than_configs_have_completed() -> None:
    # The H200 ResNet-50 search on 5 cores, 338 s: two trials of 31 and 37 s, 68 s in. Costed for three finalists
    # (8 rounds of 34 s) it stopped there; one finalist is what it had. Reserved now: a first round of the baseline
    # at its own trial's 31 s and one finalist at the median 34 s, the two measured once more (65 s), a trial (34 s),
    # and the check at its share (50.7 s): 214.7 s. With four complete, three finalists: 282.7 s.
    two = [(TrialState.COMPLETE, 31.0), (TrialState.COMPLETE, 37.0)]
    assert not out_of_time(_setup(two, elapsed_s=123.0, budget_s=338.0))
    assert out_of_time(_setup(two, elapsed_s=124.0, budget_s=338.0))
    assert not out_of_time(_setup(two * 2, elapsed_s=55.0, budget_s=338.0))
    assert out_of_time(_setup(two * 2, elapsed_s=56.0, budget_s=338.0)), "four complete: three finalists"


def test_with_only_failures_the_search_runs_until_the_budget() -> None:
    failed = [(TrialState.FAIL, 63.0), (TrialState.PRUNED, 40.0)]
    assert not out_of_time(_setup(failed, elapsed_s=479.0))
    assert out_of_time(_setup(failed, elapsed_s=480.0))


def test_a_trial_is_given_up_after_twice_the_best_declared_run_and_a_margin() -> None:
    from autotune.study.clock.deadline import give_up_after

    setup = _setup([], elapsed_s=10.0)
    for seconds, epoch_s in ((3.0, 4.0), (1.0, 2.5)):  # declared runs of 10 epochs: 43 s and 26 s
        setup.study.add_trial(create_trial(
            state=TrialState.COMPLETE, value=1_000.0, params={"x": 0.0}, distributions={"x": FloatDistribution(0, 1)},
            user_attrs={"config": dataclasses.asdict(BASELINE),
                        "result": {"samples_per_s": 1_000.0, "epoch_s": epoch_s, "setup_s": seconds}},
        ))
    setup.workload = SimpleNamespace(defaults={"epochs": 10})
    setup.facts = SimpleNamespace(stream_refused=(), size=2_500)
    running = SimpleNamespace(user_attrs={"role": "search"})
    assert give_up_after(setup, running) == (
        2 * 26.0 + 30.0, "the best so far (trial 1) finishes the whole declared run (10 epoch(s)) in 26.0 s"
    )
    assert give_up_after(setup, SimpleNamespace(user_attrs={"role": "baseline"})) is None
    assert give_up_after(_setup([], elapsed_s=0.0), running) is None  # nothing complete yet


def test_the_rounds_after_the_first_keep_to_the_budget() -> None:
    # The H200 ResNet-50 search, 16 cores: its trials' measurements alone costed the rounds at half what they took,
    # and the second round was still measuring 568 s into a 480 s budget.
    clock = [400.0]
    lines: list[str] = []

    class Pool:
        def run(self, config: Config, lr: float, windows: object, fresh: bool = False,
                limit_s: float | None = None) -> Outcome:
            clock[0] += 20.0
            return Outcome("complete", result={"samples_per_s": 1000.0})

    finalist = Config(256, num_workers=16, pin_memory=True)
    setup = SimpleNamespace(options=SearchOptions(time_budget_s=480.0, rounds=3), elapsed=lambda: clock[0],
                            study=optuna.create_study(direction="maximize"),
                            lr=lambda config: 0.1, windows=None, baseline=BASELINE, echo=lines.append,
                            workload=SimpleNamespace(defaults={"epochs": 10}),
                            facts=SimpleNamespace(stream_refused=(), size=51_200))
    pools = SimpleNamespace(rounds=[Pool()], trials=SimpleNamespace(stop=lambda: None))
    results = measure_rounds(setup, pools, [finalist])  # type: ignore[arg-type]
    # Round 1 ends at 440 s, round 2 at 480 s: a third would end at 520 s.
    assert [len(results[c]) for c in (BASELINE, finalist)] == [2, 2] and clock[0] == 480.0
    assert lines[-1] == (
        "  round 3 not run: the last took 40 s, and the search's time budget (480 s) would not cover another"
    )
    clock[0] = 470.0
    results = measure_rounds(setup, pools, [finalist])  # type: ignore[arg-type]
    assert [len(results[c]) for c in (BASELINE, finalist)] == [1, 1], "the first round runs whatever the clock"


Runs = list[tuple[Config, bool]]  # the configs a fake pool was asked to run, each with whether it was fresh


def _rounds_of(seconds: dict[Config, float], rates: dict[Config, list[float | None]], clock: list[float],
               budget_s: float = 480.0, limits: list[float | None] | None = None,
               ) -> tuple[SimpleNamespace, SimpleNamespace, list[str], Runs]:
    """A search's rounds on a fake pool: each config's run takes its `seconds` on `clock` and reads its next rate
    (None: it fails); also the runs asked of the pool, each with whether it wanted a fresh process. `limits` gets
    the seconds each run's measurement was asked to end by."""
    lines: list[str] = []
    runs: Runs = []

    class Pool:
        def run(self, config: Config, lr: float, windows: object, fresh: bool = False,
                limit_s: float | None = None) -> Outcome:
            clock[0] += seconds[config]
            runs.append((config, fresh))
            if limits is not None:
                limits.append(limit_s)
            rate = rates[config].pop(0)
            if rate is None:
                return Outcome("failed", reason="crashed: trial process killed by signal SIGKILL")
            return Outcome("complete", result={"samples_per_s": rate})

    # Each config's trial took what its run takes here (autotune.study.clock.round_cost costs a first round by them).
    study = optuna.create_study(direction="maximize")
    for config, took in seconds.items():
        study.add_trial(create_trial(state=TrialState.COMPLETE, value=1.0, params={"x": 0.0},
                                     distributions={"x": FloatDistribution(0, 1)},
                                     user_attrs={"duration_s": took, "config": dataclasses.asdict(config)}))
    setup = SimpleNamespace(options=SearchOptions(time_budget_s=budget_s, rounds=2), elapsed=lambda: clock[0],
                            lr=lambda config: 0.1, windows=None, baseline=BASELINE, echo=lines.append,
                            workload=SimpleNamespace(defaults={"epochs": 10}),
                            facts=SimpleNamespace(stream_refused=(), size=51_200),
                            study=study, config_of=lambda t: Config.from_dict(t.user_attrs["config"]))
    return setup, SimpleNamespace(rounds=[Pool()], trials=SimpleNamespace(stop=lambda: None)), lines, runs


LEADER, DECODE, GRAPH = (Config(256, num_workers=15, pin_memory=True), Config(256, num_workers=15, decode="gpu"),
                         Config(256, num_workers=15, cuda_graph=True))


def test_a_round_the_budget_cannot_cover_measures_the_baseline_and_the_leader_again() -> None:
    # The H200 ResNet-50 search: round 1 took 95 s (the baseline 18 s, the leader 16 s, a gpu-decode finalist 25 s
    # and a graph one 36 s) and the 480 s budget left no room for a second, so its speed-up rested on one process
    # a side; the baseline's read 1,297/s, hand loops on the same host 899-1,124/s. What the budget covers of
    # round 2 measures the leader and the baseline again, the first in a fresh process, as a round does: the leader
    # first, since its rate is the one the profile states.
    seconds = {BASELINE: 18.0, LEADER: 16.0, DECODE: 25.0, GRAPH: 36.0}
    rates: dict[Config, list[float | None]] = {BASELINE: [1_297.0, 1_000.0], LEADER: [4_205.0, 3_700.0],
                                               DECODE: [2_953.0], GRAPH: [2_726.0]}
    clock = [340.0]
    setup, pools, lines, runs = _rounds_of(seconds, rates, clock)
    results = measure_rounds(setup, pools, [LEADER, DECODE, GRAPH])  # type: ignore[arg-type]
    assert {c: [r["samples_per_s"] for r in results[c]] for c in results} == {
        BASELINE: [1_297.0, 1_000.0], LEADER: [4_205.0, 3_700.0], DECODE: [2_953.0], GRAPH: [2_726.0]}
    assert runs[4:] == [(LEADER, True), (BASELINE, False)]
    assert clock[0] == 340.0 + 95.0 + 16.0 + 18.0
    assert lines[-3:] == [
        f"  round 2:        3,700/s  {LEADER.describe()}",
        f"  round 2:        1,000/s  {BASELINE.describe()}",
        "  round 2 run in part: the last took 95 s, and the search's time budget (480 s) would not cover another; "
        f"measured again: {LEADER.describe()}, {BASELINE.describe()}",
    ]


def test_a_leader_that_falls_behind_when_measured_again_is_followed_by_the_new_one_while_the_budget_covers_it() -> None:
    # `LEADER` leads at 4,000/s; measured again at 3,000/s its median (3,500/s) falls behind DECODE's 3,800/s.
    # Round 1 takes 95 s; then LEADER 16 s, DECODE 25 s (the new leader, its rate now the stated one) and the
    # baseline 18 s, as far as 480 s covers them.
    seconds = {BASELINE: 18.0, LEADER: 16.0, DECODE: 25.0, GRAPH: 36.0}
    said = f"measured again: {LEADER.describe()}"
    for start, again, end in (
        (320.0, [LEADER, DECODE, BASELINE], f"{said}, {DECODE.describe()}, {BASELINE.describe()}"),
        (340.0, [LEADER, DECODE], f"{said}, {DECODE.describe()}; the leader, {DECODE.describe()}, rests on 2 "
                                  "process(es), the baseline on 1"),
        (360.0, [LEADER], said),
        (370.0, [], "would not cover another"),
    ):
        rates: dict[Config, list[float | None]] = {BASELINE: [1_000.0, 1_000.0], LEADER: [4_000.0, 3_000.0],
                                                   DECODE: [3_800.0, 3_900.0], GRAPH: [2_000.0]}
        clock = [start]
        setup, pools, lines, runs = _rounds_of(seconds, rates, clock)
        results = measure_rounds(setup, pools, [LEADER, DECODE, GRAPH])  # type: ignore[arg-type]
        assert [len(results[c]) for c in (BASELINE, LEADER, DECODE, GRAPH)] == [
            1 + (c in again) for c in (BASELINE, LEADER, DECODE, GRAPH)], start
        assert runs[4:] == [(c, i == 0) for i, c in enumerate(again)]
        assert clock[0] == start + 95.0 + sum(seconds[c] for c in again) <= 480.0
        assert lines[-1].startswith(f"  round 2 {'run in part' if again else 'not run'}: the last took 95 s, "), start
        assert lines[-1].endswith(end), lines[-1]


def test_a_measurement_again_that_fails_is_not_named_as_measured_and_the_leader_is_not_tried_twice() -> None:
    seconds = {BASELINE: 18.0, LEADER: 16.0, DECODE: 25.0, GRAPH: 36.0}
    rates: dict[Config, list[float | None]] = {BASELINE: [1_000.0, 1_050.0], LEADER: [4_000.0, None],
                                               DECODE: [3_800.0], GRAPH: [2_000.0]}
    clock = [300.0]
    setup, pools, lines, runs = _rounds_of(seconds, rates, clock)
    results = measure_rounds(setup, pools, [LEADER, DECODE, GRAPH])  # type: ignore[arg-type]
    assert runs[4:] == [(LEADER, True), (BASELINE, False)]
    assert [len(results[c]) for c in (BASELINE, LEADER, DECODE, GRAPH)] == [2, 1, 1, 1]
    assert lines[-3:] == [
        f"  round 2: {LEADER.describe()} failed: crashed: trial process killed by signal SIGKILL",
        f"  round 2:        1,050/s  {BASELINE.describe()}",
        "  round 2 run in part: the last took 95 s, and the search's time budget (480 s) would not cover another; "
        f"measured again: {BASELINE.describe()}; the leader, {LEADER.describe()}, rests on 1 process(es), the "
        "baseline on 2",
    ]


def test_a_round_is_costed_with_the_fresh_process_it_starts() -> None:
    # The H200 ResNet-50 search: the baseline's trial took 43 s in the study, 15 s of it measuring; the rounds then
    # took 131 s for four configs where four trials' 15 s had been reserved. The baseline's trial, its process's
    # start in it, costs its 43 s; three finalists to come a median trial each (15 s): 88 s; the baseline measured
    # again in a process the rounds started already, at its trial's 15 s, and the leader at a median trial's (30 s);
    # and a trial's 15 s.
    trials = [(TrialState.COMPLETE, 15.0)] * 4
    assert not out_of_time(_setup(trials, elapsed_s=480.0 - 134.0, larger_batch=False, first_wall_s=43.0))
    assert out_of_time(_setup(trials, elapsed_s=480.0 - 132.0, larger_batch=False, first_wall_s=43.0))
    assert not out_of_time(_setup(trials, elapsed_s=480.0 - 106.0, larger_batch=False)), "no start: 105 s of end"


def test_a_contender_is_reserved_at_its_own_trial_s_time_not_the_median() -> None:
    # The H200 ResNet-50 search: its trials measured 11-15 s, its compiled one took 56 s in the study (the compile),
    # and its first round ran from 444 s to 569 s. Three trials of 12 s and a faster compiled one of 56 s reserve a
    # round of the baseline (12 s), the compiled contender (56 s) and two finalists to come at the median (12 s
    # each), the baseline and the contender measured again (12 s each: its compile is in the measurement's 12 s
    # here), and a trial: 128 s of end. At the median alone it was 60 s.
    setup = _setup([(TrialState.COMPLETE, 12.0)] * 3, elapsed_s=0.0, larger_batch=False)
    compiled = dataclasses.replace(BASELINE, compile="default")
    trial = create_trial(state=TrialState.COMPLETE, value=4_573.0, params={"x": 0.0},
                         distributions={"x": FloatDistribution(0, 1)},
                         user_attrs={"duration_s": 12.0, "config": dataclasses.asdict(compiled)})
    trial.datetime_start = trial.datetime_complete - datetime.timedelta(seconds=56.0)
    setup.study.add_trial(trial)
    setup.elapsed = lambda: 480.0 - 129.0
    assert not out_of_time(setup)
    setup.elapsed = lambda: 480.0 - 127.0
    assert out_of_time(setup)


def test_a_first_round_the_budget_cannot_cover_measures_the_baseline_and_the_leader_and_says_what_it_left_out() -> None:
    # The H200 ResNet-50 search's first round ran from 444 s to 569 s of its 480 s budget: its finalists were all
    # measured, whatever the budget said. At 420 s, the baseline (18 s) and the leader (16 s) are measured; the
    # gpu-decode finalist (25 s) would end the search at 479 s, and the graph one (36 s) after its budget.
    seconds = {BASELINE: 18.0, LEADER: 16.0, DECODE: 25.0, GRAPH: 36.0}
    rates: dict[Config, list[float | None]] = {BASELINE: [1_297.0], LEADER: [4_205.0], DECODE: [2_953.0],
                                               GRAPH: [2_726.0]}
    clock = [420.0]
    limits: list[float | None] = []
    setup, pools, lines, runs = _rounds_of(seconds, rates, clock, limits=limits)
    results = measure_rounds(setup, pools, [LEADER, GRAPH, DECODE])  # type: ignore[arg-type]
    assert runs == [(BASELINE, True), (LEADER, False), (DECODE, False)]
    # Each measurement may take its share of what is left (60 s over four, 42 s over three, 26 s for the last),
    # never less than its own trial took.
    assert limits == [18.0, 16.0, 26.0]
    assert [len(results[c]) for c in (BASELINE, LEADER, GRAPH, DECODE)] == [1, 1, 0, 1]
    assert clock[0] == 420.0 + 18.0 + 16.0 + 25.0
    assert lines[-2] == ("  round 1: not measured, the search's time budget (480 s) would not cover them: "
                         f"{GRAPH.describe()}")


def test_a_rounds_measurement_ends_by_what_the_budget_has_left_never_under_its_trials_time() -> None:
    # hf_stream_text at 90 s on the 2-core CPU: no config beat the baseline, whose trial measured in 4 s; its round,
    # 66 s in, read on to its stream's pass end (its rate then let the pass fit in 40 s) and took 41 s, ending the
    # search 17 s past its budget with one round. Now it may take what is left, 24 s, and round 2 the 20 s after it.
    clock = [66.0]
    limits: list[float | None] = []
    rates: dict[Config, list[float | None]] = {BASELINE: [818.0, 800.0, 810.0, 805.0]}
    setup, pools, lines, runs = _rounds_of({BASELINE: 4.0}, rates, clock, budget_s=90.0, limits=limits)
    results = measure_rounds(setup, pools, [])  # type: ignore[arg-type]
    assert limits == [24.0, 20.0] and len(results[BASELINE]) == 2 and clock[0] == 74.0
    limits.clear()
    setup.options = SearchOptions(time_budget_s=None, rounds=2)
    measure_rounds(setup, pools, [])  # type: ignore[arg-type]
    assert limits == [None, None]  # no budget: the trial's own limit


def test_a_rounds_measurement_keeps_its_trials_time_where_that_is_longer_than_its_share() -> None:
    # As above, with a baseline whose trial measured in 30 s: the 24 s left would cut it shorter than the end's
    # reserve costed it, so it keeps its 30 s; the search then ends past its budget with one round, as it reserved.
    clock = [66.0]
    limits: list[float | None] = []
    setup, pools, lines, runs = _rounds_of({BASELINE: 30.0}, {BASELINE: [818.0]}, clock, budget_s=90.0,
                                           limits=limits)
    results = measure_rounds(setup, pools, [])  # type: ignore[arg-type]
    assert limits == [30.0] and len(results[BASELINE]) == 1


def test_a_trials_measurement_ends_by_a_quarter_of_the_budget_a_compile_aside() -> None:
    setup = SimpleNamespace(options=SearchOptions(time_budget_s=90.0))
    assert trial_limit_s(setup, BASELINE) == 22.5  # type: ignore[arg-type]
    compiled = dataclasses.replace(BASELINE, compile="default")
    assert trial_limit_s(setup, compiled) == 22.5 + COMPILE_ALLOWANCE_S["default"]  # type: ignore[arg-type]
    assert trial_limit_s(SimpleNamespace(options=SearchOptions(time_budget_s=None)), BASELINE) is None  # type: ignore[arg-type]


def test_a_first_round_on_a_later_pool_still_measures_the_baseline_and_the_leader_whatever_the_rotation() -> None:
    # Under --gpus a second device's first round is round 2, its order rotated by one: the leader first, then a
    # finalist, the last, and the baseline. The budget covers none beyond the two the speed-up is made of.
    from autotune.study.rounds import _round

    seconds = {BASELINE: 18.0, LEADER: 16.0, DECODE: 25.0, GRAPH: 36.0}
    rates: dict[Config, list[float | None]] = {c: [1_000.0] for c in seconds}
    clock = [440.0]
    setup, pools, lines, runs = _rounds_of(seconds, rates, clock)
    results: dict[Config, list[dict[str, float]]] = {c: [] for c in seconds}
    took = _round(setup, pools.rounds[0], 1, [BASELINE, LEADER, GRAPH, DECODE], results, first=True)  # type: ignore[arg-type]
    assert runs == [(LEADER, True), (BASELINE, False)]
    assert set(took) == {LEADER, BASELINE}
    assert lines[-1] == ("  round 2: not measured, the search's time budget (480 s) would not cover them: "
                         f"{GRAPH.describe()}, {DECODE.describe()}")


def test_a_compiled_trial_that_compiled_again_where_its_part_compiled_costs_its_round_the_whole_compile() -> None:
    # webdataset_resnet50 on an H100: the compiled trial compiled in 1.5 s, in the process its step part had compiled
    # in (32.8 s); its round, in a fresh process, took 63 s. The round is costed at the trial's wall and the rest of
    # the part's compile.
    from autotune.study.clock import round_cost

    compiled = dataclasses.replace(BASELINE, amp="bf16", cuda_graph=True, compile="default")
    setup = _setup([(TrialState.COMPLETE, 40.0)], elapsed_s=0.0)
    trial = create_trial(state=TrialState.COMPLETE, value=3_531.0, params={"x": 0.0},
                         distributions={"x": FloatDistribution(0, 1)},
                         user_attrs={"duration_s": 28.0, "config": dataclasses.asdict(compiled),
                                     "result": {"compile_s": 1.5}, round_cost.FRESH_COMPILE: 32.8})
    assert round_cost.config_s(setup, [trial], compiled, 30.0) == 28.0 + 31.3
    trial.user_attrs.pop(round_cost.FRESH_COMPILE)  # a trial that paid its whole compile itself: its wall says it
    assert round_cost.config_s(setup, [trial], compiled, 30.0) == 28.0


def test_a_compiled_trial_keeps_its_step_part_s_whole_compile_where_it_compiled_again_for_less() -> None:
    from optuna.trial import FixedTrial

    from autotune.study.clock.round_cost import FRESH_COMPILE
    from autotune.study.planning.valuation import Valuation
    from autotune.study.trials import _note_fresh_compile

    compiled = dataclasses.replace(BASELINE, amp="bf16", cuda_graph=True, compile="default")
    parts = Valuation(compiles={"default": 32.8})
    again, whole, eager = FixedTrial({}), FixedTrial({}), FixedTrial({})
    _note_fresh_compile(again, compiled, {"compile_s": 1.5}, parts)  # again, in the part's process
    _note_fresh_compile(whole, compiled, {"compile_s": 35.0}, parts)  # a fresh process: it paid the whole itself
    _note_fresh_compile(eager, BASELINE, {"compile_s": 0.0}, parts)
    assert (again.user_attrs, whole.user_attrs, eager.user_attrs) == ({FRESH_COMPILE: 32.8}, {}, {})


def test_the_trials_end_where_the_leader_s_fresh_compile_a_judging_by_gradients_and_an_unhidden_start_are_due() -> None:
    # webdataset_resnet50 on an H100 (480 s): the baseline's trial measured 38 s (41 s of wall), the compiled leader's
    # 30 s (32 s), its compile 2 s again where its step part had compiled it in 44 s. Trial 8 then started 254 s in,
    # and after it its judging by gradients (22 s; the leader's had taken 29 s); the checks needed no training run,
    # so the rounds' processes started as the end began, unhidden (the baseline's round took 57 s); and the leader's
    # second measurement compiles afresh as its first did (62 s). 163 s were left where about 285 s were needed.
    # Reserved now: round 1, the baseline's 41 s and the leader's 32 + 42 s; the two again, 38 s and 30 + 42 s; the
    # start beyond the baseline's wall, 38 + 15 - 41 = 12 s; a trial (the median, 34 s) and its judging, 29 s: 300 s.
    from autotune.study.clock import round_cost

    compiled = dataclasses.replace(BASELINE, amp="bf16", cuda_graph=True, compile="default")
    setup = _setup([], elapsed_s=0.0)
    for config, value, measured, wall, attrs in (
        (BASELINE, 972.0, 38.0, 41.0, {"result": {"samples_per_s": 972.0}}),
        (compiled, 3_110.0, 30.0, 32.0, {"result": {"samples_per_s": 3_110.0, "compile_s": 2.0},
                                         round_cost.FRESH_COMPILE: 44.0}),
    ):
        trial = create_trial(state=TrialState.COMPLETE, value=value, params={"x": 0.0},
                             distributions={"x": FloatDistribution(0, 1)},
                             user_attrs={"duration_s": measured, "config": dataclasses.asdict(config), **attrs})
        trial.datetime_start = trial.datetime_complete - datetime.timedelta(seconds=wall)
        setup.study.add_trial(trial)
    complete = setup.study.get_trials()
    assert round_cost.measure_s(setup, complete, compiled, 34.0) == 30.0 + 42.0  # a round's process compiles afresh
    for elapsed, ends in ((179.0, False), (181.0, True), (254.0, True)):
        setup.elapsed = lambda elapsed=elapsed: elapsed
        assert out_of_time(setup, gradients_s=29.0, start_s=15.0) is ends, elapsed
    # Before any process reported its start-up, none is reserved: the same end 12 s later.
    setup.elapsed = lambda: 179.0 + 12.0
    assert not out_of_time(setup, gradients_s=29.0)
    setup.elapsed = lambda: 181.0 + 12.0
    assert out_of_time(setup, gradients_s=29.0)


def test_a_contender_the_parity_check_rejected_is_not_reserved_a_round() -> None:
    # text_transformer at --time-budget 110 on an H100: batch 256 and batch 64 were rejected, and the end still
    # reserved their rounds, so the check had nothing to spare for batch 64's next rate; 33 s of the budget went
    # unused. Here a contender at batch 512 whose trial took 60 s of wall: rejected, its finalist slot costs a median
    # trial (10 s) instead, and the leader's second measurement a median trial too.
    from autotune.study import standing
    from autotune.study.checks.families import math_family
    from autotune.study.clock.deadline import reserve_s

    setup = _setup([(TrialState.COMPLETE, 10.0)], elapsed_s=100.0)
    wide = dataclasses.replace(BASELINE, batch_size=512)
    trial = create_trial(state=TrialState.COMPLETE, value=4_000.0, params={"x": 0.0},
                         distributions={"x": FloatDistribution(0, 1)},
                         user_attrs={"duration_s": 10.0, "config": dataclasses.asdict(wide)})
    trial.datetime_start = trial.datetime_complete - datetime.timedelta(seconds=60.0)
    setup.study.add_trial(trial)
    kept = reserve_s(setup)
    standing.record(setup.study, math_family(wide))
    assert kept - reserve_s(setup) == pytest.approx(50.0)
