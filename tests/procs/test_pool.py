"""Trials in real child processes: a result, and a one-line reason for each way a trial can fail."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from autotune.config import Config
from autotune.procs import lifecycle
from autotune.procs import pool as pool_module
from autotune.procs.pool import TrialPool, cudnn_plan_key
from autotune.procs.trial_process import INTERRUPTED, Outcome, TrialProcess
from autotune.trial.timing import Windows

QUICK = Windows(warmup_steps=1, window_s=0.01, min_windows=2, max_windows=3, boundaries=1)
TINY_OOM = "oom: asked for 2.00 GiB"  # tests/fixtures/tiny.py's fake "CUDA out of memory. Tried to allocate 2.00 GiB"


def _pool(project: Path, timeout_s: float = 60.0) -> TrialPool:
    return TrialPool(project / "recipes" / "tiny.py", "cpu", 2, project / ".autotune" / "logs", timeout_s)


def test_a_healthy_child_serves_several_trials(project: Path) -> None:
    pool = _pool(project)
    try:
        first = pool.run(Config(batch_size=16), 0.05, QUICK)
        second = pool.run(Config(batch_size=32, placement="device"), 0.1, QUICK)
    finally:
        pool.stop()
    assert (first.state, second.state) == ("complete", "complete")
    assert first.result is not None and first.result["samples_per_s"] > 0
    assert second.result is not None and second.result["materialize_s"] > 0
    assert pool.children_started == 1


def test_pruning_answer_stops_the_trial(project: Path) -> None:
    pool = _pool(project)
    try:
        outcome = pool.run(
            Config(batch_size=16),
            0.05,
            Windows(warmup_steps=1, window_s=0.01, min_windows=5, max_windows=8),
            on_window=lambda i, r: True,
        )
    finally:
        pool.stop()
    assert outcome.state == "pruned" and len(outcome.windows) == 1


@pytest.mark.slow
def test_a_trial_whose_windows_never_agree_ends_at_its_time_limit_with_what_they_showed(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its steps are slow (20 ms) in every other block of 200, so its windows never agree. Measured to the end, its
    80 windows (each an epoch of 128 steps at most) would outlast the 20 s timeout, and the trial would fail as one,
    telling the search nothing: unlimited, they took 81 s on a 2-core machine; limited (to its timeout's share, about
    16 s here), a few windows. The limit applies from the second window on, which a busy host stretches: beside two
    busy loops on 2 cores it took 6.3-6.9 s alone, and an 8 s timeout failed 2 runs of 6. (Slow in every other
    0.2 s of the clock instead, a whole measurement of fast steps once fit in one fast 0.2 s.)"""
    monkeypatch.setenv("TINY_FAIL", "erratic")
    pool = _pool(project, timeout_s=20.0)
    try:
        outcome = pool.run(Config(batch_size=4), 0.05,
                           Windows(warmup_steps=1, window_s=1.0, max_windows=60, extra_windows=20, boundaries=1))
    finally:
        pool.stop()
    assert outcome.state == "complete", outcome.reason
    assert outcome.result is not None and outcome.result["time_limited"] is True
    assert 2 <= len(outcome.windows) < 80
    assert outcome.result["measure_s"] < 20.0


@pytest.mark.parametrize(
    "fail,config,reason",
    [
        ("oom", Config(batch_size=64), "oom"),
        ("getitem", Config(batch_size=16), "error: ValueError: cannot read sample"),
        ("kill_worker", Config(batch_size=16, num_workers=1, prefetch_factor=2), "worker died: DataLoader worker (pid"),
    ],
)
def test_failures_end_the_trial_with_a_reason_and_replace_the_child(
    project: Path, monkeypatch: pytest.MonkeyPatch, fail: str, config: Config, reason: str
) -> None:
    monkeypatch.setenv("TINY_FAIL", fail)
    pool = _pool(project)
    try:
        outcome = pool.run(config, 0.05, QUICK)
        assert pool.child is None  # a failed child is not trusted with the next trial
    finally:
        pool.stop()
    assert outcome.state == "failed"
    assert outcome.reason is not None and outcome.reason.startswith(reason)


