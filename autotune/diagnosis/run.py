"""`autotune diagnose`: a health check and bottleneck attribution of one loop, in this process, in under a minute.

The health check: the loop as configured (the workload's own settings, or with
``profile=True`` the tuned profile for this machine), with GPU utilisation
sampled through NVML, peak GPU memory, the CPU time of the main process and
of its DataLoader workers, and whether its loss stayed finite (read after the
timing, never inside it: ``autotune.trial.losses``). Bottleneck attribution: the same step fed by synthetic
batches already on the device (a), the real loader with the model removed (b),
and the real loop (c); where CUDA allows, also the host-to-device copy alone and
the step captured in a CUDA graph. `autotune.diagnosis.bottleneck.decide` turns those
numbers into a verdict. Windows are short: this is a diagnosis, not a search.

    autotune diagnose --recipe mnist_cnn
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from autotune.batch import to_device
from autotune.config import Config
from autotune.diagnosis.bottleneck import Bottleneck, Measured, decide
from autotune.errors import AutotuneError
from autotune.knobs import detect_machine
from autotune.study.space.domains import build_space
from autotune.text import nonfinite
from autotune.trial.losses import LossWatch
from autotune.trial.probe import Probe, Repeat, probe, synthetic
from autotune.trial.runner import Runner, classify_failure
from autotune.trial.timing import Windows
from autotune.tuned import file as tuned_file
from autotune.workloads import load, resolve
from autotune.workloads.settings import baseline_config

# Short windows: five feeds of one loop must fit in well under a minute on a GPU.
WINDOWS = Windows(warmup_steps=5, window_s=0.2, min_windows=3, max_windows=8, rel_tol=0.05, boundaries=1)


class DiagnoseError(AutotuneError, RuntimeError):
    """A diagnosis that cannot run; the message says why and what to do."""


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
    verdict: Bottleneck
    seconds: float
    loss: str = ""  # what the real loop's loss did: finite at every step, or where it became NaN or inf

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["config"] = self.config.as_dict()
        return out


def _settings(
    recipe: str, profile: bool, workload: Any, tuned_path: Path, hardware: str, cuda: bool
) -> tuple[Config, float, str]:
    if not profile:
        return baseline_config(workload, cuda), float(workload.defaults["lr"]), "the workload's own settings"
    if not tuned_path.exists():
        raise DiagnoseError(
            f"--profile: there is no tuned file at {tuned_path}; run `autotune search --recipe {recipe}` first."
        )
    data = tuned_file.read(tuned_path, workload.name)
    found = tuned_file.match(data, hardware)
    if found is None:
        have = ", ".join(repr(h) for h in data.get("profiles", {})) or "none"
        raise DiagnoseError(
            f"--profile: {tuned_path} has no profile for {hardware!r} (profiles: {have}); "
            f"run `autotune search --recipe {recipe}` on this machine, or drop --profile."
        )
    lr = float(found.get("lr", workload.defaults["lr"]))
    return tuned_file.knobs_to_config(found["knobs"]), lr, f"the tuned profile for {hardware}"


class _Feeds:
    """The five ways of feeding one loop's step; `run(name)` measures one."""

    LABELS = {
        "loop": "(c) the real loop",
        "input": "(b) the real loader, no model",
        "transfer": "    the host-to-device copy alone",
        "compute": "(a) synthetic batches on the device",
        "graphed": "    the same step, graph-captured",
    }

    def __init__(self, runner: Runner, config: Config, lr: float, device: torch.device, windows: Windows) -> None:
        self.runner, self.config, self.lr, self.device, self.windows = runner, config, lr, device, windows
        self.non_blocking = config.pin_memory and device.type == "cuda"
        self.count = runner.workload.count
        self.kept: list[Any] = []  # the first host batch, and its device copy
        self.loss = ""  # what the real loop's loss did, once it ran (``loss_health``)

    def copy(self, batch: Any) -> Any:
        on_device = to_device(batch, self.device, self.non_blocking)
        if not self.kept:
            self.kept.extend([batch, on_device])
        return on_device

    def run(self, name: str) -> Probe:
        label = self.LABELS[name]
        if name == "loop":
            loader, step, _ = self.runner.build(self.config, self.lr)
            watch = LossWatch(step, self.config.describe())  # its losses read once, after the timing
            measured = probe(label, watch, loader, self.device, self.windows, self.count)
            self.loss = loss_health(watch)
            return measured
        if name == "input":
            loader, _, _ = self.runner.build(self.config, self.lr)
            return probe(label, self.copy, loader, self.device, self.windows, self.count)
        if not self.kept:
            raise DiagnoseError("the input ceiling (b) failed, so no real batch is at hand to copy or imitate")
        if name == "transfer":
            return probe(label, self.copy, Repeat([self.kept[0]], count=self.count), self.device, self.windows,
                         self.count)
        graphed = dataclasses.replace(self.config, cuda_graph=True) if name == "graphed" else self.config
        _, step, _ = self.runner.build(graphed, self.lr)
        made = Repeat(synthetic(self.kept[1]), count=self.count)
        return probe(label, step, made, self.device, self.windows, self.count)


