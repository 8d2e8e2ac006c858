"""One trial process, seen from the process that started it: requests out, events back.

The process (forked from the fork server: ``autotune.procs.trial_main``;
``autotune.trial.serve`` runs inside it) reads JSON requests from one pipe
(measure a config, make a parity run, check the decode path's inputs or amp's
gradients, release memory, quit) and answers with JSON events on another, so
the workload's prints stay in its log. After a failure it exits: a CUDA context
that saw an error or an OOM is not trusted with the next request. Starting and
stopping go through ``autotune.procs.lifecycle`` (its NOTE says who starts whom
and how each stops).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import multiprocessing
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.config import COMPILE_ALLOWANCE_S, Config
from autotune.procs import lifecycle, trial_main
from autotune.trial.serve import NOTE
from autotune.trial.timing import Windows

STARTUP_TIMEOUT_S = 180.0  # importing torch, initialising CUDA and loading the data set
RELEASE_TIMEOUT_S = 30.0  # an idle trial process dropping its device-resident data set
QUIT_WAIT_S = 10.0  # a trial process asked to quit gets this long before it is killed
INTERRUPTED = "stopped: the search was interrupted"
# A trial's measurement is asked to end by this share of its timeout, with the windows it has: the rest leaves
# room for an epoch boundary it still owes and its result's way back. A trial killed at its timeout tells the
# search nothing, and loaders of long epochs were killed so (docs/measuring.md, "How it measures").
MEASURE_SHARE = 0.8
# A parity run stops training at this share of its limit (its build included, the probe's last evaluations after it):
# the check then judges what it reached (docs/parity.md, "Within a time bound").
PARITY_STOP_SHARE = 0.85
GAVE_UP = "given up"  # how the reason of a trial killed at its give-up time begins (it is pruned, not failed)
_FORK_CONTEXT = multiprocessing.get_context("forkserver")  # its Pipe ends can be handed to a forked process


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How a trial ended: complete (with a result), pruned (with a partial result) or failed (with a reason)."""

    state: str
    result: dict[str, Any] | None = None
    reason: str | None = None
    windows: tuple[float, ...] = ()


