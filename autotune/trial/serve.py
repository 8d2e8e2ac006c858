"""What a trial process does: build the workload once, then answer requests one at a time.

Requests arrive as plain dicts (``autotune.procs.trial_process`` sends them):
``trial`` measures a config (``Runner.run``), ``parity`` makes a parity run
(``autotune.parity.run.train``), ``inputs`` compares the device decode
path's images with the host pipeline's (``autotune.parity.images.compare``),
``numerics`` a config's gradients with the baseline's
(``autotune.parity.gradients.compare``), ``parts`` its step and its loader
apart (``autotune.trial.parts``),
``release`` lets go of device memory,
``quit`` ends. Events go back through `send`. A request that fails ends the
process: a CUDA context that saw an error or an OOM is not trusted again.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

NOTE = "[autotune] "  # starts the lines a trial process writes to its log itself; a crash's reason never quotes them


def serve(workload_path: str, device_name: str, cpu_share: int, send: Callable[..., None],
          receive: Callable[[], dict[str, Any] | None], launched: float) -> int:
    """Start up, then serve the requests `receive` returns until `quit` or their end (None); the exit status."""
    from autotune.trial.runner import classify_failure

    try:
        runner, startup_s = _start_up(workload_path, device_name, cpu_share, launched)
    except BaseException as exc:  # noqa: BLE001  (anything that stops start-up is the reason)
        traceback.print_exc()
        send(event="failed", reason=classify_failure(exc))
        return 1
    send(event="ready", startup_s=startup_s)  # the search reserves a round's start from it
    answer = _Answer(runner, send, receive)
    while (request := receive()) is not None:
        if request.get("cmd") == "quit":
            return 0
        try:
            answer(request)
        except BaseException as exc:  # noqa: BLE001
            traceback.print_exc()  # the whole story goes to this process's log file
            send(event="failed", reason=classify_failure(exc))
            return 1
    return 0  # the search closed our end


def _start_up(workload_path: str, device_name: str, cpu_share: int, launched: float) -> tuple[Any, float]:
    """The workload, its device and its data set, built before any trial's clock; says what it cost, and returns
    the runner and the seconds from its fork to ready."""
    entered = time.time()
    import torch

    if cpu_share < torch.get_num_threads():
        # Under --gpus the workers share the host: each measures within its share of the cores, as the
        # profile states. torch's intra-op pool would size itself to the whole host and contend with
        # the other workers' (a baseline measured beside another round ran at a third of its speed).
        torch.set_num_threads(cpu_share)

    from autotune.trial.runner import Runner
    from autotune.workloads import RecipeRef, load

    imported = time.time()
    path = Path(workload_path)
    workload = load(RecipeRef(path.stem, path, path.with_suffix(".tuned.toml"), False))
    device = torch.device(device_name)
    if device.type == "cuda":
        # Streams and graph capture follow the current device; with --device 1 it must be that one.
        torch.cuda.set_device(device)
    runner = Runner(workload, device, cpu_share=cpu_share)
    if device.type == "cuda":
        torch.zeros(1, device=device)  # the CUDA context: created now, timed below, not in the first trial
    context = time.time()
    runner.dataset  # noqa: B018  (build it now, outside any trial's clock)
    ready = time.time()
    # What a start-up costs, for whoever reads this log: the search waits this long for a new trial process.
    print(
        f"{NOTE}trial process {os.getpid()} on {device_name}: ready {ready - launched:.1f} s after launch (forked "
        f"{entered - launched:.1f} s, imports {imported - entered:.1f} s, workload and {device.type} start-up "
        f"{context - imported:.1f} s, data set {ready - context:.1f} s)",
        flush=True,
    )
    # The search reserves a round's start from this: from the fork to ready, not the fork server's own start,
    # which only the first children wait for (the rounds' processes fork from a server already up).
    return runner, ready - entered


class _Answer:
    """Answers one request: a trial, a parity run, or letting go of device memory."""

    def __init__(self, runner: Any, send: Callable[..., None], receive: Callable[[], dict[str, Any] | None]) -> None:
        self.runner, self.send, self.receive = runner, send, receive
        self.probe_sets: dict[int, Any] = {}  # the parity check's fixed samples, made once per size

    def __call__(self, request: dict[str, Any]) -> None:
        from autotune.config import Config
        from autotune.parity import run as parity_run
        from autotune.trial.timing import Windows

        if request.get("cmd") == "release":
            # The pool's other process (autotune.procs.pool.cudnn_plan_key) is about to measure on this GPU: its
            # trial must have the memory a single process would, or a batch size that fits would fail as OOM.
            self.send(event="released", datasets=self.runner.release())
            return
        if request.get("cmd") == "inputs":
            from autotune.parity import images as inputs

            # At most 16 workers: the check's 2 x 2,048 host decodes need no more, and each costs a start.
            found = inputs.compare(self.runner.dataset, self.runner.device, workers=min(self.runner.cpu_share, 16))
            self.send(event="inputs", found=found)
            return
        config = Config.from_dict(request["config"])
        if request.get("cmd") == "numerics":
            from autotune.parity import gradients

            baseline = Config.from_dict(request["baseline"])
            self.send(event="numerics", found=gradients.compare(self.runner.build, baseline, config, request["lr"]))
            return
        if request.get("cmd") == "parts":
            from autotune.trial import parts

            self.send(event="parts", found=parts.measure(self.runner, config, request["lr"], request["which"]))
            return
        if request.get("cmd") == "parity":
            size = int(request.get("probe_samples") or parity_run.PROBE_SAMPLES)
            if size not in self.probe_sets:
                workload = self.runner.workload
                self.probe_sets[size] = parity_run.probe(self.runner.dataset, workload.collate_fn, size,
                                                         sample_key=workload.sample_key)
            run = parity_run.train(self.runner.build, config, request["lr"], request["samples"], self.probe_sets[size],
                                   request["probe_batch"], count=self.runner.workload.count,
                                   stop_after_s=request.get("stop_after_s"))
            self.send(event="parity_run", run=run.as_dict())
            return

        def on_window(i: int, rate: float) -> bool:
            self.send(event="window", index=i, rate=rate)
            answer = self.receive()
            return answer is None or answer.get("cmd") in ("stop", "quit")

        result = self.runner.run(config, request["lr"], Windows(**request.get("windows", {})), on_window,
                                 time_limit_s=request.get("time_limit_s"))
        self.send(event="result", result=result)
