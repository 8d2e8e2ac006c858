"""A config that holds at least what one that ran out of memory held is not run."""

from __future__ import annotations

import pytest

from autotune.config import Config
from autotune.study.planning import memory
from autotune.study.planning.predict import PREDICTED

# The H200 ResNet-50 search: batch 2048, fp32, no graph, decoded on the host, ran out of memory (trial 1).
FAILED = Config(2048, num_workers=8, pin_memory=True, persistent_workers=True, prefetch_factor=2, cudnn_benchmark=True)
OOM = "oom: asked for 1.53 GiB more, holding 139.33 GiB; 411.12 MiB of 139.80 GiB free"


@pytest.mark.parametrize(("config", "skipped"), [
    # Trials 7 and 16 of that search: four times the batch, decoded on the device, one with a graph.
    (Config(8192, num_workers=16, decode="gpu", pin_memory=True, prefetch_factor=1, cudnn_benchmark=True,
            channels_last=True), True),
    (Config(8192, num_workers=15, decode="gpu", pin_memory=True, prefetch_factor=5, channels_last=True,
            cuda_graph=True), True),
    (Config(2048, num_workers=2, cudnn_benchmark=True), True),  # the loader knobs hold no device memory
    (Config(2048, cudnn_benchmark=False), False),  # another algorithm choice at the same batch may fit
    (Config(4096, amp="bf16"), False),  # half the width per activation: trial 10, which then ran out itself
    (Config(1024, cudnn_benchmark=True), False),
])
def test_a_config_is_skipped_when_it_holds_at_least_what_an_oom_held(config: Config, skipped: bool) -> None:
    why = memory.why_skip(config, [(1, FAILED, OOM)])
    assert (why is not None) == skipped
    if skipped:
        assert why == f"{PREDICTED}: it holds at least what trial 1 ({FAILED.describe()}) held, which ran out of " \
                      f"device memory"


def test_only_an_out_of_memory_failure_rules_a_config_out() -> None:
    crash = "crashed: trial process killed by signal SIGKILL"
    assert memory.why_skip(Config(8192), [(1, FAILED, crash)]) is None


def test_a_graph_or_device_decode_that_ran_out_does_not_rule_out_a_config_without_it() -> None:
    assert memory.why_skip(Config(4096), [(3, Config(2048, cuda_graph=True), OOM)]) is None
    assert memory.why_skip(Config(4096), [(3, Config(2048, decode="gpu"), OOM)]) is None
    assert memory.why_skip(Config(4096), [(3, Config(2048, placement="device"), OOM)]) is None


def test_the_summary_counts_the_memory_skips_only() -> None:
    reasons = [memory.why_skip(Config(8192), [(1, Config(2048), OOM)]) or "", f"{PREDICTED}: its loader makes", OOM]
    assert memory.summary(reasons) == "memory: 1 config(s) skipped, each holding at least what a config that ran " \
                                      "out of memory held"
    assert memory.summary([OOM]) is None
