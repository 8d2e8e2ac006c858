"""The searcher processes of ``autotune search --gpus``, one per GPU but the first, seen from the search.

A searcher (``python -m autotune.study.gpus.searcher_main``) starts before the study
exists: it imports torch and builds the data set while the search does the
same, then waits for one line on its stdin saying where the study is. If stdin
closes first (the search could not set the study up), it ends without a word.
Its output lines reach the user with a prefix. Starting and stopping go through
``autotune.procs.lifecycle`` (its NOTE says who starts whom and how each stops).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import threading
import uuid
from collections.abc import Callable
from typing import IO

from autotune.errors import AutotuneError
from autotune.options import SearchOptions, options_to_json
from autotune.procs import lifecycle

STOP_WAIT_S = 60.0  # a stopped searcher gets this long to give its trial back before it is killed


class GpusError(AutotuneError, ValueError):
    """A `--gpus` value that cannot be used; the message names the value and the rule."""


def parse_gpus(text: str, available: int) -> list[int]:
    """`all`, or distinct CUDA device indices separated by commas.

    >>> parse_gpus("0,1", 2)
    [0, 1]
    """
    if available < 1:
        raise GpusError(
            f"--gpus {text} needs CUDA GPUs, but this machine has none; run without --gpus to tune on the CPU."
        )
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
        raise GpusError(
            f"--gpus must be `all` or distinct device indices such as 0,1, but got {text!r}: {'; '.join(problems)}."
        )
    return indices


def cpu_share(cores: int, searchers: int) -> int:
    """CPU cores each of `searchers` processes on one host may give its DataLoader workers.

    >>> cpu_share(16, 2)
    8
    """
    return max(1, cores // searchers)


def parallel_options(options: SearchOptions, devices: list[int]) -> SearchOptions:
    """The search's options under --gpus: its device the first, each searcher's share of the cores, one run id."""
    share = options.cpu_share or cpu_share(len(os.sched_getaffinity(0)), len(devices))
    return dataclasses.replace(
        options, device_index=devices[0], cpu_share=share, run_id=options.run_id or uuid.uuid4().hex
    )


def device_labels(devices: list[int], cuda: bool) -> list[str]:
    return [f"gpu{d}" if cuda else f"cpu{i}" for i, d in enumerate(devices)]


class Searcher:
    """One searcher process; its output lines reach the user with a prefix."""

    def __init__(self, recipe: str, options: SearchOptions, label: str, echo: Callable[[str], None]) -> None:
        self.label, self.echo = label, echo
        self.joined = False
        self.proc = lifecycle.spawn(
            "autotune.study.gpus.searcher_main",
            [recipe, options_to_json(options)],
            env=dict(os.environ),
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        self.reader = threading.Thread(target=self._relay, args=(self.proc.stdout,), daemon=True)
        self.reader.start()

    def _relay(self, stream: IO[bytes]) -> None:
        for raw in stream:
            self.echo(f"{self.label} | {raw.decode(errors='replace').rstrip()}")

    def join_study(self, storage: str, study: str) -> None:
        """Tell the searcher the study is set up, and where; it joins it."""
        self.joined = True
        self._close_stdin(json.dumps({"storage": storage, "study": study}) + "\n")

    def _close_stdin(self, line: str = "") -> None:
        assert self.proc.stdin is not None
        try:
            if line:
                self.proc.stdin.write(line.encode())
            self.proc.stdin.close()
        except OSError:  # the searcher already ended: its lines and exit status say why
            pass

    def ask_to_exit(self) -> None:
        """A searcher still waiting for the study ends when its stdin closes; one that joined gives its trial
        back on SIGTERM."""
        self._close_stdin()
        # SIGTERM, not SIGINT: a searcher started from a background job inherits SIGINT ignored.
        if self.joined and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        self.ask_to_exit()
        lifecycle.wait_or_kill(self.proc, STOP_WAIT_S, group=False)
        self.reader.join(timeout=5)

    def kill(self) -> None:
        lifecycle.kill(self.proc, group=False)


def start_searchers(
    recipe: str, options: SearchOptions, devices: list[int], cuda: bool, echo: Callable[[str], None] = print
) -> list[Searcher]:
    """A searcher process for each device but the first, started now; each waits for the study before it joins it.

    `options` are the search's (its device the first, its CPU share set); one searcher,
    the first, makes the parity check's baseline run before its trials.
    """
    labels = device_labels(devices, cuda)
    return [
        Searcher(
            recipe,
            dataclasses.replace(
                options, device_index=d, write_tuned_file=False, baseline_parity_first=(i == 0 and options.parity_check)
            ),
            label,
            echo,
        )
        for i, (d, label) in enumerate(zip(devices[1:], labels[1:]))
    ]


def wait_for_end(searchers: list[Searcher], timeout_s: float = STOP_WAIT_S) -> None:
    """Wait for searchers that end by themselves (no trial is left for them); kill what is left at the deadline."""
    if not lifecycle.wait_all([w.proc for w in searchers], timeout_s):
        for w in searchers:
            w.kill()
    for w in searchers:
        w.reader.join(timeout=5)
