"""`autotune diagnose`: the second seed's stages 1 and 2 for one loop, in this process, in under a minute.

Stage 1, health: the loop as configured (the workload's own settings, or with
``profile=True`` the tuned profile for this machine), with GPU utilisation
sampled through NVML, peak GPU memory, and the CPU time of the main process and
of its DataLoader workers. Stage 2, attribution: the same step fed by synthetic
batches already on the device (a), the real loader with the model removed (b),
and the real loop (c); where CUDA allows, also the host-to-device copy alone and
the step captured in a CUDA graph. `autotune.verdict.decide` turns those
numbers into a verdict. Windows are short: this is a diagnosis, not a search.

    autotune diagnose --recipe mnist_cnn
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from autotune import recipe as recipe_file
from autotune.config import Config, baseline_config
from autotune.cputime import cpu_times
from autotune.measure import GpuSampler, Windows, measure
from autotune.runner import Runner, classify_failure, nvml_index
from autotune.space import build_space, detect_machine
from autotune.text import mib, percent, rate, table
from autotune.verdict import Measured, Verdict, decide
from autotune.workload import load, resolve

# Short windows: five feeds of one loop must fit in well under a minute on a GPU.
WINDOWS = Windows(warmup_steps=5, window_s=0.2, min_windows=3, max_windows=8, rel_tol=0.05, boundaries=1)
LOW_UTIL_PERCENT = 50  # the health check reports the share of GPU samples below this
SYNTHETIC_EPOCH = 1_000_000  # steps: a repeated batch has no epoch, so a window is never cut short by one


class DiagnoseError(RuntimeError):
    """A diagnosis that cannot run; the message says why and what to do."""


# -- one feed, measured ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Probe:
    """One way of feeding the step, measured."""

    label: str
    samples_per_s: float  # steady: median over windows, epoch boundaries excluded
    end_to_end: float  # with each epoch's start-up spread over the epoch
    spread: float
    epoch_overhead_s: float
    gpu_util: float | None  # mean %, NVML
    gpu_util_low: float | None  # share of NVML samples under LOW_UTIL_PERCENT
    main_cpu: float  # cores busy in this process
    worker_cpu: float | None  # cores busy in its child processes (DataLoader workers)
    peak_memory_bytes: int | None
    seconds: float


class _Repeat:
    """The same few batches over and over, shaped like a loader for `measure` (len, iter, dataset)."""

    def __init__(self, batches: list[tuple[torch.Tensor, torch.Tensor]], steps: int = SYNTHETIC_EPOCH) -> None:
        self.batches, self.steps = batches, max(2, steps)
        self.batch_size = int(batches[0][0].shape[0])
        self.drop_last = True
        self.dataset = range(self.steps * self.batch_size)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Any:
        return (self.batches[i % len(self.batches)] for i in range(self.steps))


def _synthetic(x: torch.Tensor, y: torch.Tensor, n: int = 2) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Batches shaped like (x, y), made on x's device: random inputs at x's scale, y's labels shuffled."""
    g = torch.Generator(device=x.device).manual_seed(0)
    batches = []
    for _ in range(n):
        perm = torch.randperm(len(x), generator=g, device=x.device)
        if x.is_floating_point():
            xf = x.float()
            xs = (torch.randn(x.shape, generator=g, device=x.device) * xf.std() + xf.mean()).to(x.dtype)
        else:
            xs = x[perm].clone()
        batches.append((xs.contiguous(), y[perm].clone()))
    return batches


def _probe(label: str, step: Callable, loader: Any, device: torch.device, windows: Windows) -> Probe:
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    sampler = GpuSampler(nvml_index(device.index or 0)) if cuda else None
    before, start = cpu_times(), time.perf_counter()
    with sampler or contextlib.nullcontext():
        m = measure(step, loader, windows, sync=sync)
    wall, after = time.perf_counter() - start, cpu_times()
    workers = None
    if after.children_s is not None and before.children_s is not None:
        workers = (after.children_s - before.children_s) / wall
    return Probe(
        label=label,
        samples_per_s=m.steady_samples_per_s,
        end_to_end=m.samples_per_s,
        spread=m.spread,
        epoch_overhead_s=m.epoch_overhead_s,
        gpu_util=sampler.mean_util if sampler else None,
        gpu_util_low=sampler.share_below(LOW_UTIL_PERCENT) if sampler else None,
        main_cpu=(after.main_s - before.main_s) / wall,
        worker_cpu=workers,
        peak_memory_bytes=torch.cuda.max_memory_allocated(device) if cuda else None,
        seconds=wall,
    )


# -- the diagnosis -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    """Stages 1 and 2 for one loop: what was measured, what was skipped or failed, and the verdict."""

    recipe: str
    hardware: str
    device: str
    cpu_cores: int
    source: str  # whose settings: the workload's own, or the tuned profile
    config: Config
    lr: float
    probes: dict[str, Probe]  # loop, input, transfer, compute, graphed: the ones that ran
    skipped: dict[str, str]  # what did not apply here, and why
    failed: dict[str, str]  # what raised, and the one-line reason
    measured: Measured
    verdict: Verdict
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["config"] = self.config.as_dict()
        return out


