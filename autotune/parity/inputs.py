"""The inputs check's verdict: does the device decode path make images from the host pipeline's distribution?

``autotune.parity.images`` draws the same images many times through each
pipeline and reduces each output to block means. For each image and block,
two pipelines from one distribution agree, up to sampling noise, on the mean
over the draws and on their spread. ``distance`` is the average of the squared
standardised differences of both (about 1 for two draws of one pipeline, larger
by what differs). The host pipeline drawn twice gives the noise level this
data set shows; the device path may be at most LIMIT times that (or 1, the
level of normally distributed blocks, whichever is larger).

It tells a wrong flip or a wrong crop scale from the host pipeline, and the
derived device path from a second draw of the host's (docs/parity.md, "The
device decode path", has the distances). Subtler crop errors do not show in
block means; ``tests/loop/test_crops.py`` checks the crop sampler itself against
torchvision's by its draws. Two decoders and two resampling kernels differ by a
pixel level or two, which block means of a few thousand pixels do not show.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from autotune.config import Config

LIMIT = 1.5  # the device path may be this many times as far from the host as the host is from itself
FLOOR_SHARE = 0.01  # a block's spread is floored at this share of the average spread: a flat block is not exact


def distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """How far apart two sets of draws are: images x draws x features each, the same images in the same order.

    Per image and feature, the squared difference of the means in units of their standard error, and the squared
    difference of the log variances in units of theirs (normal data: 4 / (draws - 1) for the two), averaged.
    """
    if a.shape != b.shape or a.dim() != 3 or a.shape[1] < 3:
        raise ValueError(f"two images x draws x features tensors of one shape with 3 or more draws are needed, "
                         f"but got {tuple(a.shape)} and {tuple(b.shape)}")
    draws = a.shape[1]
    var_a, var_b = a.var(dim=1), b.var(dim=1)
    floor = FLOOR_SHARE * float(torch.cat([var_a, var_b]).mean())
    var_a, var_b = var_a.clamp_min(floor), var_b.clamp_min(floor)
    means = (a.mean(dim=1) - b.mean(dim=1)) ** 2 / ((var_a + var_b) / draws)
    spreads = (var_a.log() - var_b.log()) ** 2 / (4 / (draws - 1))
    return float(((means + spreads) / 2).mean())


@dataclasses.dataclass(frozen=True)
class InputsVerdict:
    """The device path's images against the host pipeline's, with the numbers that decided it."""

    passed: bool
    host_to_host: float  # the host pipeline drawn twice
    host_to_device: float
    images: int
    draws: int
    seconds: float
    reason: str | None = None  # why it could not be checked (the check's run failed)

    def summary(self) -> str:
        if self.reason is not None:
            return f"inputs check failed to run: {self.reason}"
        word = "match" if self.passed else "do not match"
        return (
            f"the device path's images {word} the host pipeline's in distribution: {self.host_to_device:.2f} apart "
            f"against {self.host_to_host:.2f} between two host draws (limit {LIMIT:g}x), {self.images} images x "
            f"{self.draws} draws"
        )


def judge(found: dict[str, Any]) -> InputsVerdict:
    """The verdict on ``autotune.parity.images.compare``'s distances."""
    allowed = LIMIT * max(1.0, found["host_to_host"])
    return InputsVerdict(
        found["host_to_device"] <= allowed,
        found["host_to_host"],
        found["host_to_device"],
        found["images"],
        found["draws"],
        found["seconds"],
    )


def failed(reason: str) -> InputsVerdict:
    """The check could not run (a crash, an OOM, a timeout): the device path is not shown to be right."""
    return InputsVerdict(False, float("nan"), float("nan"), 0, 0, 0.0, reason=reason)


class DecodeInputs:
    """The inputs check of a search, made once: every `decode = gpu` config shares the one device path.

    `check(config)` runs it (in a trial process, in a search) for a config that decodes otherwise than `baseline`.
    """

    def __init__(self, baseline: Config, check: Callable[[Config], InputsVerdict] | None,
                 echo: Callable[[str], None]) -> None:
        self.baseline, self.check, self.echo = baseline, check, echo
        self.verdict: InputsVerdict | None = None

    def of(self, config: Config) -> InputsVerdict | None:
        """The verdict on `config`'s decode path; None when it decodes as the baseline does."""
        if config.decode == self.baseline.decode:
            return None
        if self.verdict is None:
            self.verdict = self.check(config) if self.check is not None else failed("no inputs check in this search")
            took = f"  [{self.verdict.seconds:.1f} s]" if self.verdict.reason is None else ""
            self.echo(f"  inputs {'pass' if self.verdict.passed else 'FAIL':<6} {self.verdict.summary()}{took}")
        return self.verdict