class TrialProcess:
    """One trial process for one workload on one device."""

    def __init__(
        self, workload_path: Path, device: str, cpu_share: int, log_path: Path, env: dict[str, str] | None = None
    ) -> None:
        child_env = dict(os.environ if env is None else env)
        child_env["AUTOTUNE_QUIET"] = "1"  # the search says what a data set did; its trial processes do not repeat it
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        requests_out, self.requests = _FORK_CONTEXT.Pipe(duplex=False)
        self.events, events_in = _FORK_CONTEXT.Pipe(duplex=False)
        args = (str(workload_path), device, cpu_share, requests_out, events_in, str(log_path), child_env,
                os.getcwd(), time.time())
        self.proc = lifecycle.fork(trial_main.run, args, workload_path)
        requests_out.close()  # the process holds its own ends: when it dies, reading events ends
        events_in.close()
        self.ready = False
        self.startup_s: float | None = None  # seconds from its fork to ready, once it is up: what a start costs
        self.used = False  # asked to run something: its log may tell why that failed
        self.holding = False  # may hold device memory beyond its context: ran something since it last let go

    def _send(self, message: dict[str, Any]) -> None:
        self.requests.send_bytes(json.dumps(message).encode())

    def _death_reason(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        tail = last_line(self.log_path)
        if code is not None and code < 0:
            what = f"killed by signal {signal.Signals(-code).name}"
        else:
            what = f"exited with code {code}"
        return f"crashed: trial process {what}" + (f" ({tail})" if tail else "")

    def _start(self) -> Outcome | None:
        """Wait for a new process's start-up; a failed outcome if it did not come up."""
        if self.ready:
            return None
        event = self._read(time.monotonic() + STARTUP_TIMEOUT_S)
        if event is None:
            return Outcome("failed", reason=self._death_reason())
        if event["event"] == "failed":
            return Outcome("failed", reason=event["reason"])
        self.ready = True
        self.startup_s = float(event.get("startup_s", 0.0))
        return None

    def run(
        self,
        config: Config,
        lr: float,
        windows: Windows,
        timeout_s: float,
        on_window: Callable[[int, float], bool] | None = None,
        give_up_s: float | None = None,
        limit_s: float | None = None,
    ) -> Outcome:
        """Measure one config in this child; the process is unusable after a failed or given-up outcome.

        `give_up_s`: past it the trial is killed and pruned, windows or not; a trial that is still starting
        (workers filling a large first batch, cuDNN's autotuning) sends none that the pruner could judge.
        `limit_s`: the search's clock asks the measurement to end by then, where that is sooner than MEASURE_SHARE
        of the timeout (``autotune.study.clock.deadline``: `trial_limit_s`, `round_limit_s`).
        """
        self.used = self.holding = True
        timeout_s += COMPILE_ALLOWANCE_S[config.compile]  # compiling is starting, not hanging
        rates: list[float] = []
        try:
            failed = self._start()
            if failed is not None:
                return failed
            began = time.monotonic()
            deadline = began + timeout_s
            give_up = began + give_up_s if give_up_s is not None and give_up_s < timeout_s else None
            limit = MEASURE_SHARE * timeout_s if limit_s is None else min(MEASURE_SHARE * timeout_s, limit_s)
            self._send({"cmd": "trial", "config": config.as_dict(), "lr": lr, "windows": dataclasses.asdict(windows),
                        "time_limit_s": limit})
            while True:
                try:
                    event = self._read(deadline if give_up is None else give_up)
                except TimeoutError:
                    if give_up is None:
                        raise
                    self.kill()
                    when = "before its first window" if not rates else f"after {len(rates)} window(s)"
                    return Outcome("pruned", reason=f"{GAVE_UP} at {time.monotonic() - began:.0f} s, {when}",
                                   windows=tuple(rates))
                if event is None:
                    return Outcome("failed", reason=self._death_reason(), windows=tuple(rates))
                kind = event["event"]
                if kind == "window":
                    rates.append(event["rate"])
                    stop = bool(on_window and on_window(event["index"], event["rate"]))
                    self._send({"cmd": "stop" if stop else "continue"})
                elif kind == "result":
                    result = event["result"]
                    return Outcome(
                        "pruned" if result["stopped_early"] else "complete", result=result, windows=tuple(rates)
                    )
                else:
                    return Outcome("failed", reason=event["reason"], windows=tuple(rates))
        except TimeoutError:
            self.kill()
            limit = STARTUP_TIMEOUT_S if not self.ready else timeout_s
            return Outcome("failed", reason=f"timeout: no result within {limit:.0f} s", windows=tuple(rates))
        except (BrokenPipeError, ConnectionResetError, EOFError):
            return Outcome("failed", reason=self._death_reason(), windows=tuple(rates))

    def parity_run(self, config: Config, lr: float, samples: int, probe_batch: int, timeout_s: float,
                   probe_samples: int | None = None) -> Outcome:
        """One parity run (autotune.parity.run.train) in this process; the run is the outcome's result. It stops
        training in time to answer within `timeout_s`, with the samples it reached: a run stopped so still says what
        it learned, where one killed at its limit says nothing. `probe_samples`: the probe set's size (None: the
        default, ``autotune.parity.run.PROBE_SAMPLES``)."""
        limit = timeout_s + COMPILE_ALLOWANCE_S[config.compile]
        request = {"cmd": "parity", "config": config.as_dict(), "lr": lr, "samples": samples,
                   "probe_batch": probe_batch, "stop_after_s": PARITY_STOP_SHARE * limit,
                   "probe_samples": probe_samples}
        return self._ask(request, "parity_run", "run", "parity run", limit)

    def parts(self, config: Config, lr: float, which: list[str], timeout_s: float) -> Outcome:
        """`config`'s step and loader rates apart (autotune.trial.parts) in this process; the rates are the result."""
        request = {"cmd": "parts", "config": config.as_dict(), "lr": lr, "which": which}
        return self._ask(request, "parts", "found", "measurement of the loop's parts", timeout_s)

    def inputs_check(self, timeout_s: float) -> Outcome:
        """The inputs check (autotune.parity.images.compare) in this process; its distances are the result."""
        return self._ask({"cmd": "inputs"}, "inputs", "found", "inputs check", timeout_s)

    def numerics_check(self, baseline: Config, config: Config, lr: float, timeout_s: float) -> Outcome:
        """The numerics check (autotune.parity.gradients.compare) in this process; its numbers are the result."""
        request = {"cmd": "numerics", "baseline": baseline.as_dict(), "config": config.as_dict(), "lr": lr}
        return self._ask(request, "numerics", "found", "numerics check",
                         timeout_s + COMPILE_ALLOWANCE_S[config.compile])

    def _ask(self, request: dict[str, Any], answer: str, key: str, what: str, timeout_s: float) -> Outcome:
        """Send `request` and wait for the `answer` event; its `key` is the outcome's result."""
        self.used = self.holding = True
        try:
            failed = self._start()
            if failed is not None:
                return failed
            self._send(request)
            event = self._read(time.monotonic() + timeout_s)
            if event is None:
                return Outcome("failed", reason=self._death_reason())
            if event["event"] == answer:
                return Outcome("complete", result=event[key])
            return Outcome("failed", reason=event.get("reason", f"unexpected event {event['event']!r}"))
        except TimeoutError:
            self.kill()
            limit = STARTUP_TIMEOUT_S if not self.ready else timeout_s
            return Outcome("failed", reason=f"timeout: no {what} within {limit:.0f} s")
        except (BrokenPipeError, ConnectionResetError, EOFError):
            return Outcome("failed", reason=self._death_reason())

    def release(self, timeout_s: float = RELEASE_TIMEOUT_S) -> bool:
        """Ask this idle process to let go of its device-resident data sets and cached memory; False if it did not."""
        try:
            self._send({"cmd": "release"})
            event = self._read(time.monotonic() + timeout_s)
        except (TimeoutError, OSError, ValueError):
            return False
        self.holding = not (event is not None and event["event"] == "released")
        return not self.holding

    def _read(self, deadline: float) -> dict[str, Any] | None:
        """The next event, None when the process has died; TimeoutError past the deadline."""
        if not self.events.poll(max(0.0, deadline - time.monotonic())):
            raise TimeoutError
        try:
            return json.loads(self.events.recv_bytes())
        except (EOFError, OSError):  # the process closed its end: it died
            return None

    def kill(self) -> None:
        """Kill it now, with its DataLoader workers."""
        lifecycle.kill(self.proc, group=True)
        self._close_pipes()

    def _close_pipes(self) -> None:
        for end in (self.requests, self.events):
            with contextlib.suppress(OSError):
                end.close()

    def ask_to_exit(self) -> None:
        """Ask it to exit, without waiting: `stop` then waits."""
        if self.proc.poll() is None:
            try:
                self._send({"cmd": "quit"})
            except (OSError, ValueError):  # its request pipe is gone: it is going anyway
                pass

    def stop(self) -> None:
        """Ask it to exit; kill it if it has not within QUIT_WAIT_S."""
        self.ask_to_exit()
        lifecycle.wait_or_kill(self.proc, QUIT_WAIT_S, group=True)
        self._close_pipes()


def remove_if_only_notes(path: Path) -> None:
    try:
        if all(line.startswith(NOTE) for line in path.read_text(errors="replace").splitlines() if line.strip()):
            path.unlink()
    except OSError:
        pass


def last_line(path: Path) -> str:
    """The last line the workload or Python wrote to a child's log: what a crash's reason quotes."""
    try:
        lines = [
            line.strip()
            for line in path.read_text(errors="replace").splitlines()
            if line.strip() and not line.startswith(NOTE)
        ]
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""
