"""How far autotune closes the gap, as ratios measured in one run on one GPU.

    python benchmarks/speed.py --out /tmp/bench

Runs three fresh searches (mnist_cnn at batch 128, mnist_cnn with batch size
searched, cifar10_resnet18 at batch 128), then, in this one process, measures
for each built-in workload: the seed's loop as written (mnist_cnn), the second
seed's advice, the untuned defaults, plain worker counts (cifar10_resnet18), and
the tuned recipes through `tuned_loader` + `tuned_step`; finally the seed's whole
10-epoch run end to end, as written and tuned, one-time costs included. Every
number printed is samples/s or a ratio between numbers of this run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.data import DataLoader

from autotune import load_tuned, tuned_loader, tuned_step
from autotune.config import Config
from autotune.loop import Step, build_loader
from autotune.trial.timing import Windows, measure
from autotune.workloads import load, resolve
from autotune.workloads.locate import data_root

DEVICE = torch.device(os.environ.get("BENCH_DEVICE", "cuda"))
WINDOWS = Windows(warmup_steps=10, window_s=0.3, min_windows=5, max_windows=12)
SEARCHES = {
    # name: (recipe, extra search arguments)
    "mnist_cnn@bs128": ("mnist_cnn", ["--fix", "batch_size=128"]),
    "mnist_cnn": ("mnist_cnn", []),
    "cifar10_resnet18@bs128": ("cifar10_resnet18", ["--fix", "batch_size=128"]),
}


def sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


def run_search(name: str, recipe: str, extra: list[str], out: Path, trials: int, budget: float) -> dict[str, Any]:
    """A fresh search in its own folder; returns its wall time and when its final best was found."""
    folder = out / name.replace("@", "_")
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "autotune",
        "search",
        "--recipe",
        recipe,
        "--trials",
        str(trials),
        "--time-budget",
        str(budget),
        *extra,
    ]
    start = time.monotonic()
    log = folder / "search.log"
    with open(log, "w") as f:
        proc = subprocess.run(
            cmd,
            cwd=folder,
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**os.environ, "AUTOTUNE_DATA": str(data_root().resolve())},
        )
    wall = time.monotonic() - start
    text = log.read_text()
    print(text, flush=True)
    if proc.returncode != 0:
        raise SystemExit(f"search {name} failed with exit code {proc.returncode}")
    import optuna

    storage = f"sqlite:///{folder / '.autotune' / (recipe + '.db')}"
    summaries = optuna.study.get_all_study_summaries(storage)
    study = optuna.load_study(study_name=summaries[0].study_name, storage=storage)
    trials_done = [t for t in study.trials if t.state.is_finished()]
    first = min(t.datetime_start for t in trials_done)
    best = max((t for t in trials_done if t.value is not None), key=lambda t: t.value)
    return {
        "folder": folder,
        "wall_s": wall,
        "best_after_s": (best.datetime_complete - first).total_seconds(),
        "trials": len(trials_done),
    }


def rate_of(step: Callable, loader: Any) -> float:
    return measure(step, loader, WINDOWS, sync=sync).samples_per_s


def seed_loop_as_written(dataset: Any) -> tuple[Callable, DataLoader]:
    """The first seed's loop body, verbatim in effect: .item() twice per step, accuracy on the host."""
    from autotune.workloads.builtins.mnist_cnn import Cnn  # noqa: PLC0415  (the built-in is a plain module too)

    torch.manual_seed(1)
    model = Cnn(1, 10).to(DEVICE)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    loader = DataLoader(dataset, batch_size=128, shuffle=False, pin_memory=True)
    totals = {"loss": 0.0, "acc": 0.0}

    def step(batch: tuple[torch.Tensor, torch.Tensor]) -> None:  # a measurement hands a step one batch
        img, label = batch
        img = img.to(DEVICE)
        label = label.to(DEVICE)
        out = model(img)
        loss = criterion(out, label)
        totals["loss"] += loss.item() * label.size(0)
        _, pred = torch.max(out, 1)
        num_correct = (pred == label).sum()
        totals["acc"] += num_correct.item()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step, loader


