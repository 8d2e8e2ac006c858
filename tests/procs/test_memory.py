"""Memory isolation: a trial never fails oom for memory another autotune process holds on its GPU.

The processes are faked (a GPU is what is expensive): a fake fails oom while another of this search's
processes lives on its device, as a config that fits alone fails beside one that holds memory.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from autotune.config import Config
from autotune.procs import pool as pool_module
from autotune.procs.pool import TrialPool
from autotune.procs.trial_process import Outcome
from autotune.trial.timing import Windows

BESIDE = "oom: asked for 2.00 GiB more, holding 18.02 GiB; 1.25 GiB of 139.81 GiB free"


class _Child:
    """A trial process that holds memory on its device from its start until it has exited."""

    alive: list[_Child] = []
    started: list[_Child] = []

    def __init__(self, workload_path: Path, device: str, cpu_share: int, log_path: Path, env: object = None) -> None:
        self.device, self.used, self.holding, self.stopped, self.killed = device, False, False, False, False
        self.log_path = log_path
        _Child.alive.append(self)
        _Child.started.append(self)

    def run(
        self, config: Config, lr: float, windows: Windows, timeout_s: float, on_window: object = None,
        give_up_s: float | None = None, limit_s: float | None = None,
    ) -> Outcome:
        self.used = self.holding = True
        if any(c is not self and c.device == self.device for c in _Child.alive) or config.batch_size > 1024:
            return Outcome("failed", reason=BESIDE)
        return Outcome("complete", result={"samples_per_s": 1.0})

    def release(self) -> bool:
        self.holding = False  # what it keeps (its context, a small data set) still takes memory
        return True

    def ask_to_exit(self) -> None:
        pass

    def stop(self) -> None:
        self.stopped = True
        self._exit()

    def kill(self) -> None:
        self.killed = True
        self._exit()

    def _exit(self) -> None:
        if self in _Child.alive:
            _Child.alive.remove(self)


@pytest.fixture
def children(monkeypatch: pytest.MonkeyPatch) -> type[_Child]:
    monkeypatch.setattr(pool_module, "TrialProcess", _Child)
    monkeypatch.setattr(pool_module, "_POOLS", pool_module.weakref.WeakSet())  # other tests' pools are not ours
    monkeypatch.setattr(pool_module.oom, "free_before", lambda device: 5 * 2**30 if device.startswith("cuda") else None)
    _Child.alive, _Child.started = [], []
    return _Child


def _pool(tmp_path: Path, device: str, spare: bool = False) -> TrialPool:
    return TrialPool(tmp_path / "w.py", device, 4, tmp_path / "logs", 60.0, spare=spare)


def test_an_oom_beside_other_autotune_processes_is_measured_again_alone(
    tmp_path: Path, children: type[_Child]
) -> None:
    trials, rounds = _pool(tmp_path, "cuda:0", spare=True), _pool(tmp_path, "cuda:0")
    elsewhere = _pool(tmp_path, "cuda:1")
    rounds.prestart(2)  # a round pool's fresh processes, started while the trials run
    elsewhere.prestart(1)  # another GPU's: not in the way
    outcome = trials.run(Config(batch_size=256), 0.1)
    assert outcome.state == "complete"
    *round_children, other_gpu, first, spare, alone = children.started
    assert first.killed and (spare.stopped, [c.stopped for c in round_children]) == (True, [True, True])
    assert (other_gpu.stopped, other_gpu in children.alive, alone.used) == (False, True, True)
    assert (rounds.standby, len(elsewhere.standby), len(trials.standby)) == ([], 1, 0)  # no spare beside the retry
    # The round pool starts a process when it needs one; beside the trial pool's, it too is measured again alone.
    assert rounds.run(Config(batch_size=64), 0.1).state == "complete" and alone.stopped
    for pool in (trials, rounds, elsewhere):
        pool.stop()


def test_an_oom_that_happens_alone_again_says_so(tmp_path: Path, children: type[_Child]) -> None:
    trials = _pool(tmp_path, "cuda:0", spare=True)
    outcome = trials.run(Config(batch_size=4096), 0.1)
    assert (outcome.state, outcome.reason) == (
        "failed",
        f"{BESIDE}; 5.00 GiB free before it began; again alone on cuda:0, after 1 other autotune process(es) there "
        f"exited",
    )
    assert len(children.started) == 3  # the first, its spare, and the fresh one measured alone
    trials.stop()


def test_an_oom_with_no_other_process_on_the_device_is_not_measured_again(
    tmp_path: Path, children: type[_Child]
) -> None:
    trials = _pool(tmp_path, "cuda:0")
    outcome = trials.run(Config(batch_size=4096), 0.1)
    assert (outcome.reason, len(children.started)) == (f"{BESIDE}; 5.00 GiB free before it began", 1)
    trials.stop()


def test_on_a_cpu_an_oom_is_not_measured_again(tmp_path: Path, children: type[_Child]) -> None:
    trials = _pool(tmp_path, "cpu", spare=True)
    outcome = trials.run(Config(batch_size=256), 0.1)  # fails beside its spare
    assert (outcome.reason, len(children.started), len(trials.standby)) == (BESIDE, 2, 1)
    trials.stop()


ORPHAN = """
import os, sys, time
if os.fork() == 0:  # a DataLoader worker that outlives its trial process, in the trial's process group
    time.sleep(60)
    os._exit(0)
sys.exit(0)
"""


def test_a_killed_trial_is_gone_with_its_whole_group_before_the_next_process_starts() -> None:
    # A worker forked from a trial process holds the device's files: the driver frees the trial's memory only
    # once it has exited too. Here the trial has exited already and left its searcher behind.
    from autotune.procs import lifecycle

    proc = subprocess.Popen([sys.executable, "-c", ORPHAN], start_new_session=True)
    proc.wait()
    assert len(lifecycle.group_members(proc.pid)) == 1
    lifecycle.kill(proc, group=True)
    assert lifecycle.group_members(proc.pid) == []


def test_after_a_failed_trial_the_next_waits_until_its_memory_is_free_again(
    tmp_path: Path, children: type[_Child], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The driver gives a killed process's memory back after it has gone: NVML reads 139 GiB free before the
    # trial, 0.46 GiB twice after it was killed, then 139 GiB again.
    reads = iter([139 * 2**30, 0.46 * 2**30, 0.46 * 2**30, 139 * 2**30])
    monkeypatch.setattr(pool_module.oom, "free_before", lambda device: next(reads))
    trials = _pool(tmp_path, "cuda:0")
    assert trials.run(Config(batch_size=4096), 0.1).state == "failed"
    assert next(reads, None) is None  # every read was made before run() returned
    trials.stop()


def test_a_release_that_never_comes_is_waited_for_only_so_long(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.trial import oom

    monkeypatch.setattr(oom, "free_before", lambda device: 2**30)
    assert oom.wait_for_release("cuda:0", 139 * 2**30, timeout_s=0.3) is False
    assert oom.wait_for_release("cuda:0", 3 * 2**30, timeout_s=0.3) is True  # within a context's worth
