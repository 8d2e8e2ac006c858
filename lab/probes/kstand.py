"""Probe: the fast loop measured as a trial measures it, in a fresh process, then probed by `kmeasure.probe`.

What it probes: mnist_cnn at batch 1024, data on the GPU, CUDA graph, fp32, lr 0.08, cudnn.benchmark
off, measured twice in a process that ran nothing before, then probed (see `kmeasure.py`):

    KPROBE_OUT=/tmp/stand.jsonl python3 lab/probes/kstand.py cuda:0 16 alone0_s16   # DEVICE CPU_SHARE TAG

Its output: lab/results/h200/scaleout_c/kernel_probe/stand.jsonl (five processes: each GPU
alone at 16 threads, GPU 0 at 32, both GPUs at once); the "5 fresh processes" row of
lab/results/h200/scaleout_c/README.md. Written against the code before commit 8e0457a
(`autotune.measure`, `autotune.runner`, `autotune.workload`); it now imports them from where they
moved (`autotune.trial.timing`, `autotune.trial.runner`, `autotune.workloads`).
"""

import sys
from pathlib import Path

import torch

from autotune.config import Config
from autotune.trial.runner import Runner
from autotune.trial.timing import Windows
from autotune.workloads import load, resolve

sys.path.insert(0, str(Path(__file__).parent))
import kmeasure  # noqa: E402  (beside this file, found through the path just inserted)


def main() -> None:
    dev, share, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if share < torch.get_num_threads():
        torch.set_num_threads(share)
    torch.cuda.set_device(torch.device(dev))
    runner = Runner(load(resolve("mnist_cnn")), torch.device(dev), cpu_share=share)
    runner.dataset
    cfg = Config(batch_size=1024, placement="device", cuda_graph=True)
    hist = []
    for i in range(2):
        r = runner.run(cfg, 0.08, Windows(window_s=0.2))
        hist.append(f"{r['samples_per_s'] / 1e6:.3f}M")
    rec = kmeasure.probe(runner, cfg, 0.08, tag, hist, r)
    print(
        tag,
        hist,
        "host",
        rec["host_us"],
        "wall",
        rec["wall_us"],
        "gpu",
        rec["gpu_event_us"],
        "replay",
        rec["replay_us"],
        rec["profile"],
        flush=True,
    )


if __name__ == "__main__":
    main()