def _settings(recipe: str, profile: bool, workload: Any, tuned_path: Path, hardware: str, cuda: bool) -> tuple[Config, float, str]:
    if not profile:
        return baseline_config(workload, cuda), float(workload.defaults["lr"]), "the workload's own settings"
    if not tuned_path.exists():
        raise DiagnoseError(f"--profile: there is no tuned recipe at {tuned_path}; run `autotune search --recipe {recipe}` first.")
    found = recipe_file.match(recipe_file.read(tuned_path), hardware)
    if found is None:
        have = ", ".join(repr(h) for h in recipe_file.read(tuned_path).get("profiles", {})) or "none"
        raise DiagnoseError(f"--profile: {tuned_path} has no profile for {hardware!r} (profiles: {have}); "
                            f"run `autotune search --recipe {recipe}` on this machine, or drop --profile.")
    lr = float(found.get("lr", workload.defaults["lr"]))
    return recipe_file.knobs_to_config(found["knobs"]), lr, f"the tuned profile for {hardware}"


def diagnose(recipe: str, profile: bool = False, device_index: int = 0, windows: Windows = WINDOWS,
             echo: Callable[[str], None] = print) -> Diagnosis:
    """Health check and bottleneck attribution of one workload's loop on this machine.

    `echo` receives progress lines; the returned `Diagnosis` holds every number.

    >>> d = diagnose("mnist_cnn")  # doctest: +SKIP
    >>> d.verdict.kind, d.probes["loop"].samples_per_s  # doctest: +SKIP
    ('input-bound', 14210.4)
    """
    started = time.perf_counter()
    ref = resolve(recipe)
    workload = load(ref)
    machine = detect_machine(device_index)
    device = torch.device("cuda", device_index) if machine.cuda else torch.device("cpu")
    config, lr, source = _settings(recipe, profile, workload, ref.tuned_path, machine.hardware, machine.cuda)
    echo(f"autotune diagnose: {ref.name} on {machine.hardware} ({machine.cpu_share} CPU cores), {source}: {config.describe()}")
    runner = Runner(workload, device, cpu_share=machine.cpu_share)
    excluded = build_space(workload.defaults["batch_size"], machine, runner.facts()).excluded  # facts() builds the data set

    skipped: dict[str, str] = {}
    if not machine.cuda:
        skipped["GPU utilisation, peak GPU memory"] = "no CUDA device here"
        skipped["host-to-device copy alone"] = "no host-to-device copy on a CPU"
        skipped["graph-captured step"] = "CUDA graphs need a CUDA device"
    elif config.placement == "device":
        skipped["host-to-device copy alone"] = "the batches already live on the device (placement=device)"
    if machine.cuda and config.cuda_graph:
        skipped["graph-captured step"] = "the step as configured is already graph-captured"
    plan = ["loop", "input", "transfer", "compute", "graphed"]
    plan = [p for p in plan if not (p == "transfer" and "host-to-device copy alone" in skipped)
            and not (p == "graphed" and "graph-captured step" in skipped)]
    probes: dict[str, Probe] = {}
    failed: dict[str, str] = {}
    kept: list[tuple[torch.Tensor, torch.Tensor]] = []  # the first host batch, and its device copy
    non_blocking = config.pin_memory and machine.cuda

    def copy(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        xd, yd = x.to(device, non_blocking=non_blocking), y.to(device, non_blocking=non_blocking)
        if not kept:
            kept.extend([(x, y), (xd, yd)])
        return xd, yd

    def run(name: str) -> Probe:
        if name == "loop":
            loader, step, _ = runner.build(config, lr)
            return _probe("(c) the real loop", step, loader, device, windows)
        if name == "input":
            loader, _, _ = runner.build(config, lr)
            return _probe("(b) the real loader, no model", copy, loader, device, windows)
        if not kept:
            raise DiagnoseError("the input ceiling (b) failed, so no real batch is at hand to copy or imitate")
        if name == "transfer":
            return _probe("    the host-to-device copy alone", copy, _Repeat([kept[0]]), device, windows)
        batches = _synthetic(*kept[1])
        graphed = dataclasses.replace(config, cuda_graph=True) if name == "graphed" else config
        _, step, _ = runner.build(graphed, lr)
        label = "(a) synthetic batches on the device" if name == "compute" else "    the same step, graph-captured"
        return _probe(label, step, _Repeat(batches), device, windows)

    for i, name in enumerate(plan, 1):
        echo(f"  [{i}/{len(plan)}] {_DOING[name]} ...")
        try:
            probes[name] = run(name)
        except Exception as exc:  # one feed failing (an OOM, a capture error) leaves the others standing
            reason = classify_failure(exc)
            if name == "loop":
                raise DiagnoseError(f"the real loop ({config.describe()}) failed: {reason}; there is nothing to diagnose.") from exc
            failed[name] = reason
            echo(f"        failed: {reason}")
            if machine.cuda:
                torch.cuda.empty_cache()
            continue
        p = probes[name]
        echo(f"        {p.samples_per_s:,.0f} samples/s (±{p.spread:.1%}), {p.seconds:.1f} s")
    if machine.cuda and probes["loop"].gpu_util is None:
        skipped["GPU utilisation"] = "NVML is not available (no driver library, or no permission)"

    def speed(name: str) -> float | None:
        return probes[name].samples_per_s if name in probes else None

    measured = Measured(
        loop=probes["loop"].samples_per_s, input=speed("input"), compute=speed("compute"), transfer=speed("transfer"),
        graphed=speed("graphed"), compute_gpu_util=probes["compute"].gpu_util if "compute" in probes else None, cuda=machine.cuda,
    )
    return Diagnosis(
        recipe=ref.name, hardware=machine.hardware, device=str(device), cpu_cores=machine.cpu_share, source=source,
        config=config, lr=lr, probes=probes, skipped=skipped, failed=failed, measured=measured,
        verdict=decide(measured, config, excluded), seconds=time.perf_counter() - started,
    )


_DOING = {
    "loop": "the real loop",
    "input": "the real loader with the model removed, batches copied to the device",
    "transfer": "the host-to-device copy of one loader batch, alone",
    "compute": "the same step on synthetic batches already on the device",
    "graphed": "the same step on the device, captured in a CUDA graph",
}


# -- what the command prints -------------------------------------------------------------------


def _cores(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def render(d: Diagnosis) -> str:
    """The diagnosis as tables a person reads at a glance."""
    loop = d.probes["loop"]
    workers = d.config.num_workers if d.config.placement == "stream" else 0
    lines = [f"{d.recipe} on {d.hardware} ({d.cpu_cores} CPU cores), {d.source}: {d.config.describe()}", ""]
    lines.append("stage 1, health: the real loop")
    health = [
        ("samples/s, steady", f"{rate(loop.samples_per_s)} (±{loop.spread:.1%})"),
        ("samples/s, end to end", f"{rate(loop.end_to_end)} (a fresh epoch costs {loop.epoch_overhead_s:.2f} s more)"),
    ]
    if loop.gpu_util is not None:
        health.append(("GPU utilisation", f"mean {loop.gpu_util:.0f}%; {percent(loop.gpu_util_low)} of samples under {LOW_UTIL_PERCENT}%"))
    if loop.peak_memory_bytes is not None:
        health.append(("peak GPU memory", f"{mib(loop.peak_memory_bytes)} allocated by tensors"))
    health.append(("CPU, main process", f"{_cores(loop.main_cpu)} cores"))
    if not workers:
        health.append(("CPU, loader workers", "none (num_workers=0: the main process loads)"))
    elif loop.worker_cpu is None:
        health.append(("CPU, loader workers", "not measured (live workers are visible in Linux's /proc only)"))
    else:
        health.append(("CPU, loader workers", f"{_cores(loop.worker_cpu)} cores over {workers} workers"))
    width = max(len(k) for k, _ in health)
    lines += [f"  {k.ljust(width)}  {v}" for k, v in health]

    lines += ["", "stage 2, attribution: the same step fed three ways"]
    rows = []
    for name in ("loop", "input", "transfer", "compute", "graphed"):
        p = d.probes.get(name)
        if p is None:
            continue
        util = "-" if p.gpu_util is None else f"{p.gpu_util:.0f}%"
        rows.append([p.label, rate(p.samples_per_s), f"{p.samples_per_s / loop.samples_per_s:.2f}x", util, _cores(p.main_cpu), _cores(p.worker_cpu)])
    lines += table(["feed", "samples/s", "vs (c)", "GPU util", "CPU main", "CPU workers"], rows, right=[1, 2, 3, 4, 5])

    v = d.verdict
    lines += ["", f"verdict: {v.title}", f"  {v.reason}"]
    lines += [f"  - {e}" for e in v.evidence]
    if v.knobs:
        lines.append(f"  knobs that address it: {', '.join(v.knobs)}")
    if v.next:
        lines.append(f"  next: {v.next}")
    if v.knobs:
        lines.append(f"  search them: autotune search --recipe {d.recipe}")
    if d.skipped:
        lines += ["", "skipped here:"] + [f"  {what}: {why}" for what, why in d.skipped.items()]
    if d.failed:
        lines += ["", "failed:"] + [f"  {_DOING[what]}: {why}" for what, why in d.failed.items()]
    lines += ["", f"diagnosed in {d.seconds:.0f} s"]
    return "\n".join(lines)
