"""``autotune search --gpus 0,1``: one worker process per GPU on this host, all sharing one study.

The parent starts a worker process (``python -m autotune._worker``) for each GPU
but the first at once: importing torch and building the data set take a worker
as long as they take the parent, so both do it side by side. The parent then
sets the study up once (hardware, CPU share, seeds, tickets) and tells each
worker where it is; a worker touches the study only after that. The parent
prints the workers' lines with a prefix and takes tickets itself on the first
GPU. One worker first makes the baseline's parity run, so the check at the end
need not make it (it waits for it only if the trials all end first). When no
ticket is left and no trial runs, the parent checks parity, measures the
finalists, their rounds side by side on the GPUs, and writes the recipe: one
writer. Workers on one host share its CPU cores: each gets ``cores // workers``
for its DataLoader workers, and the profile records that share, which is what a
training run with one process per GPU has too.

The default SQLite study file serves the workers of one host (its transactions
take the file's lock up front); workers on several hosts need a database
server: ``--storage postgresql://...``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING

from autotune.options import SearchOptions, options_to_json
from autotune.trial import TrialPool

if TYPE_CHECKING:
    from autotune.search import SearchResult

STOP_WAIT_S = 60.0  # a stopped worker gets this long to give its trial back before it is killed


class ScaleoutError(ValueError):
    """A `--gpus` value that cannot be used; the message names the value and the rule."""


def parse_gpus(text: str, available: int) -> list[int]:
    """`all`, or distinct CUDA device indices separated by commas.

    >>> parse_gpus("0,1", 2)
    [0, 1]
    """
    if available < 1:
        raise ScaleoutError(f"--gpus {text} needs CUDA GPUs, but this machine has none; run without --gpus to tune on the CPU.")
    if text.strip().lower() == "all":
        return list(range(available))
    indices: list[int] = []
    problems: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part.isdigit():
            problems.append(f"{part!r} is not a device index")
        elif int(part) >= available:
            problems.append(f"device {part} does not exist (this machine has {available}: 0..{available - 1})")
        elif int(part) in indices:
            problems.append(f"device {part} is listed twice")
        else:
            indices.append(int(part))
    if problems:
        raise ScaleoutError(f"--gpus must be `all` or distinct device indices such as 0,1, but got {text!r}: {'; '.join(problems)}.")
    return indices


def cpu_share(cores: int, workers: int) -> int:
    """CPU cores each of `workers` processes on one host may give its DataLoader workers.

    >>> cpu_share(16, 2)
    8
    """
    return max(1, cores // workers)


def parallel_options(options: SearchOptions, devices: list[int]) -> SearchOptions:
    """The parent's options under --gpus: its device the first, each worker's share of the cores, one run id."""
    share = options.cpu_share or cpu_share(len(os.sched_getaffinity(0)), len(devices))
    return dataclasses.replace(options, device_index=devices[0], cpu_share=share, run_id=options.run_id or uuid.uuid4().hex)


class Worker:
    """One worker process; its output lines reach the user with a prefix.

    It starts before the study exists and waits for `go` on its stdin; if stdin
    closes first (the parent failed to set the study up), it ends without a word.
    """

    def __init__(self, recipe: str, options: SearchOptions, label: str, echo: Callable[[str], None]) -> None:
        self.label, self.echo = label, echo
        self.joined = False
        env = dict(os.environ, AUTOTUNE_PARENT_PID=str(os.getpid()), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "autotune._worker", recipe, options_to_json(options)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
        )
        assert self.proc.stdout is not None
        self.reader = threading.Thread(target=self._relay, args=(self.proc.stdout,), daemon=True)
        self.reader.start()

    def _relay(self, stream: IO[bytes]) -> None:
        for raw in stream:
            self.echo(f"{self.label} | {raw.decode(errors='replace').rstrip()}")

    def go(self, storage: str, study: str) -> None:
        """Tell the worker the study is set up, and where; it joins it."""
        self.joined = True
        self._close_stdin(json.dumps({"storage": storage, "study": study}) + "\n")

    def _close_stdin(self, line: str = "") -> None:
        assert self.proc.stdin is not None
        try:
            if line:
                self.proc.stdin.write(line.encode())
            self.proc.stdin.close()
        except OSError:  # the worker already ended: its lines and exit status say why
            pass

    def stop(self) -> None:
        self._close_stdin()  # one still waiting for `go` ends on this, and tidies up first
        # SIGTERM, not SIGINT: a worker started from a background job inherits SIGINT ignored.
        if self.joined and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()


def _wait(workers: list[Worker], timeout_s: float | None = None) -> bool:
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while any(w.proc.poll() is None for w in workers):
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    for w in workers:
        w.reader.join(timeout=5)
    return True


def stop_workers(workers: list[Worker]) -> None:
    """Stop the workers, give each `STOP_WAIT_S` to hand its trial back, then kill what is left."""
    for w in workers:
        w.stop()
    _wait(workers, STOP_WAIT_S)
    for w in workers:
        w.kill()


def start_workers(recipe: str, options: SearchOptions, devices: list[int], cuda: bool,
                  echo: Callable[[str], None] = print) -> list[Worker]:
    """A worker process for each device but the first, started now; each waits for `go` before it joins the study.

    `options` are the parent's (its device the first, its CPU share set); one worker,
    the first, makes the parity check's baseline run before its trials.
    """
    labels = device_labels(devices, cuda)
    return [
        Worker(recipe, dataclasses.replace(options, device_index=d, write_recipe=False,
                                           trace_baseline_first=(i == 0 and options.parity_check)), label, echo)
        for i, (d, label) in enumerate(zip(devices[1:], labels[1:]))
    ]


def device_labels(devices: list[int], cuda: bool) -> list[str]:
    return [f"gpu{d}" if cuda else f"cpu{i}" for i, d in enumerate(devices)]


def search_parallel(recipe: str, options: SearchOptions, devices: list[int], echo: Callable[[str], None] = print,
                    pool: TrialPool | None = None, workers: list[Worker] | None = None) -> SearchResult | None:
    """One worker per device on this host against one study; this process is the first, and writes the recipe.

    `pool` and `workers`, if given, were started ahead by the command line for these
    devices with these options (`autotune.ahead`); this function owns them from here.

    >>> search_parallel("mnist_cnn", SearchOptions(trials=40), devices=[0, 1])  # doctest: +SKIP
    """
    import torch

    from autotune.search import Search, search_warnings_off

    if not devices:
        raise ScaleoutError("--gpus names no device.")
    search_warnings_off()
    cores = len(os.sched_getaffinity(0))
    cuda = torch.cuda.is_available()
    labels = device_labels(devices, cuda)
    if workers is None:
        options = parallel_options(options, devices)
        # Started first, they import and build the data set while this process does the same.
        workers = start_workers(recipe, options, devices, cuda, echo)
    try:
        parent = Search(recipe, options, echo)
        parent.announce()
        parent.open_study()  # set up once, before any worker joins: no two workers race to create it
    except BaseException:
        stop_workers(workers)
        if pool is not None:
            pool.close()
        raise
    share = parent.machine.cpu_share  # the study's own, if it was made with another
    echo(f"{len(devices)} workers share study {parent.study_name!r}, {share} of {cores} CPU cores each; "
         f"this process is {labels[0]} and writes the recipe once no trial runs")
    for w in workers:
        w.go(parent.storage_url, parent.study_name)
    parent.round_devices = [f"cuda:{d}" if cuda else "cpu" for d in devices]
    if workers and options.parity_check:
        maker = workers[0]  # start_workers asked the first to make the baseline's parity run
        parent.baseline_pending = lambda: maker.proc.poll() is None

    def workers_ended() -> None:
        # No trial runs anywhere and the parity check is done; let the workers' processes go before the finalists are timed.
        if not _wait(workers, STOP_WAIT_S):
            for w in workers:
                w.kill()
        for w in workers:
            if w.proc.returncode not in (0, None):
                echo(f"{w.label} ended with exit status {w.proc.returncode} (its lines above say why); "
                     f"its trials stay in the study, and tickets it left were taken here")

    interrupted = False
    try:
        return parent.run(before_rounds=workers_ended, pool=pool)
    except KeyboardInterrupt:
        interrupted = True
        # One Ctrl-C stops everything; a second must not cut the workers' hand-back short.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            stop_workers(workers)
        finally:
            signal.signal(signal.SIGINT, previous)
        raise
    finally:
        if parent.settled and not interrupted:
            # The study is done (the check or the rounds may have failed): the workers are ending by
            # themselves; a stop now would tell them to hand back a trial they do not have.
            _wait(workers, STOP_WAIT_S)
        stop_workers(workers)  # a no-op for workers that ended
