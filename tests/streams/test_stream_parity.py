"""A stream's worker count is its data order: a config that changes only num_workers on a stream is judged by the
parity check's training runs, not passed as the baseline's math, and a rejected worker count is a math family the
search skips. On a data set read by index the worker count stays a loader knob, as before."""

from __future__ import annotations

from types import SimpleNamespace

import optuna
from _streams import Shards

from autotune.config import Config
from autotune.parity.check import ParityCheck
from autotune.parity.run import ParityRun, probe
from autotune.parity.verdict import SAME_MATH_KNOBS, changes_math, same_math_knobs
from autotune.study import standing
from autotune.study.checks.families import SKIPPED, FamilyGate, math_family

BASE = Config(batch_size=16)
WORKERS = Config(batch_size=16, num_workers=2, prefetch_factor=2)
WORKERS_PREFETCH = Config(batch_size=16, num_workers=2, prefetch_factor=4)  # the same order as WORKERS
ONE_WORKER = Config(batch_size=16, num_workers=1, prefetch_factor=2)


def test_a_streams_worker_count_changes_its_math_and_no_other_loader_knob_does() -> None:
    assert same_math_knobs(False) == SAME_MATH_KNOBS
    assert "num_workers" in SAME_MATH_KNOBS and "num_workers" not in same_math_knobs(True)
    assert changes_math(BASE, WORKERS, same_math_knobs(True)) == ["num_workers"]
    assert changes_math(BASE, WORKERS, same_math_knobs(False)) == []
    assert changes_math(WORKERS, WORKERS_PREFETCH, same_math_knobs(True)) == []
    assert math_family(WORKERS, same_math_knobs(True)) != math_family(BASE, same_math_knobs(True))
    assert math_family(WORKERS) == math_family(BASE)


def _runs(candidate_loss: float) -> tuple[object, list[tuple[Config, float, int]]]:
    """Training runs: the baseline learns half its initial loss 2.0; every candidate ends at `candidate_loss`."""
    calls: list[tuple[Config, float, int]] = []

    def make_run(config: Config, lr: float, samples: int) -> ParityRun:
        calls.append((config, lr, samples))
        loss = 1.0 if config == BASE else candidate_loss
        return ParityRun(config.batch_size, lr, 2.0, loss, (samples,), (loss,), True, 0.0, shuffled_loss=1.9)

    return make_run, calls


def test_a_worker_count_alone_is_judged_by_a_run_on_a_stream_and_passes_without_one_otherwise() -> None:
    make_run, calls = _runs(candidate_loss=1.0)
    stream = ParityCheck(BASE, lambda c: 0.05, make_run, [WORKERS], lambda line: None, same_math=same_math_knobs(True))
    assert stream.select([WORKERS, WORKERS_PREFETCH], want=2, max_runs=2) == [WORKERS, WORKERS_PREFETCH]
    assert [c for c, _, _ in calls] == [BASE, WORKERS]  # one run for the order; prefetch shares its verdict
    verdict = stream.verdicts[WORKERS]
    assert (verdict.family, verdict.tolerance, verdict.deviation) == ("loader", 0.05, 0.0)
    assert stream.record(WORKERS_PREFETCH)["deviation"] == 0.0  # a verdict from its run, not "the baseline's math"

    make_run, calls = _runs(candidate_loss=1.0)
    indexed = ParityCheck(BASE, lambda c: 0.05, make_run, [WORKERS], lambda line: None)
    assert indexed.select([WORKERS], want=1, max_runs=2) == [WORKERS]
    assert calls == []  # the baseline's math: passed on the baseline's numerics, no run at all
    assert indexed.verdicts[WORKERS].deviation is None


def test_a_rejected_worker_count_is_a_family_the_search_skips_and_another_count_is_measured() -> None:
    make_run, _ = _runs(candidate_loss=1.5)  # another order that learns far less: beyond the loader's ±5%
    check = ParityCheck(BASE, lambda c: 0.05, make_run, [WORKERS], lambda line: None, same_math=same_math_knobs(True))
    assert check.select([WORKERS], want=1, max_runs=1) == []
    assert check.verdicts[WORKERS].word == "REJECT"
    gate = FamilyGate()
    gate.check = check
    study = optuna.create_study(direction="maximize")
    setup = SimpleNamespace(baseline=BASE, study=study, storage=study._storage, study_name=study.study_name)
    gate._rejected(setup, WORKERS, queue=False)
    # The study keeps the family too: a trial of it holds no best for the rules that weigh against one.
    assert standing.rejected_families(study) == [dict(math_family(WORKERS, same_math_knobs(True)))]
    assert gate.why_skip(setup, WORKERS_PREFETCH) == (
        f"{SKIPPED}: its math family was rejected: see {WORKERS.describe()}")
    assert gate.why_skip(setup, ONE_WORKER) is None  # one worker yields the stream in its own order: measured
    assert gate.summary() == "parity: 1 math family(ies) judged during the trials, 1 rejected"


def test_the_probe_set_of_an_endless_stream_holds_each_sample_once() -> None:
    class Endless(Shards):
        def __iter__(self):
            while True:
                yield from super().__iter__()

    drawn = probe(Endless(shards=2, per_shard=8), samples=100)
    assert len(drawn) == 16 and sorted(int(s[1]) for s in drawn.samples) == list(range(16))