def plain_loop(workload_name: str, config: Config) -> tuple[Step, Any]:
    """A hand-set loop through our Step (no per-step host sync): the second seed's advice, worker counts."""
    workload = load(resolve(workload_name))
    torch.manual_seed(0)
    model = workload.build_model().to(DEVICE)
    opt = workload.build_optimizer(model.parameters(), workload.defaults["lr"])
    step = Step(model, workload.build_loss(), opt, config, DEVICE)
    loader = build_loader(workload.build_dataset(data_root()), config, bool(workload.default("shuffle")), False, DEVICE)
    return step, loader


def tuned_loop(workload_name: str, folder: Path) -> tuple[Step, Any, str]:
    """What a user writes: tuned_loader + tuned_step, reading the recipe the search wrote."""
    here = os.getcwd()
    os.chdir(folder)
    try:
        workload = load(resolve(workload_name))
        tuned = load_tuned(workload_name, DEVICE)
        torch.manual_seed(0)
        model = workload.build_model().to(DEVICE)
        opt = workload.build_optimizer(model.parameters(), tuned.lr)
        loader = tuned_loader(workload.build_dataset(data_root()), recipe=workload_name, device=DEVICE)
        step = tuned_step(model, workload.build_loss(), opt, recipe=workload_name, device=DEVICE)
        return step, loader, tuned.config.describe()
    finally:
        os.chdir(here)


def whole_run(step: Callable, loader: Any, epochs: int) -> float:
    start = time.perf_counter()
    for _ in range(epochs):
        for batch in loader:
            step(batch)
    sync()
    return time.perf_counter() - start


Row = tuple[str, str, float, str]  # workload, loop, samples/s, ratio


def _add(rows: list[Row], row: Row) -> None:
    """Print the row as it is measured, so a run cut short still shows what it measured; then keep it."""
    workload, loop, rate, ratio = row
    print(f"{workload:<18} {loop:<92} {rate:>12,.0f}  {ratio}", flush=True)
    rows.append(row)


def _mnist_rows(searches: dict[str, dict[str, Any]]) -> tuple[list[Row], Any]:
    rows: list[Row] = []
    mnist = load(resolve("mnist_cnn")).build_dataset(data_root())
    seed = rate_of(*seed_loop_as_written(mnist))
    _add(rows, ("mnist_cnn", "the seed's loop as written (bs 128, 0 workers, .item() per step)", seed, "1.0x"))
    advice = Config(batch_size=1024, num_workers=8, pin_memory=True, persistent_workers=True, prefetch_factor=2,
                    cudnn_benchmark=True)
    r = rate_of(*plain_loop("mnist_cnn", advice))
    _add(rows, ("mnist_cnn", "the second seed's advice (bs 1024, 8 workers, pinned, persistent, cudnn)", r,
                f"{r / seed:.1f}x seed"))
    r = rate_of(*plain_loop("mnist_cnn", Config(batch_size=128, pin_memory=True)))
    _add(rows, ("mnist_cnn", "untuned defaults through our loop (no per-step sync)", r, f"{r / seed:.1f}x seed"))
    for name in ("mnist_cnn@bs128", "mnist_cnn"):
        if name in searches:
            step, loader, what = tuned_loop("mnist_cnn", searches[name]["folder"])
            r = rate_of(step, loader)
            _add(rows, ("mnist_cnn", f"tuned [{name}]: {what}", r, f"{r / seed:.1f}x seed"))
    return rows, mnist


