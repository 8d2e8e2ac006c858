"""Trials in child processes, with time limits and a recorded reason for every failure.

An OOM, a CUDA error, a hang, a dead DataLoader worker or any exception ends
that trial as ``failed`` with a one-line reason; the search goes on. A healthy
child serves the next trial (CUDA start-up and the data set are paid once); a
failed or timed-out one is killed with its whole process group and replaced.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.config import Config
from autotune.measure import Windows

_CHILD_NUMBERS = itertools.count(1)
NOTE = "[autotune] "  # starts the lines a trial process writes to its log itself; a crash's reason never quotes them
STARTUP_TIMEOUT_S = 180.0  # importing torch, initialising CUDA and loading the data set
RELEASE_TIMEOUT_S = 30.0  # an idle child dropping its device-resident data set
INTERRUPTED = "stopped: the search was interrupted"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How a trial ended: complete (with a result), pruned (with a partial result) or failed (with a reason)."""

    state: str
    result: dict[str, Any] | None = None
    reason: str | None = None
    windows: tuple[float, ...] = ()


class _Lines:
    """Whole lines from a pipe, with a deadline; select() and Python's buffering do not mix."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buffer = fd, b""

    def read(self, deadline: float) -> str | None:
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if not ready:
                raise TimeoutError
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None  # the child closed its end: it died
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode()


class Child:
    """One trial process for one workload on one device."""

    def __init__(self, recipe_path: Path, device: str, cpu_share: int, log_path: Path, env: dict[str, str] | None = None) -> None:
        read_fd, write_fd = os.pipe()
        child_env = dict(os.environ if env is None else env)
        child_env.update(
            AUTOTUNE_EVENTS_FD=str(write_fd),
            AUTOTUNE_QUIET="1",
            AUTOTUNE_PARENT_PID=str(os.getpid()),
            AUTOTUNE_LAUNCHED=repr(time.time()),  # the child's log says how long its start-up took
            PYTHONUNBUFFERED="1",
        )
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "autotune._child", str(recipe_path), device, str(cpu_share)],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                env=child_env,
                start_new_session=True,  # its own process group: a kill reaches its DataLoader workers too
            )
        os.close(write_fd)
        self.events = _Lines(read_fd)
        self.read_fd = read_fd
        self.ready = False
        self.used = False  # asked to run something: its log may tell why that failed
        self.holding = False  # may hold device memory beyond its context: ran something since it last let go

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def _death_reason(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        tail = _last_line(self.log_path)
        if code is not None and code < 0:
            what = f"killed by signal {signal.Signals(-code).name}"
        else:
            what = f"exited with code {code}"
        return f"crashed: trial process {what}" + (f" ({tail})" if tail else "")

    def _start(self) -> Outcome | None:
        """Wait for a new child's start-up; a failed outcome if it did not come up."""
        if self.ready:
            return None
        event = self._read(time.monotonic() + STARTUP_TIMEOUT_S)
        if event is None:
            return Outcome("failed", reason=self._death_reason())
        if event["event"] == "failed":
            return Outcome("failed", reason=event["reason"])
        self.ready = True
        return None

    def run(self, config: Config, lr: float, windows: Windows, timeout_s: float, on_window: Callable[[int, float], bool] | None = None) -> Outcome:
        """Measure one config in this child; the child is unusable after a failed outcome."""
        self.used = self.holding = True
        rates: list[float] = []
        try:
            failed = self._start()
            if failed is not None:
                return failed
            deadline = time.monotonic() + timeout_s
            self._send({"cmd": "trial", "config": config.as_dict(), "lr": lr, "windows": dataclasses.asdict(windows)})
            while True:
                event = self._read(deadline)
                if event is None:
                    return Outcome("failed", reason=self._death_reason(), windows=tuple(rates))
                kind = event["event"]
                if kind == "window":
                    rates.append(event["rate"])
                    stop = bool(on_window and on_window(event["index"], event["rate"]))
                    self._send({"cmd": "stop" if stop else "continue"})
                elif kind == "result":
                    result = event["result"]
                    return Outcome("pruned" if result["stopped_early"] else "complete", result=result, windows=tuple(rates))
                else:
                    return Outcome("failed", reason=event["reason"], windows=tuple(rates))
        except TimeoutError:
            self.kill()
            limit = STARTUP_TIMEOUT_S if not self.ready else timeout_s
            return Outcome("failed", reason=f"timeout: no result within {limit:.0f} s", windows=tuple(rates))
        except (BrokenPipeError, ConnectionResetError):
            return Outcome("failed", reason=self._death_reason(), windows=tuple(rates))

    def trace(self, config: Config, lr: float, samples: int, probe_batch: int, timeout_s: float) -> Outcome:
        """One parity run (autotune.parity.run_trace) in this child; its trace is the outcome's result."""
        self.used = self.holding = True
        try:
            failed = self._start()
            if failed is not None:
                return failed
            self._send({"cmd": "parity", "config": config.as_dict(), "lr": lr, "samples": samples, "probe_batch": probe_batch})
            event = self._read(time.monotonic() + timeout_s)
            if event is None:
                return Outcome("failed", reason=self._death_reason())
            if event["event"] == "trace":
                return Outcome("complete", result=event["trace"])
            return Outcome("failed", reason=event.get("reason", f"unexpected event {event['event']!r}"))
        except TimeoutError:
            self.kill()
            limit = STARTUP_TIMEOUT_S if not self.ready else timeout_s
            return Outcome("failed", reason=f"timeout: no parity run within {limit:.0f} s")
        except (BrokenPipeError, ConnectionResetError):
            return Outcome("failed", reason=self._death_reason())

    def release(self, timeout_s: float = RELEASE_TIMEOUT_S) -> bool:
        """Ask this idle child to let go of its device-resident data sets and cached memory; False if it did not."""
        try:
            self._send({"cmd": "release"})
            event = self._read(time.monotonic() + timeout_s)
        except (TimeoutError, OSError, ValueError):
            return False
        self.holding = not (event is not None and event["event"] == "released")
        return not self.holding

    def _read(self, deadline: float) -> dict[str, Any] | None:
        line = self.events.read(deadline)
        return None if line is None else json.loads(line)

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        self.close()

    def close(self) -> None:
        for closer in (lambda: os.close(self.read_fd), lambda: self.proc.stdin and self.proc.stdin.close()):
            try:
                closer()
            except OSError:
                pass

    def quit(self) -> None:
        """Ask a healthy child to exit, without waiting for it: `stop` then waits."""
        if self.proc.poll() is None:
            try:
                self._send({"cmd": "quit"})
            except (OSError, ValueError):  # its stdin is gone: it is going anyway
                pass

    def stop(self) -> None:
        """Ask a healthy child to exit; kill it if it does not."""
        self.quit()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.kill()


