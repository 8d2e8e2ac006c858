"""What `autotune diagnose` prints: the diagnosis as tables a person reads at a glance."""

from __future__ import annotations

from autotune.diagnosis.run import DOING, Diagnosis
from autotune.text import mib, percent, rate, table
from autotune.trial.probe import LOW_UTIL_PERCENT


def _cores(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def render(d: Diagnosis) -> str:
    """The diagnosis as tables a person reads at a glance."""
    loop = d.probes["loop"]
    workers = d.config.num_workers if d.config.placement == "stream" else 0
    lines = [f"{d.recipe} on {d.hardware} ({d.cpu_cores} CPU cores), {d.source}: {d.config.describe()}", ""]
    lines.append("stage 1, health: the real loop")
    start_up = (
        "epochs timed whole, each start included: too short for steady windows beside the prefetched batches"
        if loop.whole_epochs
        else f"a fresh epoch costs {loop.epoch_overhead_s:.2f} s more"
    )
    health = [
        ("samples/s, steady", f"{rate(loop.samples_per_s)} (±{loop.spread:.1%})"),
        ("samples/s, end to end", f"{rate(loop.end_to_end)} ({start_up})"),
    ]
    if loop.gpu_util is not None:
        health.append(
            (
                "GPU utilisation",
                f"mean {loop.gpu_util:.0f}%; {percent(loop.gpu_util_low)} of samples under {LOW_UTIL_PERCENT}%",
            )
        )
    if loop.peak_memory_bytes is not None:
        health.append(("peak GPU memory", f"{mib(loop.peak_memory_bytes)} allocated by tensors"))
    health.append(("CPU, main process", f"{_cores(loop.main_cpu)} cores"))
    if not workers:
        health.append(("CPU, loader workers", "none (num_workers=0: the main process loads)"))
    elif loop.worker_cpu is None:
        health.append(("CPU, loader workers", "not measured (live workers are visible in Linux's /proc only)"))
    else:
        health.append(("CPU, loader workers", f"{_cores(loop.worker_cpu)} cores over {workers} workers"))
    if d.loss:
        health.append(("loss", d.loss))
    width = max(len(k) for k, _ in health)
    lines += [f"  {k.ljust(width)}  {v}" for k, v in health]

    lines += ["", "stage 2, attribution: the same step fed three ways"]
    rows = []
    for name in ("loop", "input", "transfer", "compute", "graphed"):
        p = d.probes.get(name)
        if p is None:
            continue
        util = "-" if p.gpu_util is None else f"{p.gpu_util:.0f}%"
        rows.append(
            [
                p.label,
                rate(p.samples_per_s),
                f"{p.samples_per_s / loop.samples_per_s:.2f}x",
                util,
                _cores(p.main_cpu),
                _cores(p.worker_cpu),
            ]
        )
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
        lines += ["", "failed:"] + [f"  {DOING[what]}: {why}" for what, why in d.failed.items()]
    lines += ["", f"diagnosed in {d.seconds:.0f} s"]
    return "\n".join(lines)
