"""The learning rates a CUDA graph captured as numbers: when to capture it again, and when to give it up.

An optimizer other than Adam and AdamW (SGD, RMSprop, ...) reads ``param_groups[i]["lr"]`` as a Python
number inside ``step()``, so a graph that captured its update replays the rate it had then, and a
scheduler's later change reaches nothing (``autotune.loop.lr`` gives Adam and AdamW a device tensor
instead). So before each captured update the step compares the rates with those its graph captured,
and captures again where they differ: a per-epoch schedule costs one capture an epoch. A per-step
schedule would cost a capture a step, more than the eager steps it saves, so past ``RECAPTURE_LIMIT``
changes the step gives its graph up and runs eagerly (``autotune.loop.graph`` says so with warnings).
"""

from __future__ import annotations

import torch

from autotune.loop.lr import TENSOR_LR_UNDER_GRAPH, group_lrs

# Captures again after the learning rate of an optimizer that reads it as a number changed: a per-epoch schedule
# stays under the graph, a per-step one (a capture per step costs more than eager steps) runs eagerly after these.
RECAPTURE_LIMIT = 16


class CapturedRates:
    """The learning rates a graph baked in as numbers, and how often they changed since.

    For example::

        >>> optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
        >>> rates = CapturedRates(optimizer)
        >>> rates.captured(as_numbers=True)  # after each capture
        >>> rates.changed() is None  # before each captured update: None while the rates stand
        True
        >>> optimizer.param_groups[0]["lr"] = 0.05  # a scheduler's step
        >>> rates.changed(), rates.recaptures, rates.exhausted  # capture again, until exhausted
        ([0.05], 1, False)
    """

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        # None: the graph reads no rate as a number (device tensors, or fp16's update outside the graph)
        self.lrs: list[float] | None = None
        self.recaptures = 0  # changes seen, each captured again until the limit

    def captured(self, as_numbers: bool) -> None:
        """After a capture: keep the rates it baked in, where the optimizer reads them as numbers inside the graph."""
        self.lrs = group_lrs(self.optimizer) if as_numbers else None

    def changed(self) -> list[float] | None:
        """The rates now, where they differ from those captured (the change is counted); None where they stand."""
        if self.lrs is None:
            return None
        now = group_lrs(self.optimizer)
        if now == self.lrs:
            return None
        self.recaptures += 1
        return now

    @property
    def exhausted(self) -> bool:
        """Whether the rates changed more often than a graph is worth capturing again (a per-step schedule)."""
        return self.recaptures > RECAPTURE_LIMIT

    def why_again(self, now: list[float], capture_s: float) -> str:
        """What a ``RecaptureWarning`` says at the first change: what it costs, and what needs none."""
        return (
            f"{type(self.optimizer).__name__} reads its learning rate as a number inside a CUDA graph; it changed "
            f"from {self.lrs} to {now}, so the step captures its graph again (each change costs one capture, "
            f"{capture_s:.3f} s the first time; after {RECAPTURE_LIMIT} changes the step runs eagerly; "
            f"{', '.join(TENSOR_LR_UNDER_GRAPH)} read the rate from the device and need none)"
        )

    def why_eager(self) -> str:
        """Why the step gave its graph up once exhausted: its ``graph_reason``."""
        return (
            f"{type(self.optimizer).__name__} reads its learning rate as a number inside a CUDA graph, and it changed "
            f"more than {RECAPTURE_LIMIT} times (each change costs a capture); {', '.join(TENSOR_LR_UNDER_GRAPH)} "
            "read it from the device and keep the graph under any schedule"
        )
