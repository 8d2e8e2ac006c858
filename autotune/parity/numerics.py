"""The numerics check's verdict: is amp's gradient error small against the noise SGD already trains through?

``autotune.parity.gradients`` computes, at the weights the baseline reached in a
few steps, each of a few batches' gradient in fp32 and under the candidate's
numerics. ``ratio`` is the candidate's mean squared error against the variance
of one batch's fp32 gradient about their mean: the sampling noise of SGD at the
baseline's batch. Were the error independent noise, a share `ratio` of that
variance would make a step as noisy as the baseline's at 1 / (1 + ratio) of its
batch. Part of amp's error is a bias that averaging over batches does not
remove; the ratio bounds it too, at one point of training. A ratio of at most
LIMIT passes.

It judges, with no training run at all (not the baseline's either), every
config at the baseline's batch whose math differs from the baseline's only in
amp and compile (decode being judged by its images): ``judges``. A training run
of a heavy model costs more than the check's whole share of the search
(docs/parity.md, "amp and compile"). amp changes the rounding, and compile
the kernels and their fusion, not the model: both are judged by their gradients
at the warmed-up weights against the batch-to-batch noise, as amp already was
where a run cannot judge (the baseline learns too little in the check's time:
ResNet-50 on ImageNet-class data). A new batch size is still judged by training
runs. What this cannot see is an error that grows as training moves on (logits
that outgrow what bf16 resolves): it judges one point of training.

LIMIT sits far above what amp's rounding gives on a warmed-up model and far below
what the bugs it is built to catch give (a gradient lost to fp16 underflow without
a GradScaler, features that bf16 rounds away): docs/parity.md, "amp and compile",
has the ratios. A lost gradient is an error of its whole square: at least
(batches - 1) / batches, since the noise is part of it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from autotune.config import Config
from autotune.parity.verdict import SAME_MATH_KNOBS, changes_math

LIMIT = 0.25  # amp's error may add at most this share of the gradient's own sampling variance
# What this check judges, with no training run: amp, and compile (other kernels and fusion, so other rounding, the
# same model); together, one check of both at once.
GRADIENT_JUDGED = frozenset({"amp", "compile"})


@dataclasses.dataclass(frozen=True)
class NumericsVerdict:
    """A config's gradients against the baseline's fp32 ones, with the numbers that decided it."""

    passed: bool
    amp: str
    ratio: float  # error / noise
    error: float  # mean squared norm of the gradient's difference from fp32's, over the batches
    noise: float  # variance of one batch's fp32 gradient about their mean (sum over parameters)
    batches: int
    batch_size: int
    seconds: float
    reason: str | None = None  # why it could not be checked (its run failed), or why it failed

    def summary(self) -> str:
        if self.reason is not None:
            return f"numerics check of {self.amp}: {self.reason}"
        word = "within" if self.passed else "beyond"
        return (
            f"{self.amp}'s gradients are {word} the batch's own noise: their error is {self.ratio:.3g}x the variance "
            f"of fp32's gradient from batch to batch (limit {LIMIT:g}x), {self.batches} batches of {self.batch_size}"
        )


def judge(found: dict[str, Any], amp: str) -> NumericsVerdict:
    """The verdict on ``autotune.parity.gradients.compare``'s numbers."""
    error, noise = found["error"], found["noise"]
    ratio = error / noise if noise > 0 else (0.0 if error == 0 else math.inf)
    numbers = dict(amp=amp, ratio=ratio, error=error, noise=noise, batches=found["batches"],
                   batch_size=found["batch_size"], seconds=found["seconds"])
    if not found["finite"]:
        return NumericsVerdict(False, reason="a gradient is not finite (inf or NaN)", **numbers)
    return NumericsVerdict(ratio <= LIMIT, **numbers)


def label(config: Config) -> str:
    """What a verdict names: the autocast dtype, and the compiler where it compiles ("bf16 with compile=default")."""
    return config.amp if config.compile == "off" else f"{config.amp} with compile={config.compile}"


def failed(reason: str, amp: str) -> NumericsVerdict:
    """The check could not run (a crash, an OOM, a timeout): amp is not shown to keep training as it is."""
    return NumericsVerdict(False, amp, math.nan, math.nan, math.nan, 0, 0, 0.0, reason=f"failed to run: {reason}")


class AmpNumerics:
    """The numerics checks of a search: one per autocast dtype and memory format, made when first needed.

    `check(config)` runs it (in a trial process, in a search); None: no check, amp is not judged without a run.
    ``of`` runs it only where it decides (``judges``): a config that changes amp, compile or both and nothing else of
    the math (decode is judged by its images), its batch size included.
    """

    def __init__(self, baseline: Config, check: Callable[[Config], NumericsVerdict] | None,
                 echo: Callable[[str], None], same_math: tuple[str, ...] = SAME_MATH_KNOBS) -> None:
        self.baseline, self.check, self.echo, self.same_math = baseline, check, echo, same_math
        self.verdicts: dict[tuple[str, bool, str], NumericsVerdict] = {}

    def judges(self, config: Config) -> bool:
        """Whether `config` is judged by this check alone, with no training run: it changes amp or compile (or both)
        and no other math but decode, and there is a check to run."""
        changed = set(changes_math(self.baseline, config, self.same_math)) - {"decode", "decode_share"}
        return self.check is not None and bool(changed) and changed <= GRADIENT_JUDGED

    def of(self, config: Config) -> NumericsVerdict | None:
        """The verdict on `config`'s amp and compile; None when it keeps the baseline's, changes more math than
        them, or there is no check to run (then they cannot be judged without a run)."""
        if self.check is None or not self.judges(config):
            return None
        key = self._key(config)
        if key not in self.verdicts:
            verdict = self.check(config)
            self.verdicts[key] = verdict
            took = f"  [{verdict.seconds:.1f} s]" if verdict.batches else ""
            self.echo(f"  numerics {'pass' if verdict.passed else 'FAIL':<6} {verdict.summary()}{took}")
        return self.verdicts[key]

    def measured(self, config: Config) -> bool:
        """Whether `config`'s numerics were checked already: its verdict costs nothing more."""
        return self._key(config) in self.verdicts

    @staticmethod
    def _key(config: Config) -> tuple[str, bool, str]:
        return config.amp, config.channels_last, config.compile
