"""A stream that reorders itself from pass to pass (an unseeded shuffle buffer) is one whose worker count sets no order
its own run keeps: once the pass check shows a count keeps its samples, the count is judged as a loader knob. A stream
whose order is the same every pass keeps the training run for another worker count.

The streams are real: webdataset pipelines over tar shards written in the test, plain IterableDatasets; the order is
read from them, never declared.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
import torch
import webdataset as wds
from _streams import Shards, fixture

from autotune.config import Config
from autotune.parity import gradients
from autotune.parity.check import ParityCheck
from autotune.parity.run import ParityRun
from autotune.parity.verdict import changes_math, same_math_knobs
from autotune.streams import bounded, passes
from autotune.streams.facts import with_pass_check
from autotune.trial import parts
from autotune.trial.facts import read_facts
from autotune.trial.runner import Runner
from autotune.workloads import load, resolve

BASE = Config(batch_size=16)
WORKERS = Config(batch_size=16, num_workers=2, prefetch_factor=2)


@pytest.fixture
def shards(tmp_path: Path) -> list[str]:
    """4 tar shards of 10 samples each, written by webdataset's TarWriter."""
    return [str(p) for p in fixture("tiny_shards").write_shards(tmp_path / "shards", shards=4, per_shard=10)]


class Reshuffled(Shards):
    """Shards whose samples come in a new order on every pass, as an unseeded shuffle gives them."""

    def __iter__(self):
        items = list(super().__iter__())
        random.Random().shuffle(items)
        yield from items


class Augmented(Shards):
    """Shards in a fixed order whose every sample reads differently each time: noise added, as an augmentation."""

    def __iter__(self):
        for x, i in super().__iter__():
            yield x + torch.rand_like(x), i


def test_a_webdataset_shuffle_buffer_reorders_each_pass_and_a_plain_shard_order_does_not(shards: list[str]) -> None:
    buffered = wds.WebDataset(shards, shardshuffle=False).shuffle(20).decode()
    assert passes.reorders(buffered) is True
    assert passes.reorders(wds.WebDataset(shards, shardshuffle=False).decode()) is False
    # The part the checks read keeps the shuffle buffer (and not the check that a worker got a shard).
    part = bounded.part(buffered, 4)
    assert part is not None
    first, second = ([key for _, key in passes.read(part.dataset, 2)] for _ in range(2))
    assert first != second and sorted(first) == sorted(second)


def test_a_plain_stream_reorders_only_when_its_own_samples_come_back_in_another_order() -> None:
    assert passes.reorders(Reshuffled(shards=4, per_shard=64)) is True
    assert passes.reorders(Shards(shards=4, per_shard=64)) is False
    # New content each read: no sample is read twice alike, so a reordering cannot be told from it.
    assert passes.reorders(Augmented(shards=4, per_shard=64)) is False


def test_a_reordering_streams_worker_count_is_a_loader_knob_and_a_fixed_ones_is_not(streams: Path) -> None:
    workload = load(resolve("tiny_stream"))
    for stream, reorders in ((Reshuffled(shards=4, per_shard=32), True), (Shards(shards=4, per_shard=32), False)):
        facts = with_pass_check(stream, workload, read_facts(stream, workload), most=4)
        assert (facts.stream_refused, facts.stream_reorders, facts.workers_set_order) == ((), reorders, not reorders)
    # A count left unchecked (the check's time ran out) is not known to keep its samples: the order stays the run's.
    unchecked = with_pass_check(Reshuffled(shards=4, per_shard=32), workload,
                                read_facts(Reshuffled(shards=4, per_shard=32), workload), most=4, budget_s=0.0)
    assert "left unchecked" in unchecked.stream_checked and unchecked.workers_set_order is True


def test_on_a_reordering_stream_a_worker_count_passes_with_no_training_run_even_where_runs_would_not_conclude(
    streams: Path,
) -> None:
    runs: list[Config] = []

    def make_run(config: Config, lr: float, samples: int) -> ParityRun:  # the baseline learns nothing: inconclusive
        runs.append(config)
        return ParityRun(config.batch_size, lr, 2.0, 2.0, (samples,), (2.0,), True, 0.0, shuffled_loss=2.0)

    facts = dataclasses.replace(read_facts(Shards(), load(resolve("tiny_stream"))), stream_reorders=True)
    assert facts.workers_set_order is False and changes_math(BASE, WORKERS, same_math_knobs(False)) == []
    check = ParityCheck(BASE, lambda c: 0.05, make_run, [WORKERS], lambda line: None,
                        same_math=same_math_knobs(facts.workers_set_order))
    assert check.select([WORKERS], want=1, max_runs=2) == [WORKERS] and runs == []
    fixed = ParityCheck(BASE, lambda c: 0.05, make_run, [WORKERS], lambda line: None, same_math=same_math_knobs(True))
    # The baseline ran (and once longer), and concluded nothing: the worker count cannot pass.
    assert fixed.select([WORKERS], want=1, max_runs=2) == [] and runs == [BASE, BASE]
    assert fixed.verdicts[WORKERS].reason.startswith("it changes num_workers")


def test_the_numerics_check_judges_amp_on_a_stream_by_its_gradients(streams: Path) -> None:
    # On a reordering stream a config of more workers and bf16 is judged as the map-style one is: by its gradients
    # at the baseline's batch, over batches the stream yields, with no training run.
    fixture("tiny_shards").write_shards(streams / "data" / "tiny_shards")
    run = Runner(load(resolve("tiny_shards")), torch.device("cpu"))
    found = gradients.compare(run.build, BASE, Config(batch_size=16, num_workers=2, amp="bf16"), 0.05, warm_steps=8)
    assert found["finite"] and found["batches"] == gradients.BATCHES and found["warm_steps"] == 8
    assert 0 < found["error"] < found["noise"]


def test_a_streams_loader_rate_is_timed_within_a_pass_not_across_its_end(
    streams: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Timing an epoch's start means reading to the pass's end: on a stream, a whole pass of JPEGs for one part of
    # the plan. Its start is its first batch, which its trials time apart.
    run = Runner(load(resolve("tiny_stream")), torch.device("cpu"))
    seen: list[int] = []
    real = parts.probe

    def watched(label, step, loader, device, windows, count):  # the real probe, its windows noted
        seen.append(windows.boundaries)
        return real(label, step, loader, device, windows, count)

    monkeypatch.setattr(parts, "probe", watched)
    made = parts.loader_rate(run, Config(batch_size=16, num_workers=2, prefetch_factor=2), 0.05)
    assert seen == [0] and made["samples_per_s"] > 0