def _stop_all(children: list[Child]) -> None:
    """Stop healthy children, all asked at once so that their exits overlap."""
    for child in children:
        child.quit()
    for child in children:
        child.stop()


def _remove_if_only_notes(path: Path) -> None:
    try:
        if all(line.startswith(NOTE) for line in path.read_text(errors="replace").splitlines() if line.strip()):
            path.unlink()
    except OSError:
        pass


def visible_gpus() -> int:
    """How many CUDA devices this process would see, from NVML and CUDA_VISIBLE_DEVICES, without importing torch.

    A guess made to start processes early; torch's count decides what is used.
    """
    try:
        import pynvml

        pynvml.nvmlInit()
        count = int(pynvml.nvmlDeviceGetCount())
    except Exception:  # no driver or no NVML: nothing to start early on a GPU
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return count
    listed = 0
    for entry in visible.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):
            break  # CUDA ignores this entry and every one after it
        listed += 1
    return min(listed, count)


def _last_line(path: Path) -> str:
    """The last line the workload or Python wrote to a child's log: what a crash's reason quotes."""
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip() and not line.startswith(NOTE)]
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""


def plan_class(config: Config, device: str) -> bool | None:
    """Which of a pool's trial processes may measure `config`: one per `cudnn.benchmark` value on a GPU.

    cuDNN keeps, per process, the convolution plan it chose for each shape and dtype,
    and reuses it for every later convolution of that shape whatever `cudnn.benchmark`
    then says. So in one process the first config of a batch size decides the plans of
    all that follow. Seen on an H200 with mnist_cnn at batch 1024: the heuristic plans
    take 630 us a step, autotuned ones 585-613 us, and a benchmark-off config measured
    as fast as the benchmark-on one that ran before it in its process (and the reverse).
    """
    return config.cudnn_benchmark if device.startswith("cuda") else None


