"""A loss that became NaN or inf, named where it happened: the step, and the config that trained it.

A config whose training diverges (a batch size whose scaled learning rate is too high, fp16 that overflows) runs
as fast as one that trains, and once its loss is NaN every later step is too: timed alone, it would look like a
result. The step's loss is a device tensor, and reading it at every step would synchronise the host with the
device inside the timed loop (docs/measuring.md). So each step's loss is kept, unread, and all of them are read
at once where the loop synchronises anyway: at a timing window's edge, and when the measurement ends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from autotune.errors import AutotuneError
from autotune.text import nonfinite


class NonFiniteLoss(AutotuneError, RuntimeError):
    """A training loss that became NaN or inf; the message names the step and the config."""


class LossWatch:
    """``loss = watch(batch)``: `step`'s own call, its loss kept unread; ``check()`` reads the kept ones at once.

    `what` names the config in the message (``Config.describe``). Steps count from 1, warm-up included.
    """

    def __init__(self, step: Callable[..., Any], what: str) -> None:
        self.step, self.what = step, what
        self.steps = 0  # steps taken so far
        self._kept: list[torch.Tensor] = []  # the losses since the last check, in order, still on the device
        self.first_bad: tuple[int, float] | None = None  # (step, loss) of the first non-finite loss seen

    def __call__(self, *batch: Any) -> Any:
        loss = self.step(*batch)
        self.steps += 1
        if isinstance(loss, torch.Tensor):
            self._kept.append(loss.detach().reshape(-1)[:1])  # no read: the device may still be computing it
        return loss

    def read(self) -> tuple[int, float] | None:
        """Read the losses kept since the last read (one host sync); the first non-finite one seen so far, if any."""
        if self._kept and self.first_bad is None:
            first = self.steps - len(self._kept) + 1
            values = torch.cat([t.float() for t in self._kept])
            bad = (~torch.isfinite(values)).nonzero()
            if len(bad):
                i = int(bad[0, 0])
                self.first_bad = (first + i, float(values[i]))
        self._kept = []
        return self.first_bad

    def check(self) -> None:
        """Raise ``NonFiniteLoss`` once a loss kept so far is NaN or inf."""
        bad = self.read()
        if bad is not None:
            raise NonFiniteLoss(f"the loss became {nonfinite(bad[1])} at step {bad[0]} ({self.what})")
