"""One value for every knob, and the learning-rate rule that follows batch size."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from autotune.workloads import Workload

AMP_CHOICES = ("off", "bf16", "fp16")
PLACEMENT_CHOICES = ("stream", "device")
LR_RULES = ("linear", "sqrt", "none")


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
            if self.pin_memory:
                parts.append("pinned")
            if self.persistent_workers:
                parts.append("persistent")
            if self.prefetch_factor is not None:
                parts.append(f"prefetch={self.prefetch_factor}")
        for flag, label in (
            (self.cudnn_benchmark, "cudnn.benchmark"),
            (self.channels_last, "channels_last"),
            (self.cuda_graph, "graph"),
        ):
            if flag:
                parts.append(label)
        if self.amp != "off":
            parts.append(self.amp)
        return " ".join(parts)


def baseline_config(workload: Workload, cuda: bool) -> Config:
    """The workload's own, untuned settings, expressed as knobs."""
    workers = workload.default("num_workers")
    return Config(
        batch_size=workload.defaults["batch_size"],
        num_workers=workers,
        pin_memory=bool(workload.default("pin_memory")) and cuda,
        persistent_workers=bool(workload.default("persistent_workers")) and workers > 0,
        prefetch_factor=workload.defaults.get("prefetch_factor") if workers > 0 else None,
    )


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
