"""A loop's parts as the plan asks for them: what a step part makes once, a compile timed again from the cache, and a
loader part that takes no more of the loader's output than it had ready."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from autotune.config import Config
from autotune.trial import parts
from autotune.trial.runner import Runner
from autotune.workloads import RecipeRef, load

FIXTURES = Path(__file__).parents[1] / "fixtures"


def _runner(fixture: str) -> Runner:
    path = FIXTURES / f"{fixture}.py"
    return Runner(load(RecipeRef(fixture, path, path.with_suffix(".tuned.toml"), False)), torch.device("cpu"))


def _counting(runner: Runner, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The indices the data set is read at, from now on."""
    read: list[int] = []
    kind = type(runner.dataset)
    original = kind.__getitem__

    def counted(self: Any, i: int) -> Any:
        read.append(i)
        return original(self, i)

    monkeypatch.setattr(kind, "__getitem__", counted)
    return read


def test_a_step_part_at_a_batch_made_before_reads_no_sample_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # A ResNet-50 step part decoded a batch of JPEGs in its own process each time, seconds of its cost; the step of
    # another amp, graph or compile at the same batch takes the same batch.
    runner = _runner("tiny")
    read = _counting(runner, monkeypatch)
    lr = 0.05
    parts.step_rate(runner, Config(16), lr)
    assert len(read) == 16
    parts.step_rate(runner, Config(16, cudnn_benchmark=True), lr)
    assert len(read) == 16
    parts.step_rate(runner, Config(32), lr)  # another batch: made anew
    assert len(read) == 48
    batch = runner.part_batch
    assert batch is not None and batch[1][0].shape[0] == 32  # the latest batch is the one kept
    runner.release()  # the process lets go of what it holds while another measures: the batch too
    assert runner.part_batch is None


@pytest.mark.slow
def test_a_compiled_step_part_times_its_compile_again_from_the_cache(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))  # cold: this test's compile is the first
    runner = _runner("compiles")
    made = parts.step_rate(runner, Config(16, compile="default"), 0.05)
    assert made["compile_s"] > 0 and 0 < made["recompile_s"] < made["compile_s"], made
    assert "recompile_s" not in parts.step_rate(runner, Config(16), 0.05)


def test_a_loader_part_takes_untimed_only_what_its_workers_held_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    # A trial takes its workers' whole capacity untimed (workers x prefetch batches: a step slower than its loader
    # fills it). A loader part's copy takes batches as they come, so its queues hold what the warm-up left: at batch
    # 1024 and 15 workers, a whole capacity was 60 batches, 20 s of a ResNet-50 loader part.
    runner = _runner("slow_reads")  # a millisecond a sample: its workers, not the copy, set the pace
    config = Config(32, num_workers=2, prefetch_factor=4, persistent_workers=True)
    held = parts.loader_rate(runner, config, 0.05)
    whole = parts.loader_rate(runner, config, 0.05, dataclasses.replace(parts.PART_WINDOWS, backlog_held=False))
    assert whole["backlog_steps"] >= 8  # 2 workers x 4
    assert held["backlog_steps"] < whole["backlog_steps"]
