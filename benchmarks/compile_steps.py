"""The compiled ceiling: one training step on batches already on the GPU, eager, in a CUDA graph, under torch.compile.

    python benchmarks/compile_steps.py
    python benchmarks/compile_steps.py --models resnet50 --modes default,max-autotune-no-cudagraphs
    python benchmarks/compile_steps.py --out /tmp/compile_steps.json

For each model (ResNet-50 at batch 256 in bf16 with channels_last; the seed's MNIST CNN
at batch 1024 in fp32), autotune's own step (``autotune.loop.Step``, what a trial and
``tuned_step`` run) trains on two synthetic batches already on the device, so the
numbers are the step's alone, with no loader. Rows, one process per model, in order:

- eager; CUDA graph (``cuda_graph=on``: the whole step captured and replayed);
- each ``--modes`` value as ``compile=<mode>`` (``autotune.loop.compiled``: the loss under
  ``torch.compile(fullgraph=True)``), alone and captured in the graph (compile + graph);
- ``reduce-overhead``, which autotune does not offer (its CUDA graph trees capture the
  forward and backward apart; ``cuda_graph=on`` captures the whole step): measured here so
  the choice rests on a number;
- the first mode again: its compile served by Inductor's on-disk caches
  (``TORCHINDUCTOR_CACHE_DIR``, a fresh folder per run unless ``--cache-dir``), what a
  search's second trial of the same shapes pays.

Before every row ``torch._dynamo.reset()`` drops what Dynamo holds in memory, as a trial
does; Inductor's on-disk caches carry over, so a mode's first row compiles cold and its
compile + graph row (the same graphs) mostly from the cache, as in a search.

Each row warms up (`--warmup` steps: the compile, the graph's capture, cuDNN's autotuning),
then runs for `--seconds`, the device synchronised at the ends only. ``compile s`` is the
host time of the steps that compiled (``Step.compile_s``), ``setup s`` the whole warm-up.
Every ratio is to the eager and to the graph row of the same run. A row that fails prints
its reason and the next runs. ResNet-50's cold default-mode compile took 38 s on an H200
(issue 43); the default rows take about 3 minutes on one H200, max-autotune more.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODELS = {
    # name: (recipe, batch size, amp, channels_last, input shape, classes)
    "resnet50": ("imagenet_resnet50", 256, "bf16", True, (3, 224, 224), 1000),
    "mnist_cnn": ("mnist_cnn", 1024, "off", False, (1, 28, 28), 10),
}
REDUCE_OVERHEAD = "reduce-overhead"


@dataclasses.dataclass(frozen=True)
class Row:
    label: str
    cuda_graph: bool
    compile: str
    again: bool = False  # a mode measured before: its compile served by Inductor's on-disk caches


def rows(modes: list[str]) -> list[Row]:
    made = [Row("eager", False, "off"), Row("CUDA graph", True, "off")]
    for mode in modes:
        made += [Row(f"compile={mode}", False, mode), Row(f"compile={mode} + graph", True, mode)]
    made.append(Row(f"compile={REDUCE_OVERHEAD} (not offered)", False, REDUCE_OVERHEAD))
    if modes:
        made.append(Row(f"compile={modes[0]} again, caches warm", False, modes[0], again=True))
    return made


def measure(name: str, row: Row, seconds: float, warmup: int, where: str) -> dict[str, Any]:
    import torch

    from autotune.config import Config
    from autotune.loop import Step, compiled
    from autotune.workloads import load, resolve

    recipe, batch_size, amp, channels_last, shape, classes = MODELS[name]
    workload = load(resolve(recipe))
    device = torch.device(where)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    compiled.COMPILE_OPTIONS.setdefault(REDUCE_OVERHEAD, {"mode": REDUCE_OVERHEAD})
    torch._dynamo.reset()  # as a trial does (autotune.trial.runner): only the on-disk caches carry over
    torch.manual_seed(0)
    model = workload.build_model().to(device)
    optimizer = workload.build_optimizer(model.parameters(), float(workload.defaults["lr"]))
    config = Config(batch_size=batch_size, placement="device", cudnn_benchmark=True, channels_last=channels_last,
                    amp=amp, cuda_graph=row.cuda_graph, compile=row.compile)
    step = Step(model, workload.build_loss(), optimizer, config, device)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    batches = [(torch.randn(batch_size, *shape, device=device).contiguous(memory_format=fmt),
                torch.randint(0, classes, (batch_size,), device=device)) for _ in range(2)]
    start = time.perf_counter()
    for i in range(warmup):
        step(batches[i % 2])
    sync()
    setup_s = time.perf_counter() - start
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            step(batches[steps % 2])
            steps += 1
        if steps % 50 == 0:
            sync()  # keep the host within 50 steps of the device, so the clock reads the device
    sync()
    elapsed = time.perf_counter() - start
    result = {"samples_per_s": steps * batch_size / elapsed, "setup_s": setup_s, "compile_s": step.compile_s,
              "steps": steps, "graphs": step.compiled.graphs if step.compiled is not None else 0}
    del step, model, optimizer
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def run_model(name: str, modes: list[str], seconds: float, warmup: int, where: str) -> list[dict[str, Any]]:
    """Every row of one model, in this process."""
    found = []
    for row in rows(modes):
        try:
            result = measure(name, row, seconds, warmup, where)
        except Exception as exc:  # a row that cannot run says why; the others still run
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            result = {"error": f"{type(exc).__name__}: {first[:300]}"}
        found.append({"model": name, **dataclasses.asdict(row), **result})
        print(json.dumps(found[-1]), flush=True)
    return found


def table(name: str, found: list[dict[str, Any]], where: str) -> None:
    import torch

    recipe, batch_size, amp, channels_last, _, _ = MODELS[name]
    print(f"\n{recipe}, batch {batch_size}, {amp if amp != 'off' else 'fp32'}"
          f"{', channels_last' if channels_last else ''}, synthetic batches on the device; "
          f"{torch.cuda.get_device_name() if where == 'cuda' else where}, torch {torch.__version__}")
    eager = next((r["samples_per_s"] for r in found if r["label"] == "eager" and "error" not in r), None)
    graph = next((r["samples_per_s"] for r in found if r["label"] == "CUDA graph" and "error" not in r), None)
    print(f"  {'step':<52} {'samples/s':>11} {'x eager':>8} {'x graph':>8} {'compile s':>10} {'setup s':>8}")
    for r in found:
        if "error" in r:
            print(f"  {r['label']:<52} failed: {r['error']}")
            continue
        rate = r["samples_per_s"]
        print(f"  {r['label']:<52} {rate:>11,.0f} {rate / eager if eager else float('nan'):>8.2f} "
              f"{rate / graph if graph else float('nan'):>8.2f} {r['compile_s']:>10.1f} {r['setup_s']:>8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet50,mnist_cnn", help=f"any of {', '.join(MODELS)}")
    parser.add_argument("--modes", default="default", help="compile modes to measure, comma-separated")
    parser.add_argument("--seconds", type=float, default=5.0, help="timed seconds per row")
    parser.add_argument("--warmup", type=int, default=8, help="untimed steps per row: compile, capture, autotuning")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="Inductor's cache (TORCHINDUCTOR_CACHE_DIR); a fresh folder by default, so compiles "
                             "start cold")
    parser.add_argument("--device", default="cuda", help="cuda; cpu only to try the script itself")
    parser.add_argument("--out", type=Path, default=None, help="also write every row as JSON here")
    parser.add_argument("--model", help=argparse.SUPPRESS)  # one model's rows, in a process of its own
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if args.model:
        table(args.model, run_model(args.model, modes, args.seconds, args.warmup, args.device), args.device)
        return
    env = dict(os.environ)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(args.cache_dir or tempfile.mkdtemp(prefix="compile_steps_"))
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    print(f"commit {commit or '?'}; Inductor's cache {env['TORCHINDUCTOR_CACHE_DIR']}", flush=True)
    everything: list[dict[str, Any]] = []
    start = time.perf_counter()
    for name in args.models.split(","):
        if name not in MODELS:
            parser.error(f"--models: {name!r} is not one of {', '.join(MODELS)}")
        # A process per model: a failed capture or compile of one leaves the other's rows alone.
        command = [sys.executable, __file__, "--model", name, "--modes", args.modes, "--seconds", str(args.seconds),
                   "--warmup", str(args.warmup), "--device", args.device]
        out = subprocess.run(command, env=env, capture_output=True, text=True)
        for line in out.stdout.splitlines():
            if line.startswith("{"):
                everything.append(json.loads(line))
            else:
                print(line)
        if out.returncode != 0:
            print(f"{name}: its process exited with {out.returncode}: {out.stderr.strip()[-2000:]}")
    print(f"\n{time.perf_counter() - start:.0f} s in all")
    if args.out:
        args.out.write_text(json.dumps(everything, indent=1))


if __name__ == "__main__":
    main()