class TrialPool:
    """Runs trials one at a time, reusing a healthy child and replacing a failed one.

    A child serves only configs of one `plan_class`, so no config measures plans
    another chose; on a GPU a pool can hold two, one for each `cudnn.benchmark` value.
    Starting a child (Python, torch, a CUDA context, the data set) takes seconds
    while the GPU idles, so children can be started ahead: `prestart(n)` keeps n
    unused ones in standby, and with `spare` every start the pool must wait for
    starts a spare beside it, ready to replace the next failed child at once.
    The spare never starts while this pool measures; `prestart` callers choose their moment.
    """

    def __init__(self, recipe_path: Path, device: str, cpu_share: int, log_dir: Path, timeout_s: float,
                 env: dict[str, str] | None = None, spare: bool = False) -> None:
        self.recipe_path, self.device, self.cpu_share = recipe_path, device, cpu_share
        self.log_dir, self.timeout_s, self.env, self.spare = log_dir, timeout_s, env, spare
        self.live: dict[bool | None, Child] = {}  # by plan class: healthy children that ran something
        self.standby: list[Child] = []  # started, never used: fresh, of no class yet
        self.children_started = 0
        self._current: bool | None = None  # the plan class of the latest request
        self.aborted = False  # interrupted: every later request fails at once
        self._made_dirs: list[Path] | None = None  # folders the first child's log created, deepest first

    @property
    def child(self) -> Child | None:
        """The child that took the latest request, while it is alive and trusted."""
        return self.live.get(self._current)

    def _start_child(self) -> Child:
        if self._made_dirs is None:
            self._made_dirs = [d for d in (self.log_dir, *self.log_dir.parents) if not d.exists()]
        self.children_started += 1
        log = self.log_dir / f"trial-process-{os.getpid()}-{next(_CHILD_NUMBERS)}.log"  # unique across this process's pools
        return Child(self.recipe_path, self.device, self.cpu_share, log, self.env)

    def prestart(self, n: int) -> None:
        """Start children now, up to `n` in standby, for trials that want a fresh one (finalist rounds)."""
        while len(self.standby) < n:
            self.standby.append(self._start_child())

    def _child(self, fresh: bool, config: Config) -> Child:
        if fresh:  # fresh processes for every class; none still tearing down while the next one measures
            _stop_all(list(self.live.values()))
            self.live.clear()
        self._current = plan_class(config, self.device)
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

    def _settle(self, outcome: Outcome) -> Outcome:
        if outcome.state == "failed" and self._current in self.live:
            self.live.pop(self._current).kill()
        return outcome

    def run(self, config: Config, lr: float, windows: Windows = Windows(), on_window: Callable[[int, float], bool] | None = None, fresh: bool = False) -> Outcome:
        if self.aborted:
            return Outcome("failed", reason=INTERRUPTED)
        return self._settle(self._child(fresh, config).run(config, lr, windows, self.timeout_s, on_window))

    def trace(self, config: Config, lr: float, samples: int, probe_batch: int, timeout_s: float) -> Outcome:
        """A parity run in a trial process: a crash, an OOM or a hang fails it, as it fails a trial."""
        if self.aborted:
            return Outcome("failed", reason=INTERRUPTED)
        return self._settle(self._child(False, config).trace(config, lr, samples, probe_batch, timeout_s))

    def close(self, discard: bool = False) -> None:
        """Stop every child. One that never ran anything leaves no log, and no folder is left that only its log made.

        So a search that stops before its first trial (bad input found after the
        processes were started ahead) leaves the disk as it found it. `discard`: the
        search these children served is abandoned before it began (a --gpus worker
        dismissed after making the parity baseline run): their logs go too, unless a
        failure wrote more than our own lines.
        """
        children = [*self.live.values(), *self.standby]
        self.live, self.standby = {}, []
        stopping = [c for c in children if c.used and not discard]
        _stop_all(stopping)
        for child in children:
            if child not in stopping:
                child.kill()  # nothing to finish; it may still be importing torch
                _remove_if_only_notes(child.log_path)
        for folder in self._made_dirs or []:
            try:
                folder.rmdir()  # only if empty: logs of trials stay, with their folder
            except OSError:
                pass

    def quit_children(self) -> None:
        """Ask the healthy children that ran something to exit, without waiting: `close` then waits."""
        for child in self.live.values():
            child.quit()

    def abort(self) -> None:
        """Kill the live children at once, with their DataLoader workers: an interrupted measurement is worthless.

        Called from another thread while a round measures; later requests fail at once.
        """
        self.aborted = True
        children, self.live = list(self.live.values()), {}  # the measuring thread's _settle may pop from the dict
        for child in children:
            child.kill()


def close_pools(pools: list[TrialPool]) -> None:
    """Close several pools at once: every pool's children are asked to exit before any is waited for,
    so their exits (each a CUDA context torn down) overlap instead of following one another."""
    for pool in pools:
        pool.quit_children()
    for pool in pools:
        pool.close()
