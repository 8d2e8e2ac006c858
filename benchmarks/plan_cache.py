"""Why a pool keeps one trial process per cudnn.benchmark value: cuDNN's plan cache, on the GPU.

    python benchmarks/plan_cache.py --recipe mnist_cnn --batch-size 1024

cuDNN keeps the convolution plans a process chose, keyed by shape and dtype but not
by `cudnn.benchmark`, and reuses them for every later config of that batch size.
This script measures the recipe's device-resident CUDA-graph loop with
cudnn.benchmark on and off, as a trial does (same windows, samples/s end to end):

1. on, then off, in one process (what one trial process did for both before);
2. off, then on, in one process;
3. through a TrialPool, interleaved on, off, on, off, as a search runs them now;
4. on, alone, in each of several fresh processes: how much autotuning's choice
   varies from process to process.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import tempfile
from pathlib import Path

from autotune.config import Config
from autotune.trial.timing import Windows

WINDOWS = Windows(window_s=0.2)


def _one_process(recipe: str, device: str, configs: list[Config], lr: float) -> list[float]:
    import torch

    from autotune.trial.runner import Runner
    from autotune.workloads import load, resolve

    runner = Runner(load(resolve(recipe)), torch.device(device))
    return [runner.run(config, lr, WINDOWS)["samples_per_s"] for config in configs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="mnist_cnn")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--lr", type=float, default=0.08)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--fresh", type=int, default=4, help="fresh processes for case 4")
    args = parser.parse_args()
    on = Config(batch_size=args.batch_size, placement="device", cuda_graph=True, cudnn_benchmark=True)
    off = Config(batch_size=args.batch_size, placement="device", cuda_graph=True)
    name = {on: "on ", off: "off"}

    def show(label: str, pairs: list[tuple[Config, float, str]]) -> None:
        print(f"{label}: " + ", ".join(f"{name[c]} {r / 1e6:.3f}M{tag}" for c, r, tag in pairs), flush=True)

    spawn = multiprocessing.get_context("spawn")
    for label, order in (("1. one process, on then off", [on, off]), ("2. one process, off then on", [off, on])):
        # A fresh process each (not a multiprocessing.Pool: its daemonic workers may not start DataLoader workers).
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as workers:
            rates = workers.submit(_one_process, args.recipe, args.device, order, args.lr).result()
        show(label, [(c, r, "") for c, r in zip(order, rates)])

    from autotune.procs.pool import TrialPool
    from autotune.workloads import resolve

    path = resolve(args.recipe).workload_path
    with tempfile.TemporaryDirectory() as logs:
        pool = TrialPool(path, args.device, multiprocessing.cpu_count(), Path(logs), 120.0)
        try:
            pairs = []
            for config in (on, off, on, off):
                outcome = pool.run(config, args.lr, WINDOWS)
                assert outcome.result is not None, outcome.reason
                assert pool.child is not None
                pairs.append((config, outcome.result["samples_per_s"], f" [process {pool.child.proc.pid}]"))
            show("3. a TrialPool, interleaved", pairs)
            pool.prestart(args.fresh)
            draws = []
            for _ in range(args.fresh):
                outcome = pool.run(on, args.lr, WINDOWS, fresh=True)
                assert outcome.result is not None, outcome.reason
                draws.append((on, outcome.result["samples_per_s"], ""))
            show(f"4. {args.fresh} fresh processes, on alone", draws)
        finally:
            pool.stop()


if __name__ == "__main__":
    main()
