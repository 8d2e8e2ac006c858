"""What holds a training loop back, decided from measured ceilings: a pure function of numbers.

Bottleneck attribution, as arithmetic. The same step is fed three ways:
(a) synthetic batches already on the device, the compute ceiling; (b) the real
loader with the model removed, batches copied to the device, the input ceiling;
(c) the real loop. Whichever ceiling needs more time per sample sets the pace.
On the input side, the host-to-device copy alone tells transfer from loading;
on the step side, a graph-captured step (or the GPU's utilisation on
device-resident batches) tells launching kernels from running them.

    >>> decide(Measured(loop=14e3, input=17e3, compute=81e3, graphed=530e3), Config(batch_size=128)).kind
    'input-bound'
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from autotune.config import Config
from autotune.text import rate

KINDS = ("input-bound", "transfer-bound", "launch-bound", "compute-bound", "inconsistent", "undetermined")
TITLES = {
    "input-bound": "input-bound: the loader cannot feed the step",
    "transfer-bound": "transfer-bound: copying batches to the device sets the pace",
    "launch-bound": "host-overhead or launch-bound: the host cannot issue the step's kernels fast enough",
    "compute-bound": "compute-bound: the step's own work sets the pace",
    "inconsistent": "no verdict: the feeds contradict each other",
    "undetermined": "undetermined",
}
TRANSFER_SHARE = 0.5  # the copy alone takes at least this share of the input side's time per sample
GRAPH_GAIN = 1.5  # a captured step this much faster than eager: launches, not kernels, set the pace
LOW_UTIL = 50.0  # % busy on device-resident batches below which the GPU is starved by its own host
SERIAL_MATCH = 0.25  # a serial prediction within this fraction of the loop is quoted as the explanation
CONSISTENCY_TOLERANCE = 0.05  # beyond the feeds' own noise, a loop may appear this much faster than a ceiling

# The knobs that address each verdict, in the order worth trying.
KNOBS_FOR: dict[str, tuple[str, ...]] = {
    "input-bound": ("num_workers", "persistent_workers", "prefetch_factor", "placement", "batch_size"),
    "transfer-bound": ("pin_memory", "placement", "batch_size"),
    "launch-bound": ("cuda_graph", "batch_size"),
    "compute-bound": ("amp", "channels_last", "cudnn_benchmark", "batch_size"),
    "inconsistent": (),
    "undetermined": (),
}
# The value of a knob that already does what the advice asks; such a knob is not advised again.
_ALREADY = {
    "pin_memory": True,
    "persistent_workers": True,
    "cuda_graph": True,
    "channels_last": True,
    "cudnn_benchmark": True,
    "placement": "device",
}


@dataclasses.dataclass(frozen=True)
class Measured:
    """The numbers a verdict is decided from; rates in samples/s, None where not measured."""

    loop: float  # (c) the real loop
    input: float | None  # (b) the real loader, batches copied to the device, no model
    compute: float | None  # (a) the same step on synthetic batches already on the device
    transfer: float | None = None  # the host-to-device copy of a loader batch, alone (CUDA, streamed data)
    graphed: float | None = None  # (a) with the whole step captured in a CUDA graph (CUDA)
    compute_gpu_util: float | None = None  # mean GPU utilisation, %, during (a)
    cuda: bool = True
    # Each feed's noise: interquartile range of its windows over their median (0 when not known).
    loop_spread: float = 0.0
    input_spread: float = 0.0
    compute_spread: float = 0.0


@dataclasses.dataclass(frozen=True)
class Bottleneck:
    kind: str  # one of KINDS
    title: str
    reason: str  # one sentence with the deciding numbers
    evidence: tuple[str, ...]  # further numbers behind it
    knobs: tuple[str, ...]  # knobs that address it, with their values now
    next: str | None  # what limits the loop once this is fixed

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _knob_advice(kind: str, config: Config, excluded: Mapping[str, str]) -> tuple[str, ...]:
    advice = []
    for knob in KNOBS_FOR[kind]:
        if knob in excluded:
            continue
        value = getattr(config, knob)
        if knob in _ALREADY and value == _ALREADY[knob]:
            continue
        if knob == "amp" and value != "off":
            continue
        if config.placement == "device" and knob in (
            "num_workers",
            "persistent_workers",
            "prefetch_factor",
            "pin_memory",
        ):
            continue  # a device-resident loader has no workers and no copies
        if knob in ("persistent_workers", "prefetch_factor") and config.num_workers == 0:
            advice.append(f"{knob} (with num_workers > 0)")
            continue
        if knob == "placement":
            advice.append(f"placement=device (now {value})")
            continue
        advice.append(f"{knob} (now {_show(value)})")
    return tuple(advice)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return "default" if value is None else str(value)


def _gain(m: Measured, config: Config) -> float | None:
    """How much faster the captured step runs than the step as configured; None when not comparable."""
    if m.graphed is None or m.compute is None or config.cuda_graph:
        return None
    return m.graphed / m.compute


def _noise(*spreads: float) -> float:
    """The noise of a ratio of two measurements: their spreads are independent, so they add in quadrature.

    Adding them outright let a loop at 119% of its loader (±10%, ±5%) pass as noise and become a verdict.
    """
    return math.sqrt(sum(x * x for x in spreads))


def inconsistency(m: Measured) -> str | None:
    """Why the feeds contradict each other, or None. The real loop (c) cannot run faster than either ceiling.

    A loop fed by a loader cannot outrun the loader alone (b), nor the step on batches already on the device
    (a). Stated faster beyond the noise of both numbers, one of them was measured wrong (a prefetched backlog
    timed as if it were steady state is the usual cause), and no verdict can be drawn from them.
    """
    for name, ceiling, spread in (("the input ceiling (b)", m.input, m.input_spread),
                                  ("the compute ceiling (a)", m.compute, m.compute_spread)):
        if ceiling is not None and m.loop > ceiling * (1 + _noise(spread, m.loop_spread) + CONSISTENCY_TOLERANCE):
            return (f"the real loop (c) runs {rate(m.loop)} samples/s, {m.loop / ceiling:.0%} of {name} "
                    f"({rate(ceiling)}), beyond their noise (±{m.loop_spread:.0%}, ±{spread:.0%}); "
                    f"a loop cannot outrun its own ceiling, so one of these numbers is wrong")
    return None


def decide(m: Measured, config: Config, excluded: Mapping[str, str] | None = None) -> Bottleneck:
    """The verdict, the numbers that decide it, the knobs that address it, and what comes next.

    `config` is the loop that was measured (its knob values are quoted in the
    advice); `excluded` maps knobs that cannot apply here to why (the search
    space's exclusions), so they are not advised.
    """
    if m.input is None or m.compute is None:
        missing = " and ".join(name for name, v in (("the input ceiling (b)", m.input),
                                                    ("the compute ceiling (a)", m.compute)) if v is None)
        reason = f"{missing} could not be measured; see the failures above."
        return Bottleneck("undetermined", TITLES["undetermined"], reason, (), (), None)
    contradiction = inconsistency(m)
    if contradiction is not None:
        return Bottleneck("inconsistent", TITLES["inconsistent"], contradiction, (), (), None)
    evidence = [_explain_loop(m, config)]
    if 1.0 / m.input >= 1.0 / m.compute:
        kind, reason, nxt = _input_side(m, config, evidence)
    else:
        kind, reason, nxt = _step_side(m, config, evidence)
    return Bottleneck(kind, TITLES[kind], reason, tuple(evidence), _knob_advice(kind, config, excluded or {}), nxt)


def _explain_loop(m: Measured, config: Config) -> str:
    """How the loop relates to its ceilings: the serial sum when it loads in its own process, else the share."""
    assert m.input is not None and m.compute is not None
    lower = min(m.input, m.compute)
    share = f"the real loop runs {rate(m.loop)} samples/s, {m.loop / lower:.0%} of the lower ceiling ({rate(lower)})"
    if m.loop > lower:  # within the noise (else no verdict at all), but never stated as if it were fine
        spread = m.input_spread if lower == m.input else m.compute_spread
        return (f"{share}: above the ceiling that bounds it, within the feeds' noise (±{m.loop_spread:.0%}, "
                f"±{spread:.0%}), so that ceiling is at least the loop's")
    serial = 1.0 / (1.0 / m.input + 1.0 / m.compute)
    if config.placement == "stream" and config.num_workers == 0 and abs(serial / m.loop - 1) <= SERIAL_MATCH:
        return (f"num_workers=0: loading and stepping take turns in the main process; "
                f"1/(1/{rate(m.input)} + 1/{rate(m.compute)}) = {rate(serial)} samples/s predicts the loop's "
                f"{rate(m.loop)}")
    return share


def _input_side(m: Measured, config: Config, evidence: list[str]) -> tuple[str, str, str]:
    """The loader is the lower ceiling: loading or copying, and what the step allows past it."""
    assert m.input is not None and m.compute is not None
    gain = _gain(m, config)
    transfer_share = (1.0 / m.transfer) * m.input if m.transfer else None
    if transfer_share is not None:
        evidence.append(f"the host-to-device copy alone runs {rate(m.transfer)} samples/s: "
                        f"{transfer_share:.0%} of the input side's time per sample")
    if transfer_share is not None and transfer_share >= TRANSFER_SHARE:
        kind = "transfer-bound"
        reason = (f"the loader with its copies feeds {rate(m.input)} samples/s and the copy alone takes "
                  f"{transfer_share:.0%} of that time, while the step could take {rate(m.compute)}")
    else:
        kind = "input-bound"
        reason = (f"the loader feeds {rate(m.input)} samples/s, while the step could take {rate(m.compute)} "
                  f"({m.compute / m.input:.1f}x more)")
    if gain is not None:
        evidence.append(f"the graph-captured step on device-resident batches runs {rate(m.graphed)} samples/s, "
                        f"{gain:.1f}x the eager step")
    if gain is not None and gain >= GRAPH_GAIN:
        nxt = (f"past the loader, the eager step on device-resident batches tops out at {rate(m.compute)} "
               f"samples/s and is itself launch-bound: graph-captured it reaches {rate(m.graphed)} ({gain:.1f}x), "
               f"so placement=device with cuda_graph lifts both ceilings")
    else:
        nxt = (f"past the loader, the step tops out at {rate(m.compute)} samples/s "
               f"({m.compute / m.loop:.1f}x today's loop)")
    return kind, reason, nxt


def _step_side(m: Measured, config: Config, evidence: list[str]) -> tuple[str, str, str]:
    """The step is the lower ceiling: launching kernels or running them, and the loader behind it."""
    assert m.input is not None and m.compute is not None
    gain = _gain(m, config)
    if m.compute_gpu_util is not None:
        evidence.append(f"on device-resident batches the GPU is busy {m.compute_gpu_util:.0f}% of the time")
    if gain is not None:
        evidence.append(f"the graph-captured step runs {rate(m.graphed)} samples/s, {gain:.1f}x the eager step")
    below = f"the step on device-resident batches runs {rate(m.compute)} samples/s, below the loader's {rate(m.input)}"
    if m.cuda and gain is not None and gain >= GRAPH_GAIN:
        kind = "launch-bound"
        reason = (f"{below}, and captured in a CUDA graph it runs {rate(m.graphed)} ({gain:.1f}x): "
                  f"launching kernels, not running them, sets the pace")
    elif m.cuda and m.compute_gpu_util is not None and m.compute_gpu_util < LOW_UTIL:
        kind = "launch-bound"
        reason = (f"{below}, yet the GPU is busy only {m.compute_gpu_util:.0f}% of that time: "
                  f"the host cannot issue work fast enough")
    else:
        kind = "compute-bound"
        reason = f"{below} ({m.input / m.compute:.1f}x more)"
    if kind == "launch-bound" and m.graphed is not None and gain is not None:
        then = "is then the ceiling" if m.input < m.graphed else "stays above it"
        nxt = f"captured in a graph the step runs {rate(m.graphed)} samples/s; the loader's {rate(m.input)} {then}"
    else:
        nxt = f"the loader's {rate(m.input)} samples/s is the next ceiling ({m.input / m.compute:.1f}x the step)"
    return kind, reason, nxt
