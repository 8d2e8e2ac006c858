"""One value for every knob, and the learning-rate rule that follows batch size."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

AMP_CHOICES = ("off", "bf16", "fp16")
PLACEMENT_CHOICES = ("stream", "device")
# torch.compile's modes, as a knob (autotune.loop.compiled says why these and how they combine with cuda_graph).
COMPILE_CHOICES = ("off", "default", "max-autotune-no-cudagraphs")
# Seconds a trial's time limit (and its give-up time) grows by while its step compiles: the compile is a one-time
# cost of the declared run, and a trial compiling sends no window to judge it by. Cold compiles with room for a busier
# host; max-autotune benchmarks kernel choices for every matmul and convolution (docs/compile.md, "Its costs").
# A warm cache (autotune.procs.compile_cache) makes either a fraction of this. Where a compile of the model took
# longer than the best config's whole run, no compiled config is measured at all (autotune.study.planning.compile_cost).
COMPILE_ALLOWANCE_S = {"off": 0.0, "default": 120.0, "max-autotune-no-cudagraphs": 600.0}
DECODE_CHOICES = ("cpu", "gpu")  # gpu: workers read JPEG bytes, the device decodes and augments (loop.device_decode)
# With decode = gpu, the share of each batch's samples the device decodes; the workers decode the rest through the
# host pipeline (loop.hybrid_decode), so both the cores and the device make images where neither alone keeps up with
# the step. Down to an eighth, where a compiled step leaves the device little room (autotune.study.planning.balance;
# docs/workloads.md, "A share of each").
DECODE_SHARES = (1.0, 0.75, 0.5, 0.25, 0.125)
# The loader's knobs: they change how fast batches come, not which samples, their values or their order.
# device_normalize moves ToTensor and Normalize from the workers to the device, with the same arithmetic.
LOADER_KNOBS = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor", "device_normalize")
# Token positions a padded batch is rounded up to (0: the batch's longest sequence, as the collate_fn pads it).
# 8 keeps a matrix dimension a multiple of what fp16/bf16 tensor cores take whole; 64 leaves at most 8 lengths
# for sequences of 16..512 tokens, so per-shape costs (an attention plan, a kernel choice) are paid 8 times, not 497.
PAD_MULTIPLES = (0, 8, 64)
LR_RULES = ("linear", "sqrt", "none")  # from the boldest to the gentlest for a larger batch
# Optimizers that divide each parameter's step by a running estimate of its gradients' scale: a batch k times
# larger cuts the gradient noise by sqrt(k), and their rate follows sqrt(k) (Malladi et al., NeurIPS'22).
ADAPTIVE_OPTIMIZERS = (
    "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "SparseAdam", "Adadelta", "Adagrad", "RMSprop", "Adafactor", "LAMB",
)
SGD_OPTIMIZERS = ("SGD", "ASGD", "LARS")  # the step is the gradient times the rate: linear (Goyal et al.)


@dataclasses.dataclass(frozen=True)
class Config:
    """A full assignment of the knobs; what a trial measures and a profile records."""

    batch_size: int
    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None  # None: DataLoader's own (2), and required when num_workers == 0
    cudnn_benchmark: bool = False
    channels_last: bool = False
    amp: str = "off"
    cuda_graph: bool = False
    placement: str = "stream"
    decode: str = "cpu"
    decode_share: float = 1.0  # decode = gpu: the share of each batch decoded on the device (DECODE_SHARES)
    # The workers hand over uint8 images; the device runs the pipeline's ToTensor and Normalize (loop.device_normalize)
    device_normalize: bool = False
    pad_multiple: int = 0  # 0: off; N: the collate_fn pads each batch to a multiple of N (pad_to_multiple_of)
    bucketing: bool = False  # batches of samples of similar length (loop.buckets), from the workload's sample_lengths
    compile: str = "off"  # torch.compile of the step's loss (loop.compiled); one of COMPILE_CHOICES

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "Config":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown knob(s) {sorted(unknown)}; known knobs: {sorted(known)}")
        return cls(**values)

    def describe(self) -> str:
        """A short one-line summary that names only what differs from DataLoader's defaults."""
        parts = [f"bs={self.batch_size}"]
        if self.placement == "device":
            parts.append("device-resident")
        else:
            parts.append(f"workers={self.num_workers}")
            if self.decode == "gpu":
                parts.append("gpu-decode" if self.decode_share == 1 else f"gpu-decode {self.decode_share * 100:g}%")
            if self.device_normalize:
                parts.append("device-normalize")
            if self.pin_memory:
                parts.append("pinned")
            if self.persistent_workers:
                parts.append("persistent")
            if self.prefetch_factor is not None:
                parts.append(f"prefetch={self.prefetch_factor}")
            if self.bucketing:
                parts.append("bucketed")
            if self.pad_multiple:
                parts.append(f"pad={self.pad_multiple}")
        for flag, label in (
            (self.cudnn_benchmark, "cudnn.benchmark"),
            (self.channels_last, "channels_last"),
            (self.cuda_graph, "graph"),
        ):
            if flag:
                parts.append(label)
        if self.amp != "off":
            parts.append(self.amp)
        if self.compile != "off":
            parts.append(f"compile={self.compile}")
        return " ".join(parts)