def test_a_hanging_step_times_out_and_the_next_trial_still_runs(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINY_FAIL", "hang")  # forward never returns at batch >= 64
    pool = _pool(project, timeout_s=1.0)  # it hangs: a second tells as much as a minute
    try:
        hung = pool.run(Config(batch_size=64), 0.05, QUICK)
        pool.timeout_s = 120.0  # the healthy trial must not race a short limit on a busy machine
        after = pool.run(Config(batch_size=16), 0.05, QUICK)
    finally:
        pool.stop()
    assert (hung.state, hung.reason) == ("failed", "timeout: no result within 1 s")
    assert after.state == "complete"
    assert pool.children_started == 2


def test_a_spare_started_beside_the_first_child_replaces_a_failed_one_at_once(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TINY_FAIL", "oom")  # batch >= 64 fails
    pool = TrialPool(project / "recipes" / "tiny.py", "cpu", 2, project / ".autotune" / "logs", 60.0, spare=True)
    try:
        assert pool.run(Config(batch_size=16), 0.05, QUICK).state == "complete"
        assert (pool.children_started, len(pool.standby)) == (2, 1)  # the first child and its spare, started together
        spare_pid = pool.standby[0].proc.pid
        assert pool.run(Config(batch_size=64), 0.05, QUICK).reason == TINY_OOM
        after = pool.run(Config(batch_size=16), 0.05, QUICK)
        assert after.state == "complete"
        assert pool.child is not None and pool.child.proc.pid == spare_pid  # the spare took over
        # It was waited for by no one, so no new spare started beside it: none starts while a trial measures.
        assert (pool.children_started, pool.standby) == (2, [])
        assert pool.run(Config(batch_size=64), 0.05, QUICK).reason == TINY_OOM
        assert pool.run(Config(batch_size=16), 0.05, QUICK).state == "complete"  # a start waited for, with a new spare
        assert (pool.children_started, len(pool.standby)) == (4, 1)
    finally:
        pool.stop()
    assert pool.standby == [] and pool.child is None


def test_fresh_trials_take_prestarted_children_in_order(project: Path) -> None:
    pool = _pool(project)
    try:
        assert pool.run(Config(batch_size=16), 0.05, QUICK).state == "complete"
        first = pool.child
        pool.prestart(2)
        waiting = [c.proc.pid for c in pool.standby]
        assert len(waiting) == 2 and pool.children_started == 3
        for pid in waiting:
            assert pool.run(Config(batch_size=16), 0.05, QUICK, fresh=True).state == "complete"
            assert pool.child is not None and pool.child.proc.pid == pid
        assert first is not None and first.proc.wait(timeout=60) == 0  # the used child was asked to go, and went
        assert pool.children_started == 3
    finally:
        pool.stop()


def test_the_log_says_what_start_up_cost_and_a_crash_reason_never_quotes_it(project: Path) -> None:
    import signal

    pool = _pool(project)
    try:
        assert pool.run(Config(batch_size=16), 0.05, QUICK).state == "complete"
        assert pool.child is not None
        log, first_start_s = pool.child.log_path, pool.startup_s
        os.kill(pool.child.proc.pid, signal.SIGKILL)
        pool.child.proc.wait()
        crashed = pool.run(Config(batch_size=16), 0.05, QUICK)
    finally:
        pool.stop()
    assert (crashed.state, crashed.reason) == ("failed", "crashed: trial process killed by signal SIGKILL")
    lines = log.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("[autotune] trial process ") and " on cpu: ready " in lines[0], lines
    took = re.search(
        r"ready ([\d.]+) s after launch \(forked ([\d.]+) s, imports [\d.]+ s, workload and cpu start-up [\d.]+ s, "
        r"data set [\d.]+ s\)$",
        lines[0],
    )
    # torch was imported once, by the fork server, before it forked this process
    assert took is not None and 0 <= float(took[2]) <= float(took[1]), lines[0]
    # The pool keeps the start-up its process reported from its fork (the fork server's own start left out, which only
    # the first children wait for): the search reserves one for the rounds' first process.
    assert abs(first_start_s - (float(took[1]) - float(took[2]))) <= 0.11, (first_start_s, lines[0])


def test_stopping_children_that_never_ran_leaves_the_disk_as_it_was(project: Path) -> None:
    """Processes started ahead of a search that then stops on bad input: no log, no folder left behind."""
    before = sorted(p.relative_to(project) for p in project.rglob("*"))
    pool = _pool(project)
    pool.prestart(2)
    for child in pool.standby:
        assert child._start() is None  # ready: each log now holds its start-up line
        assert child.log_path.read_text().startswith("[autotune] trial process ")
    assert (project / ".autotune" / "logs").is_dir()
    pool.stop()
    assert sorted(p.relative_to(project) for p in project.rglob("*")) == before


def test_discarding_a_pool_removes_the_logs_of_children_that_ran_but_wrote_nothing(project: Path) -> None:
    """A --gpus searcher dismissed after it made the parity baseline run: nothing of the abandoned search stays."""
    before = sorted(p.relative_to(project) for p in project.rglob("*"))
    pool = _pool(project)
    assert pool.run(Config(batch_size=16), 0.05, QUICK).state == "complete"
    pool.stop(discard=True)
    assert sorted(p.relative_to(project) for p in project.rglob("*")) == before


def test_only_a_log_of_our_own_lines_is_removed(tmp_path: Path) -> None:
    from autotune.procs.trial_process import remove_if_only_notes
    from autotune.trial.serve import NOTE

    quiet, told = tmp_path / "quiet.log", tmp_path / "told.log"
    quiet.write_text(f"{NOTE}trial process 1 on cpu: ready\n\n")
    told.write_text(f"{NOTE}trial process 2 on cpu: ready\nTraceback (most recent call last):\nValueError: bad\n")
    remove_if_only_notes(quiet)
    remove_if_only_notes(told)
    assert (quiet.exists(), told.exists()) == (False, True)


def test_stopping_keeps_the_logs_of_children_that_ran_something(project: Path) -> None:
    pool = _pool(project)
    try:
        assert pool.run(Config(batch_size=16), 0.05, QUICK).state == "complete"
        pool.prestart(1)
    finally:
        pool.stop()
    logs = sorted((project / ".autotune" / "logs").iterdir())
    assert len(logs) == 1 and logs[0].name.startswith(f"trial-process-{os.getpid()}-")


def test_a_child_asked_for_nothing_leaves_no_log_even_one_its_failed_start_up_wrote(project: Path) -> None:
    """A search started ahead of its checks stops on a workload that fails to import; the process it had started
    fails on the same import, and its traceback in the log must not outlive the search (bad input leaves no file).
    Seen in a CI run: `.autotune/logs/trial-process-8325-14.log`, its traceback written before the stop."""
    broken = project / "recipes" / "broken.py"
    broken.write_text("import torch\n\nimport no_such_module_here\n")
    pool = TrialPool(broken, "cpu", 1, project / ".autotune" / "logs", 60.0)
    pool.prestart(1)
    child = pool.standby[0]
    deadline = time.monotonic() + 60
    while "no_such_module_here" not in (child.log_path.read_text() if child.log_path.exists() else ""):
        assert time.monotonic() < deadline, "the child never wrote its failure"
        time.sleep(0.1)
    pool.stop()
    assert not child.log_path.exists()
    assert not (project / ".autotune").exists(), "nor the folders its log made"


@pytest.mark.e2e
@pytest.mark.slow
def test_a_search_takes_the_processes_started_early_for_it(project: Path) -> None:
    from autotune.options import SearchOptions
    from autotune.study import search

    pool = TrialPool(
        project / "recipes" / "tiny.py", "cpu", len(os.sched_getaffinity(0)), project / ".autotune" / "logs", 60.0
    )
    pool.prestart(1)
    first = pool.standby[0]
    options = SearchOptions(trials=3, finalists=1, rounds=1, parity_check=False)
    assert search("tiny", options, echo=lambda line: None, early=pool) is not None
    assert first.used and first.proc.poll() is not None, (
        "the search ran its trials in the child started ahead, then stopped it"
    )
    assert first.log_path.exists()


def test_a_search_stops_processes_started_on_a_wrong_guess_and_starts_its_own(project: Path) -> None:
    from autotune.options import SearchOptions
    from autotune.study import search

    cores = len(os.sched_getaffinity(0))
    pool = TrialPool(
        project / "recipes" / "tiny.py", "cpu", cores + 7, project / ".autotune" / "logs", 60.0
    )  # not this share
    pool.prestart(1)
    first = pool.standby[0]
    options = SearchOptions(trials=3, finalists=1, rounds=1, parity_check=False)
    assert search("tiny", options, echo=lambda line: None, early=pool) is not None
    assert not first.used and first.proc.poll() is not None
    assert not first.log_path.exists(), "a child that never ran leaves no log"


class _RecordingChild:
    """Stands in for a trial process (its start-up is what is expensive); records what it was asked to do."""

    started: list[_RecordingChild] = []
    events: list[tuple[str, int]] = []  # (what it was asked, which process), in order, across pools

    def __init__(
        self, workload_path: Path, device: str, cpu_share: int, log_path: Path, env: dict[str, str] | None = None
    ) -> None:
        self.log_path, self.seen, self.used, self.holding = log_path, [], False, False
        self.quitting = self.stopped = self.killed = False
        self.released, self.lets_go = 0, True
        _RecordingChild.started.append(self)

    def run(
        self, config: Config, lr: float, windows: Windows, timeout_s: float, on_window: object = None,
        give_up_s: float | None = None, limit_s: float | None = None,
    ) -> Outcome:
        self.used = self.holding = True
        self.seen.append(config.cudnn_benchmark)
        return (
            Outcome("failed", reason="oom")
            if config.batch_size >= 4096
            else Outcome("complete", result={"samples_per_s": 1.0})
        )

    def release(self) -> bool:
        self.released += 1
        self.holding = not self.lets_go
        return self.lets_go

    def ask_to_exit(self) -> None:
        self.quitting = True
        _RecordingChild.events.append(("quit", _RecordingChild.started.index(self)))

    def stop(self) -> None:
        self.stopped = True
        _RecordingChild.events.append(("stop", _RecordingChild.started.index(self)))

    def kill(self) -> None:
        self.killed = True


def test_on_a_gpu_configs_that_disagree_on_cudnn_benchmark_never_share_a_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # cuDNN reuses the convolution plans a process chose first, whatever cudnn.benchmark says later.
    monkeypatch.setattr(pool_module, "TrialProcess", _RecordingChild)
    monkeypatch.setattr(pool_module.oom, "free_before", lambda device: None)  # no GPU to ask
    started = _RecordingChild.started = []
    on, off = Config(batch_size=1024, cudnn_benchmark=True), Config(batch_size=1024)
    keys = (cudnn_plan_key(on, "cuda:1"), cudnn_plan_key(off, "cuda:1"), cudnn_plan_key(on, "cpu"))
    assert keys == (True, False, None)
    pool = TrialPool(tmp_path / "w.py", "cuda:0", 4, tmp_path / "logs", 60.0)
    for config in (off, on, off, on):
        assert pool.run(config, 0.1).state == "complete"
    assert [c.seen for c in started] == [[False, False], [True, True]]  # each process kept, for its class only
    # Before one measures, the other lets go of its device memory: the first twice, the second once.
    assert [c.released for c in started] == [2, 1]

    pool.prestart(2)
    assert pool.run(on, 0.1, fresh=True).state == "complete"  # a finalist round: fresh processes for both classes
    assert pool.run(off, 0.1).state == "complete"
    assert [(c.quitting, c.stopped) for c in started[:2]] == [(True, True)] * 2  # both asked at once, then waited for
    assert [c.seen for c in started[2:]] == [[True], [False]]

    # An oom beside the other process: that one is stopped, and the config measured once more alone (it fails again).
    too_big = pool.run(Config(batch_size=4096, cudnn_benchmark=True), 0.1)
    assert too_big.reason == "oom; again alone on cuda:0, after 1 other autotune process(es) there exited"
    assert (started[2].killed, started[3].stopped, started[4].seen, started[4].killed) == (True, True, [True], True)
    assert pool.child is None
    assert pool.run(off, 0.1).state == "complete" and started[5].seen == [False]

    started[5].lets_go = False  # a process that cannot let go of its memory is not kept beside another
    assert pool.run(on, 0.1).state == "complete"
    assert started[5].killed and len(started) == 7 and started[6].seen == [True]
    pool.stop()
    # The failed ones and the one that held on were killed; the oom's neighbour was stopped then.
    assert [c.stopped for c in started] == [True, True, False, True, False, False, True]


def test_pools_stopped_together_ask_every_process_to_quit_before_waiting_for_any(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The end of a search: the trial pool and the rounds' pools; each exit tears a CUDA context down.
    monkeypatch.setattr(pool_module, "TrialProcess", _RecordingChild)
    started = _RecordingChild.started = []
    events = _RecordingChild.events = []
    pools = [TrialPool(tmp_path / "w.py", f"cuda:{d}", 4, tmp_path / "logs", 60.0) for d in (0, 1)]
    for pool in pools:
        for config in (Config(batch_size=64), Config(batch_size=64, cudnn_benchmark=True)):
            assert pool.run(config, 0.1).state == "complete"
    pools[1].prestart(1)  # never used: killed, not asked
    lifecycle.stop_all(pools)
    assert [e for e in events if e[0] == "quit"][:4] == [("quit", 0), ("quit", 1), ("quit", 2), ("quit", 3)]
    assert events.index(("quit", 3)) < min(events.index(("stop", i)) for i in range(4))
    assert [c.stopped for c in started] == [True, True, True, True, False] and started[4].killed
    assert all(pool.live == {} and pool.standby == [] for pool in pools)


def test_a_killed_pool_kills_its_processes_and_runs_nothing_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pool_module, "TrialProcess", _RecordingChild)
    started = _RecordingChild.started = []
    pool = TrialPool(tmp_path / "w.py", "cuda:0", 4, tmp_path / "logs", 60.0)
    for config in (Config(batch_size=64), Config(batch_size=64, cudnn_benchmark=True)):
        assert pool.run(config, 0.1).state == "complete"
    pool.kill()  # Ctrl-C while a round measures, from another thread
    assert [c.killed for c in started] == [True, True] and pool.live == {}
    assert pool.run(Config(batch_size=64), 0.1).reason == INTERRUPTED
    assert pool.parity_run(Config(batch_size=64), 0.1, 1024, 16, 60.0).reason == INTERRUPTED
    assert len(started) == 2, "no process started after the interruption"


def test_an_idle_child_lets_go_of_its_device_resident_data_set_on_request(project: Path) -> None:
    pool = _pool(project)
    try:
        assert pool.run(Config(batch_size=32, placement="device"), 0.1, QUICK).state == "complete"
        child = pool.child
        assert child is not None and child.holding
        child._send({"cmd": "release"})
        assert child._read(time.monotonic() + 60) == {"event": "released", "datasets": 1}
        assert child.release() and not child.holding  # nothing left to drop, and it says so
        again = pool.run(Config(batch_size=32, placement="device"), 0.1, QUICK)  # builds its copy again
        assert again.state == "complete" and pool.child is child
    finally:
        pool.stop()


@pytest.mark.parametrize("gpu_gib,dropped", [(2, 1), (8, 0)])
def test_on_a_gpu_an_idle_child_drops_its_data_set_only_if_it_is_not_small(
    gpu_gib: int, dropped: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MNIST on the device (188 MB) is 9% of a 2 GiB GPU, dropped; 2.3% of an 8 GiB one, kept (KEEP_SHARE 5%).
    import types

    import torch

    from autotune.trial.runner import Runner

    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(total_memory=gpu_gib * 2**30)
    )
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)  # no GPU here: the rule is what is tested
    runner = Runner.__new__(Runner)
    runner.device = torch.device("cuda", 0)
    runner._device_tensors = {"plain": ((torch.zeros(60000, 1, 28, 28), torch.zeros(60000, dtype=torch.long)), 0.3)}
    assert runner.release() == dropped
    assert len(runner._device_tensors) == 1 - dropped


@pytest.mark.slow
def test_a_trial_past_its_give_up_time_is_pruned_and_the_next_runs_in_a_fresh_child(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TINY_FAIL", "hang")  # a first step that never ends: no window ever comes
    pool = _pool(project, timeout_s=120.0)
    try:
        stuck = pool.run(Config(batch_size=64), 0.05, QUICK, give_up_s=3.0)
        after = pool.run(Config(batch_size=16), 0.05, QUICK, give_up_s=60.0)
    finally:
        pool.stop()
    assert stuck.state == "pruned" and stuck.windows == ()
    assert re.fullmatch(r"given up at [34] s, before its first window", stuck.reason or ""), stuck.reason
    assert after.state == "complete"
    assert pool.children_started == 2


@pytest.mark.parametrize(("limit_s", "sent_s"), [(22.5, 22.5), (100.0, 72.0), (None, 72.0)])
def test_a_trials_measurement_is_asked_to_end_by_the_clocks_limit_where_that_is_sooner(
    monkeypatch: pytest.MonkeyPatch, limit_s: float | None, sent_s: float
) -> None:
    # The search's clock (autotune.study.clock.deadline) may ask for less than 80% of the trial's 90 s limit.
    sent: list[dict[str, object]] = []
    child = TrialProcess.__new__(TrialProcess)  # no process: what it is asked is what is under test
    child.ready = True
    monkeypatch.setattr(child, "_send", sent.append)
    monkeypatch.setattr(child, "_read", lambda deadline: {"event": "result", "result": {"stopped_early": False}})
    outcome = child.run(Config(batch_size=16), 0.1, Windows(), 90.0, limit_s=limit_s)
    assert outcome.state == "complete" and sent[0]["time_limit_s"] == sent_s
