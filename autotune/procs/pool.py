"""A pool of trial processes on one device: which process serves which request, and replacing failed ones.

An OOM, a CUDA error, a hang, a dead DataLoader worker or any exception ends
that trial as ``failed`` with a one-line reason; the search goes on. A healthy
trial process serves the next trial (CUDA start-up and the data set are paid
once); a failed or timed-out one is killed with its whole process group and
replaced.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import threading
import weakref
from collections.abc import Callable
from pathlib import Path

from autotune.config import Config
from autotune.procs import lifecycle
from autotune.procs.trial_process import GAVE_UP, INTERRUPTED, Outcome, TrialProcess, remove_if_only_notes
from autotune.trial import oom
from autotune.trial.timing import Windows

_PROCESS_NUMBERS = itertools.count(1)
# Every pool of this process (a search's trial pool and its round pools): an oom looks here for the
# other autotune processes on its device.
_POOLS: weakref.WeakSet[TrialPool] = weakref.WeakSet()


def _is_oom(outcome: Outcome) -> bool:
    return outcome.state == "failed" and (outcome.reason or "").startswith(oom.OOM)


def cudnn_plan_key(config: Config, device: str) -> bool | None:
    """Which of a pool's trial processes may measure `config`: one per `cudnn.benchmark` value on a GPU.

    cuDNN keeps, per process, the convolution plan it chose for each shape and dtype,
    and reuses it for every later convolution of that shape whatever `cudnn.benchmark`
    then says. So in one process the first config of a batch size decides the plans of
    all that follow, and a benchmark-off config measures as fast as the benchmark-on one
    that ran before it in its process, and the reverse (docs/scale-out.md has the runs).
    """
    return config.cudnn_benchmark if device.startswith("cuda") else None


class TrialPool:
    """Runs trials one at a time, reusing a healthy child and replacing a failed one.

    A child serves only configs of one `cudnn_plan_key`, so no config measures plans
    another chose; on a GPU a pool can hold two, one for each `cudnn.benchmark` value.
    Starting a child (Python, torch, a CUDA context, the data set) takes seconds
    while the GPU idles, so children can be started ahead: `prestart(n)` keeps n
    unused ones in standby, and with `spare` every start the pool must wait for
    starts a spare beside it, ready to replace the next failed child at once.
    The spare never starts while this pool measures; `prestart` callers choose their moment.
    """

    def __init__(
        self,
        workload_path: Path,
        device: str,
        cpu_share: int,
        log_dir: Path,
        timeout_s: float,
        env: dict[str, str] | None = None,
        spare: bool = False,
    ) -> None:
        self.workload_path, self.device, self.cpu_share = workload_path, device, cpu_share
        log_dir = log_dir.absolute()  # processes start from a thread too, while the working folder may change
        self.log_dir, self.timeout_s, self.env, self.spare = log_dir, timeout_s, env, spare
        self.live: dict[bool | None, TrialProcess] = {}  # by plan class: healthy children that ran something
        self.standby: list[TrialProcess] = []  # started, never used: fresh, of no class yet
        self._starting: threading.Thread | None = None  # prestart_in_background's
        self.children_started = 0
        self.startup_s = 0.0  # the longest any child took from its fork to ready: what a fresh process's start costs
        self._current: bool | None = None  # the plan class of the latest request
        self.killed = False  # killed (the search was interrupted): every later request fails at once
        self._made_dirs: list[Path] | None = None  # folders the first child's log created, deepest first
        self._busy = False  # a request is under way: its processes are not another pool's to stop
        _POOLS.add(self)

    @property
    def child(self) -> TrialProcess | None:
        """The child that took the latest request, while it is alive and trusted."""
        return self.live.get(self._current)

    def _start_child(self) -> TrialProcess:
        if self._made_dirs is None:
            self._made_dirs = [d for d in (self.log_dir, *self.log_dir.parents) if not d.exists()]
        self.children_started += 1
        log = (
            self.log_dir / f"trial-process-{os.getpid()}-{next(_PROCESS_NUMBERS)}.log"
        )  # unique across this process's pools
        return TrialProcess(self.workload_path, self.device, self.cpu_share, log, self.env)

    def prestart(self, n: int) -> None:
        """Start children now, up to `n` in standby, for trials that want a fresh one (finalist rounds)."""
        self._wait_for_background_starts()
        while len(self.standby) < n:
            self.standby.append(self._start_child())

    def prestart_in_background(self, n: int) -> None:
        """`prestart(n)` from a thread: the first fork waits for the fork server to import torch, and the
        process that asks (the command line, before its own imports) must not wait with it."""
        self._wait_for_background_starts()
        self._starting = threading.Thread(target=self.prestart, args=(n,), name="trial-process-starts", daemon=True)
        self._starting.start()

    def _wait_for_background_starts(self) -> None:
        starting = self._starting
        if starting is None or starting is threading.current_thread():
            return  # nothing under way, or this is the thread that starts them
        starting.join()
        self._starting = None

    def _child(self, fresh: bool, config: Config) -> TrialProcess:
        self._wait_for_background_starts()
        if fresh:  # fresh processes for every class; none still tearing down while the next one measures
            lifecycle.stop_all(list(self.live.values()))
            self.live.clear()
        self._current = cudnn_plan_key(config, self.device)
        for key, other in list(self.live.items()):
            # One process at a time holds device memory beyond its context: what a single process would have.
            if key != self._current and other.holding and not other.release():
                self.live.pop(key).kill()
        if self._current not in self.live:
            if self.standby:
                self.live[self._current] = self.standby.pop(0)
            else:
                self.live[self._current] = self._start_child()
                if self.spare:
                    self.prestart(1)  # starts beside the one we wait for: no extra wait, no measurement disturbed
        return self.live[self._current]

    def _drop_if_failed(self, outcome: Outcome) -> Outcome:
        given_up = (outcome.reason or "").startswith(GAVE_UP)  # killed at its give-up time
        if (outcome.state == "failed" or given_up) and self._current in self.live:
            self.live.pop(self._current).kill()
        return outcome

    def run(
        self,
        config: Config,
        lr: float,
        windows: Windows = Windows(),
        on_window: Callable[[int, float], bool] | None = None,
        fresh: bool = False,
        give_up_s: float | None = None,
        limit_s: float | None = None,
    ) -> Outcome:
        """Measure `config` in a trial process; `give_up_s`: prune it once it has taken that long; `limit_s`: the
        seconds its measurement should end by, where sooner than its timeout says (see TrialProcess)."""
        if self.killed:
            return Outcome("failed", reason=INTERRUPTED)
        return self._alone_after_oom(lambda: self._child(fresh, config).run(config, lr, windows, self.timeout_s,
                                                                            on_window, give_up_s, limit_s))

    def parity_run(self, config: Config, lr: float, samples: int, probe_batch: int, timeout_s: float,
                   probe_samples: int | None = None) -> Outcome:
        """A parity run in a trial process: a crash, an OOM or a hang fails it, as it fails a trial."""
        if self.killed:
            return Outcome("failed", reason=INTERRUPTED)
        return self._alone_after_oom(lambda: self._child(False, config).parity_run(config, lr, samples, probe_batch,
                                                                                   timeout_s, probe_samples))

    def parts(self, config: Config, lr: float, which: list[str], timeout_s: float) -> Outcome:
        """`config`'s step and loader rates apart, in a trial process (autotune.trial.parts)."""
        if self.killed:
            return Outcome("failed", reason=INTERRUPTED)
        return self._alone_after_oom(lambda: self._child(False, config).parts(config, lr, which, timeout_s))

    def inputs_check(self, config: Config, timeout_s: float) -> Outcome:
        """The inputs check of the device decode path, in a trial process built for `config` (decode = gpu)."""
        if self.killed:
            return Outcome("failed", reason=INTERRUPTED)
        return self._alone_after_oom(lambda: self._child(False, config).inputs_check(timeout_s))

    def numerics_check(self, baseline: Config, config: Config, lr: float, timeout_s: float) -> Outcome:
        """The numerics check of `config`'s amp against `baseline`'s fp32, in a trial process built for `config`."""
        if self.killed:
            return Outcome("failed", reason=INTERRUPTED)
        return self._alone_after_oom(lambda: self._child(False, config).numerics_check(baseline, config, lr,
                                                                                       timeout_s))

    def _alone_after_oom(self, attempt: Callable[[], Outcome]) -> Outcome:
        """`attempt`, and once more alone on the device if it failed `oom` beside another autotune process there.

        A trial must not fail oom for memory another autotune process holds. Before a request the pool's other
        process lets go of what it can (`_child`), but what remains is not nothing: its CUDA context, a small
        device-resident data set it keeps (autotune.trial.runner.KEEP_SHARE), a spare's context, a round pool's
        fresh processes started beside the parity check. Reading per-process memory would need NVML's pids,
        which are the host's in a container. So the rule is simple and sound: after an oom on a GPU, every
        other process of this search on the device is stopped (its memory, context included, is the driver's
        again once it has exited) and the request runs once more in a fresh process, with no spare beside it.
        An oom then is the config's own; the reason says so. A later request starts what it needs again.
        """
        outcome = self._attempt(attempt)
        if not (self.device.startswith("cuda") and _is_oom(outcome)) or self.killed:
            return outcome
        neighbours = self._take_neighbours()
        if not neighbours:
            return outcome
        lifecycle.stop_all(neighbours)
        spare, self.spare = self.spare, False
        try:
            again = self._attempt(attempt)
        finally:
            self.spare = spare
        if not _is_oom(again):
            return again
        return dataclasses.replace(
            again,
            reason=f"{again.reason}; again alone on {self.device}, after {len(neighbours)} other autotune "
            f"process(es) there exited",
        )

    def _attempt(self, attempt: Callable[[], Outcome]) -> Outcome:
        free = oom.free_before(self.device)
        self._busy = True
        try:
            made = attempt()
            started = getattr(self.live.get(self._current), "startup_s", None)  # None: a stand-in's, or not up
            if started is not None:
                self.startup_s = max(self.startup_s, started)
            outcome = self._drop_if_failed(made)
        finally:
            self._busy = False
        if _is_oom(outcome) and free is not None:
            outcome = dataclasses.replace(outcome, reason=f"{outcome.reason}; {oom.size(free)} free before it began")
        if outcome.state == "failed" and free is not None:
            oom.wait_for_release(self.device, free)  # the failed process was killed: its memory comes back late
        return outcome

    def _take_neighbours(self) -> list[TrialProcess]:
        """This search's other processes on this pool's device, taken out of their pools (none is measuring)."""
        taken: list[TrialProcess] = []
        for pool in list(_POOLS):
            if pool.device != self.device or (pool is not self and pool._busy):
                continue
            pool._wait_for_background_starts()
            taken += [*pool.live.values(), *pool.standby]
            pool.live, pool.standby = {}, []
        return taken

    def stop(self, discard: bool = False) -> None:
        """Stop every process. One that never ran anything leaves no log, and no folder is left that only its log made.

        So a search that stops before its first trial (bad input found after the
        processes were started ahead) leaves the disk as it found it, whatever a
        process that was asked for nothing wrote while it started. `discard`: the
        search these children served is abandoned before it began (a --gpus worker
        dismissed after making the parity baseline run): their logs go too, unless a
        failure wrote more than our own lines.
        """
        self._wait_for_background_starts()
        children = [*self.live.values(), *self.standby]
        self.live, self.standby = {}, []
        stopping = [c for c in children if c.used and not discard]
        lifecycle.stop_all(stopping)
        for child in children:
            if child not in stopping:
                child.kill()  # nothing to finish; it may still be importing torch
                if child.used:
                    remove_if_only_notes(child.log_path)
                else:
                    # Asked for nothing: what it wrote is its start-up, which nothing waited for. A workload that
                    # fails to import fails there too, and the search says so itself, with no file left behind.
                    with contextlib.suppress(OSError):  # one log that cannot go must not leave the others running
                        child.log_path.unlink(missing_ok=True)
        for folder in self._made_dirs or []:
            try:
                folder.rmdir()  # only if empty: logs of trials stay, with their folder
            except OSError:
                pass

    def ask_to_exit(self) -> None:
        """Ask the healthy processes that ran something to exit, without waiting: `stop` then waits."""
        self._wait_for_background_starts()
        for child in self.live.values():
            child.ask_to_exit()

    def kill(self) -> None:
        """Kill the live children at once, with their DataLoader workers: an interrupted measurement is worthless.

        Called from another thread while a round measures; later requests fail at once.
        """
        self.killed = True
        children, self.live = (
            list(self.live.values()),
            {},
        )  # the measuring thread's _drop_if_failed may pop from the dict
        for child in children:
            child.kill()