def _cifar_rows(searches: dict[str, dict[str, Any]]) -> list[Row]:
    rows: list[Row] = []
    untuned = rate_of(*plain_loop("cifar10_resnet18", Config(batch_size=128)))
    _add(rows, ("cifar10_resnet18", "untuned defaults (bs 128, 0 workers, not pinned)", untuned, "1.0x"))
    workers = {}
    for n in (8, 16):
        n_eff = min(n, len(os.sched_getaffinity(0)))
        config = Config(batch_size=128, num_workers=n_eff, prefetch_factor=2)
        workers[n] = rate_of(*plain_loop("cifar10_resnet18", config))
        _add(rows, ("cifar10_resnet18", f"{n_eff} workers, all else default", workers[n],
                    f"{workers[n] / untuned:.1f}x untuned"))
    if "cifar10_resnet18@bs128" in searches:
        step, loader, what = tuned_loop("cifar10_resnet18", searches["cifar10_resnet18@bs128"]["folder"])
        r = rate_of(step, loader)
        _add(rows, ("cifar10_resnet18", f"tuned [bs128]: {what}", r,
                    f"{r / untuned:.1f}x untuned, {r / max(workers.values()):.1f}x best workers"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--budget", type=float, default=150.0, help="seconds each search may take")
    parser.add_argument("--searches", default=",".join(SEARCHES), help="which of the searches to run, by name")
    parser.add_argument("--skip-search", action="store_true", help="reuse the searches already in --out")
    parser.add_argument("--rows", default="mnist_cnn,cifar10_resnet18", help="which workloads' rows to measure")
    args = parser.parse_args()
    wanted = args.rows.split(",")
    unknown = sorted(set(wanted) - {"mnist_cnn", "cifar10_resnet18"})
    if unknown:
        parser.error(f"--rows takes mnist_cnn and cifar10_resnet18, but got {', '.join(unknown)}")
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"device: {torch.cuda.get_device_name(0) if DEVICE.type == 'cuda' else 'cpu'}, torch {torch.__version__}, "
          f"CPU cores {len(os.sched_getaffinity(0))}", flush=True)
    searches: dict[str, dict[str, Any]] = {}
    for name in args.searches.split(","):
        recipe, extra = SEARCHES[name]
        if args.skip_search:
            searches[name] = {"folder": args.out / name.replace("@", "_"), "wall_s": float("nan"),
                              "best_after_s": float("nan"), "trials": 0}
        else:
            searches[name] = run_search(name, recipe, extra, args.out, args.trials, args.budget)
    print(f"\n{'workload':<18} {'loop':<92} {'samples/s':>12}  ratio", flush=True)
    mnist_rows, mnist = _mnist_rows(searches) if "mnist_cnn" in wanted else ([], None)
    rows = mnist_rows + (_cifar_rows(searches) if "cifar10_resnet18" in wanted else [])
    whole: dict[str, float] = {}
    if "mnist_cnn@bs128" in searches and mnist is not None:
        whole = _whole_runs(mnist, searches["mnist_cnn@bs128"]["folder"])
    for name, s in searches.items():
        print(f"search {name:<24} wall {s['wall_s']:.0f} s, {s['trials']} trials, final best found "
              f"{s['best_after_s']:.0f} s after the first trial started")
    summary = {"rows": rows, **whole, "searches": {k: {**v, "folder": str(v["folder"])} for k, v in searches.items()}}
    (args.out / "bench.json").write_text(json.dumps(summary, indent=1))


def _whole_runs(mnist: Any, tuned_folder: Path) -> dict[str, float]:
    """The seed's whole declared run (10 epochs) end to end, as written and tuned, one-time costs included."""
    epochs = load(resolve("mnist_cnn")).defaults["epochs"]
    t_seed = whole_run(*seed_loop_as_written(mnist), epochs)
    start = time.perf_counter()
    step, loader, _ = tuned_loop("mnist_cnn", tuned_folder)
    whole_run(step, loader, epochs)
    t_tuned = time.perf_counter() - start
    print(f"\nmnist_cnn, the seed's {epochs}-epoch run end to end: as written {t_seed:.1f} s; tuned at bs 128 "
          f"{t_tuned:.1f} s (loader, materialisation, capture included): {t_seed / t_tuned:.1f}x faster\n")
    return {"seed_run_s": t_seed, "tuned_run_s": t_tuned}


if __name__ == "__main__":
    main()
