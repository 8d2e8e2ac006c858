"""torchrun over tuned_loader + tuned_step: each rank its own samples, the same weights after a step."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _procs import child_env

from autotune.config import Config
from autotune.tuned import file as tuned_file

JOB = Path(__file__).parent / "torchrun_job.py"


@pytest.mark.e2e  # a real torchrun job: two ranks in processes of their own
@pytest.mark.slow
def test_two_ranks_see_disjoint_samples_and_agree_after_a_step(project: Path) -> None:
    tuned_file.write_profile(
        project / "recipes" / "tiny.tuned.toml",
        "tiny",
        "cpu",
        {
            "samples_per_s": 1000.0,
            "baseline_samples_per_s": 100.0,
            "speedup": 10.0,
            "lr": 0.1,
            "lr_rule": "linear",
            "cpu_share": 1,
            "knobs": tuned_file.config_to_knobs(Config(batch_size=32)),
            "versions": {"torch": torch.__version__},
        },
    )
    out = project / "out"
    out.mkdir()
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(JOB), str(out)],
        cwd=project,
        env=child_env(OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    ranks = [torch.load(out / f"rank{r}.pt") for r in (0, 1)]
    for placement in ("stream", "device"):
        a, b = (set(rank["seen"][placement]) for rank in ranks)
        assert len(ranks[0]["seen"][placement]) == len(ranks[1]["seen"][placement]) == 256  # 512 samples, halved
        assert not a & b and a | b == set(range(512)), placement
    # The stream loader and the device-resident one give a rank the same samples in the same order.
    assert ranks[0]["seen"]["stream"] == ranks[0]["seen"]["device"]
    for ours, theirs in zip(ranks[0]["weights"], ranks[1]["weights"]):
        assert torch.equal(ours, theirs)
    # lr 0.1 for batch 32 on one process; two processes make a global batch of 64, and the linear rule doubles it.
    assert [(rank["lr"], rank["global_batch"]) for rank in ranks] == [(0.2, 64), (0.2, 64)]
