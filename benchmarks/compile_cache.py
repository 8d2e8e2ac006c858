"""Does a search's second trial of the same shapes compile from the cache? Two trial processes, one after the other.

    python benchmarks/compile_cache.py --device cpu
    python benchmarks/compile_cache.py --device cuda:0 --recipe mnist_cnn --batch-size 1024

Each process is a search's trial process (``autotune.procs.pool.TrialPool``) with the
environment a search gives it (``autotune.procs.compile_cache``: Inductor's caches in the
search's state directory, here a fresh temporary one), and measures one config with
``compile=<mode>``: the first compiles cold, the second finds the first one's graphs on
disk. It prints each one's compile seconds (``Step.compile_s``) and their ratio. The
default recipe is tests/fixtures/compiles.py (a tiny CNN), so it runs on a CPU as well.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from autotune.config import Config
from autotune.procs import compile_cache
from autotune.procs.pool import TrialPool
from autotune.trial.timing import Windows
from autotune.workloads import resolve

WINDOWS = Windows(warmup_steps=5, window_s=0.1, min_windows=2, max_windows=3, boundaries=1, extra_windows=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default=str(Path(__file__).parents[1] / "tests" / "fixtures" / "compiles.py"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=None, help="the recipe's own by default")
    parser.add_argument("--mode", default="default")
    parser.add_argument("--cpus", type=int, default=1, help="DataLoader workers' share of the cores")
    args = parser.parse_args()
    ref = resolve(args.recipe)
    state = Path(tempfile.mkdtemp(prefix="compile_cache_"))
    mine = {k: v for k, v in os.environ.items() if k != compile_cache.CACHE_DIR_VAR}  # a cold cache, not the user's
    env = compile_cache.environment(state, ref.workload_path, base=mine)
    from autotune.workloads import load

    batch_size = args.batch_size or int(load(ref).defaults["batch_size"])
    config = Config(batch_size=batch_size, compile=args.mode)
    print(f"{config.describe()} on {args.device}; compile cache {env[compile_cache.CACHE_DIR_VAR]}", flush=True)
    seconds = []
    for which in ("cold", "from the cache"):
        pool = TrialPool(ref.workload_path, args.device, args.cpus, state / "logs", 900.0, env=env)
        try:
            outcome = pool.run(config, float(load(ref).defaults["lr"]), WINDOWS)
        finally:
            pool.stop()
        if outcome.result is None:
            raise SystemExit(f"the {which} trial did not complete: {outcome.state}: {outcome.reason}")
        seconds.append(outcome.result["compile_s"])
        print(f"  {which:<16} compile {seconds[-1]:7.2f} s, one-time costs {outcome.result['setup_s']:7.2f} s, "
              f"{outcome.result['samples_per_s']:,.0f} samples/s", flush=True)
    print(f"  the second trial's compile took {seconds[1] / seconds[0]:.2f}x the first's")


if __name__ == "__main__":
    main()