@dataclasses.dataclass(frozen=True)
class LrRule:
    """The rule a search scales the learning rate by, and why it is that one."""

    name: str  # one of LR_RULES
    why: str

    def gentler(self) -> tuple[str, ...]:
        """The rules to try, in order, when a batch size fails the parity check at this rule's rate.

        >>> LrRule("linear", "").gentler()
        ('sqrt', 'none')
        """
        return LR_RULES[LR_RULES.index(self.name) + 1 :]

    def bolder(self) -> tuple[str, ...]:
        """The rules to try, nearest first, when the gentler ones trained further from the baseline than this one.

        >>> LrRule("none", "").bolder()
        ('sqrt', 'linear')
        """
        return tuple(reversed(LR_RULES[: LR_RULES.index(self.name)]))


def lr_rule_for(optimizer: Any, override: str | None = None) -> LrRule:
    """The learning-rate rule for `optimizer` (an instance or class): linear for SGD, sqrt for adaptive ones.

    `override` (``--lr-scaling``) wins. An optimizer of neither known family counts as
    adaptive when it has an ``eps`` (it divides its step by a gradient scale), else as SGD.

    >>> import torch
    >>> lr_rule_for(torch.optim.AdamW).name
    'sqrt'
    """
    if override is not None:
        if override not in LR_RULES:
            raise ValueError(f"`override` must be one of {LR_RULES} or None, but got {override!r}.")
        return LrRule(override, f"--lr-scaling {override}")
    cls = optimizer if isinstance(optimizer, type) else type(optimizer)
    for base in cls.__mro__:  # a subclass of AdamW is scaled as AdamW is
        name = cls.__name__ if base is cls else f"{cls.__name__} (an {base.__name__})"
        if base.__name__ in ADAPTIVE_OPTIMIZERS:
            return LrRule("sqrt", f"{name} is an adaptive optimizer: sqrt rule (Malladi et al., NeurIPS'22)")
        if base.__name__ in SGD_OPTIMIZERS:
            return LrRule("linear", f"{name} is an SGD-family optimizer: linear rule (Goyal et al., 2017)")
    defaults = getattr(optimizer, "defaults", None)
    if isinstance(defaults, dict) and "eps" in defaults:
        return LrRule("sqrt", f"{cls.__name__} is not a known optimizer, but has eps, so it adapts its step: sqrt rule")
    return LrRule("linear", f"{cls.__name__} is not a known optimizer and has no eps: linear rule, as for SGD")


def scaled_lr(base_lr: float, base_batch: int, batch_size: int, rule: str, lr_max: float | None) -> float:
    """The learning rate for a new batch size: linear (Goyal et al.), sqrt, or none; capped at lr_max.

    >>> scaled_lr(0.01, 128, 1024, "linear", None)
    0.08
    """
    if rule not in LR_RULES:
        raise ValueError(f"`rule` must be one of {LR_RULES}, but got {rule!r}.")
    ratio = batch_size / base_batch
    factor = {"linear": ratio, "sqrt": math.sqrt(ratio), "none": 1.0}[rule]
    lr = base_lr * factor
    if lr_max is not None and lr > lr_max and lr > base_lr:
        lr = max(base_lr, lr_max)
    return round(lr, 12)
