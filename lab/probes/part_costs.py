"""Where a heavy model's part measurements spend their seconds, in one process as a trial process makes them.

A search values configs from their step and loader rates measured apart
(``autotune.trial.parts``); on ResNet-50 the plan made 6-7 parts in 120 s. This makes
the parts of a few configs in turn, in the order a plan would ask for them, and prints
each part's phases (build, first batch, warm-up, windows, compile), the compile of a
step measured twice (the second served by Inductor's caches, as a trial after its part
is), and each loader part measured with the backlog skip of a trial (the workers'
whole capacity) and with the part's own (what they hold ready), alternated, so the
two rates can be compared.

    python lab/probes/part_costs.py --recipe imagenet_resnet50 --out /tmp/parts.json
    python lab/probes/part_costs.py --recipe webdataset_resnet50 --only loader --workers 15,8 --batches 256,1024
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import torch

from autotune.config import Config
from autotune.trial import parts
from autotune.trial.runner import Runner
from autotune.workloads import load, resolve


def timed(what: str, made: list[dict[str, Any]], run: Any) -> dict[str, Any]:
    began = time.perf_counter()
    found = run()
    row = {"what": what, "wall_s": round(time.perf_counter() - began, 2), **found}
    made.append(row)
    print(json.dumps(row), flush=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="imagenet_resnet50")
    parser.add_argument("--workers", default="15", help="loader parts' worker counts, comma-separated")
    parser.add_argument("--batches", default="", help="loader parts' batch sizes (default: the workload's)")
    parser.add_argument("--repeat", type=int, default=2, help="loader parts of each kind, alternated")
    parser.add_argument("--only", default=".", help="a regular expression over the parts' names: those alone")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    workload = load(resolve(args.recipe))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    began = time.perf_counter()
    runner = Runner(workload, device, cpu_share=os.cpu_count())
    runner.dataset  # noqa: B018
    made: list[dict[str, Any]] = [{"what": "data set", "wall_s": round(time.perf_counter() - began, 2)}]
    lr = float(workload.defaults["lr"])
    bs = int(workload.defaults["batch_size"])
    counts = [int(n) for n in args.workers.split(",")]
    cuda = device.type == "cuda"
    base = Config(batch_size=bs, num_workers=counts[0], pin_memory=True, persistent_workers=True, prefetch_factor=4,
                  cudnn_benchmark=cuda, channels_last=cuda, amp="bf16" if cuda else "off", device_normalize=cuda)
    graph = dataclasses.replace(base, cuda_graph=True)
    compiled = dataclasses.replace(graph, compile="default")
    steps = [("step eager", base), ("step eager again", base), ("step graph", graph),
             ("step 2x batch", dataclasses.replace(base, batch_size=2 * bs)), ("step compiled", compiled),
             ("step compiled again", compiled)]
    wanted = re.compile(args.only)
    for what, config in steps:
        if wanted.search(what):
            timed(what, made, lambda c=config: parts.step_rate(runner, c, lr))
    held, whole = parts.PART_WINDOWS, dataclasses.replace(parts.PART_WINDOWS, backlog_held=False)
    for batch in [int(b) for b in args.batches.split(",") if b] or [bs]:
        for workers in counts:
            config = dataclasses.replace(base, num_workers=workers, batch_size=batch)
            for i in range(args.repeat):
                for what, windows in (("loader, held backlog", held), ("loader, whole capacity", whole)):
                    name = f"{what}, bs={batch}, {workers} workers, #{i + 1}"
                    if wanted.search(name):
                        timed(name, made, lambda c=config, w=windows: parts.loader_rate(runner, c, lr, w))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(made, indent=1))


if __name__ == "__main__":
    main()