def loss_health(watch: LossWatch) -> str:
    """What the loop's loss did over the steps `watch` kept: finite throughout, or where it became NaN or inf."""
    bad = watch.read()
    if bad is None:
        return f"finite at every one of its {watch.steps:,} steps"
    return (f"became {nonfinite(bad[1])} at step {bad[0]} of {watch.steps:,}: these settings diverge; fix the "
            f"workload (its learning rate, its data), or they train nothing, however fast")


def _skipped(cuda: bool, config: Config) -> dict[str, str]:
    """What does not apply to this loop on this machine, and why."""
    skipped: dict[str, str] = {}
    if not cuda:
        skipped["GPU utilisation, peak GPU memory"] = "no CUDA device here"
        skipped["host-to-device copy alone"] = "no host-to-device copy on a CPU"
        skipped["graph-captured step"] = "CUDA graphs need a CUDA device"
    elif config.placement == "device":
        skipped["host-to-device copy alone"] = "the batches already live on the device (placement=device)"
    if cuda and config.cuda_graph:
        skipped["graph-captured step"] = "the step as configured is already graph-captured"
    return skipped


def _measure_all(
    feeds: _Feeds, skipped: dict[str, str], echo: Callable[[str], None]
) -> tuple[dict[str, Probe], dict[str, str]]:
    """Every feed that applies, in order; one that fails (an OOM, a capture error) leaves the others standing."""
    plan = [name for name in ("loop", "input", "transfer", "compute", "graphed")
            if not (name == "transfer" and "host-to-device copy alone" in skipped)
            and not (name == "graphed" and "graph-captured step" in skipped)]
    probes: dict[str, Probe] = {}
    failed: dict[str, str] = {}
    for i, name in enumerate(plan, 1):
        echo(f"  [{i}/{len(plan)}] {DOING[name]} ...")
        try:
            probes[name] = feeds.run(name)
        except Exception as exc:
            reason = classify_failure(exc)
            if name == "loop":
                raise DiagnoseError(
                    f"the real loop ({feeds.config.describe()}) failed: {reason}; there is nothing to diagnose."
                ) from exc
            failed[name] = reason
            echo(f"        failed: {reason}")
            if feeds.device.type == "cuda":
                torch.cuda.empty_cache()
            continue
        p = probes[name]
        echo(f"        {p.samples_per_s:,.0f} samples/s (±{p.spread:.1%}), {p.seconds:.1f} s")
    return probes, failed


def diagnose(
    recipe: str,
    profile: bool = False,
    device_index: int = 0,
    windows: Windows = WINDOWS,
    echo: Callable[[str], None] = print,
) -> Diagnosis:
    """Health check and bottleneck attribution of one workload's loop on this machine.

    `echo` receives progress lines; the returned `Diagnosis` holds every number, e.g.
    ``diagnose("mnist_cnn").verdict.kind`` is ``'input-bound'`` for the seed's own settings.
    """
    started = time.perf_counter()
    ref = resolve(recipe)
    workload = load(ref)
    machine = detect_machine(device_index)
    device = torch.device("cuda", device_index) if machine.cuda else torch.device("cpu")
    config, lr, source = _settings(recipe, profile, workload, ref.tuned_path, machine.hardware, machine.cuda)
    echo(f"autotune diagnose: {ref.name} on {machine.hardware} ({machine.cpu_share} CPU cores), "
         f"{source}: {config.describe()}")
    runner = Runner(workload, device, cpu_share=machine.cpu_share)
    facts = runner.facts()  # builds the data set
    excluded = build_space(workload.defaults["batch_size"], machine, facts).excluded
    skipped = _skipped(machine.cuda, config)
    feeds = _Feeds(runner, config, lr, device, windows)
    probes, failed = _measure_all(feeds, skipped, echo)
    if machine.cuda and probes["loop"].gpu_util is None:
        skipped["GPU utilisation"] = "NVML is not available (no driver library, or no permission)"

    def speed(name: str) -> float | None:
        return probes[name].samples_per_s if name in probes else None

    def spread(name: str) -> float:
        return probes[name].spread if name in probes else 0.0

    measured = Measured(
        loop=probes["loop"].samples_per_s, input=speed("input"), compute=speed("compute"), transfer=speed("transfer"),
        graphed=speed("graphed"), compute_gpu_util=probes["compute"].gpu_util if "compute" in probes else None,
        cuda=machine.cuda, loop_spread=probes["loop"].spread, input_spread=spread("input"),
        compute_spread=spread("compute"),
    )
    return Diagnosis(
        recipe=ref.name, hardware=machine.hardware, device=str(device), cpu_cores=machine.cpu_share, source=source,
        config=config, lr=lr, probes=probes, skipped=skipped, failed=failed, measured=measured,
        verdict=decide(measured, config, excluded), seconds=time.perf_counter() - started, loss=feeds.loss,
    )


DOING = {
    "loop": "the real loop",
    "input": "the real loader with the model removed, batches copied to the device",
    "transfer": "the host-to-device copy of one loader batch, alone",
    "compute": "the same step on synthetic batches already on the device",
    "graphed": "the same step on the device, captured in a CUDA graph",
}
