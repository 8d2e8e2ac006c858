"""The CLI end to end on the tiny workload: a real search in real processes, checked line by line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.tuned import file as tuned_file


def autotune(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args], capture_output=True, text=True, env=os.environ.copy(), timeout=600
    )


TRIAL_LINE = re.compile(
    r"^\[ +(\d+)/4\] \d+:\d\d  trial (\d+) +"
    r"(?:[\d,]+/s ±[\d.]+%(?: unreliable)?(?: time-limited)?|[\d,]+/s = trial \d+"
    r"|pruned at window \d+: [\d,]+/s|failed: .+?|skipped, valued from its parts|skipped by prediction"
    r"|skipped by parity|skipped, out of time|given up at .+?) +bs=\d+ .*$"
)


@pytest.mark.e2e
@pytest.mark.slow
def test_search_writes_the_recipe_then_resumes_and_show_prints_it(project: Path) -> None:
    cores = len(os.sched_getaffinity(0))
    # One finalist, one round: the resumed search below checks and measures its finalists again.
    command = ("search", "--recipe", "tiny", "--trials", "4", "--fix", "amp=off", "--finalists", "1", "--rounds", "1")
    first = autotune(*command)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert (
        lines[:8]
        == [
            f"autotune: tuning 'tiny' on cpu ({cores} CPU cores), study 'tiny@cpu+amp=off' in sqlite:///{project}/.autotune/tiny.db",
            "  placement: stream/device",
            "  batch_size: 4..128 (powers of two)",
            f"  num_workers: {'0..' + str(cores) if cores > 1 else '0/1'}",
            "  persistent_workers: off/on",
            "  prefetch_factor: 1..8",
            "  channels_last: off/on",
            "  amp: off",
        ][:8]
    )
    assert lines[8:17] == [
        "  pin_memory: left out (needs CUDA)",
        "  cudnn_benchmark: left out (needs CUDA)",
        "  cuda_graph: left out (needs CUDA)",
        "  compile: left out (needs CUDA)",
        "  decode: left out (needs CUDA)",
        "  decode_share: left out (needs CUDA)",
        "  device_normalize: left out (needs CUDA)",
        "  bucketing: left out (the workload gives no sample_lengths(dataset))",
        "  pad_multiple: left out (the workload gives no collate_fn, and DataLoader's default_collate pads nothing)",
    ]
    trials = [line for line in lines if line.startswith("[")]
    assert all(TRIAL_LINE.match(line) for line in trials), [line for line in trials if not TRIAL_LINE.match(line)]
    assert [int(TRIAL_LINE.match(line).group(1)) for line in trials] == [1, 2, 3, 4], trials
    assert "finalists: measuring" in first.stdout
    assert re.search(
        r"^wrote .*recipes/tiny\.tuned\.toml: bs=\d+ .*: [\d,]+/s, [\d.]+x the baseline's [\d,]+/s \(noise "
        r"±[\d.]+%(, the baseline's ±[\d.]+%)?\), search \d+ s$",
        first.stdout,
        re.M,
    )

    data = tuned_file.read(project / "recipes" / "tiny.tuned.toml")
    profile = data["profiles"]["cpu"]
    assert profile["trials_complete"] + profile["trials_failed"] + profile["trials_pruned"] == 4
    assert profile["command"] == "autotune search --recipe tiny --trials 4 --fix amp=off --finalists 1 --rounds 1"
    assert profile["excluded"] == {
        "pin_memory": "needs CUDA",
        "cudnn_benchmark": "needs CUDA",
        "cuda_graph": "needs CUDA",
        "compile": "needs CUDA",
        "decode": "needs CUDA", "decode_share": "needs CUDA", "device_normalize": "needs CUDA",
        "bucketing": "the workload gives no sample_lengths(dataset)",
        "pad_multiple": "the workload gives no collate_fn, and DataLoader's default_collate pads nothing",
    }
    assert profile["knobs"]["amp"] == "off" and profile["cpu_share"] == cores
    assert profile["speedup"] == pytest.approx(
        profile["samples_per_s"] / profile["baseline_samples_per_s"], abs=0.01
    )  # both rounded

    again = autotune(*command)
    assert again.returncode == 0, again.stderr
    assert "resuming study 'tiny@cpu+amp=off': 4 trial(s) already finished, 0 to go" in again.stdout
    assert not [line for line in again.stdout.splitlines() if line.startswith("[")]

    shown = autotune("show", "--recipe", "tiny")
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout.splitlines()
    assert out[0] == f"{project}/recipes/tiny.tuned.toml (schema 1, recipe 'tiny')"
    assert out[1].split() == ["cpu"]
    assert re.match(r"^batch_size +\d+$", out[4])
    assert re.match(r"^cuda_graph +n/a$", [line for line in out if line.startswith("cuda_graph")][0])
    assert any(re.match(r"^speed-up +[\d.]+x$", line) for line in out)


def test_bad_input_is_one_message_and_exit_status_2(project: Path) -> None:
    result = autotune("search", "--recipe", "tiny", "--fix", "turbo=on")
    assert result.returncode == 2
    assert (
        result.stderr.strip().splitlines()[-1]
        == "Error: --fix names unknown knob 'turbo'; the knobs are: placement, batch_size, num_workers, pin_memory, "
        "persistent_workers, prefetch_factor, decode, decode_share, device_normalize, bucketing, pad_multiple, "
        "cudnn_benchmark, channels_last, amp, cuda_graph, compile."
    )
    assert "Traceback" not in result.stderr
    assert not (project / ".autotune").exists()


@pytest.mark.parametrize("args, status", [(["--help"], 0), (["show", "--recipe", "nope"], 2)])
def test_the_program_ends_with_mains_status_after_its_output_and_atexit_handlers(
    project: Path, args: list[str], status: int
) -> None:
    # `run` skips the interpreter's teardown (a second with torch loaded), not what a normal exit must do.
    code = (
        "import atexit, sys; from autotune import cli; atexit.register(lambda: print('atexit ran'));"
        f" sys.argv = ['autotune', *{args!r}]; cli.run()"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == status
    out = result.stdout.splitlines()
    assert out[-1] == "atexit ran"
    if status == 0:
        assert out[0] == "Usage: autotune [OPTIONS] COMMAND [ARGS]..."
    else:
        assert result.stderr.splitlines()[-1].startswith("Error: ") and "Traceback" not in result.stderr
