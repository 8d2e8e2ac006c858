"""What a parity run learned, measured three ways, each with its noise: whether a slow learner learned clearly enough.

A baseline on a plateau learns a small share of its initial loss in a run the search can pay for, under the share
that always suffices (``autotune.parity.verdict.MIN_PROGRESS``). What it learned may still stand far above the noise
of its measures, and then deviations from it mean something: a candidate that learns too little stays far off in
units of what the baseline learned (docs/parity.md, "A slow learner", has the measurements). Each of the three
measures ``autotune.parity.verdict.progress`` takes the least of is judged against its own noise:

- the training loss over the compared window, below the untrained probe loss: noise from the loss's variation from
  batch to batch (successive steps' differences, so a falling loss does not count as noise) over the window's steps,
  and the probe's own from batch to batch;
- the probe loss after the run, below the untrained one: the same probe batches before and after, paired;
- the probe loss with the targets shuffled, above the plain one: the same batches, paired.

A run made without the probe's batch-by-batch losses (one from an older autotune, or made up by a test) has no
noise to judge by: only the fixed share decides.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from autotune.parity.run import ParityRun

SIGNAL_Z = 5.0  # every measure of what the baseline learned stands at least this many standard errors above zero
MIN_SIGNAL = 0.0025  # and the least of them is at least this share of the initial loss: a unit to judge by
MIN_STEPS = 8  # steps a run needs for its batch-to-batch noise to be estimated


@dataclasses.dataclass(frozen=True)
class Measure:
    """One way of reading what a run learned: the drop in loss (nats), and its standard error (None: unknown)."""

    name: str
    drop: float
    error: float | None

    @property
    def z(self) -> float | None:
        """The drop in units of its standard error."""
        if self.error is None:
            return None
        return math.inf if self.error == 0 else self.drop / self.error


def standard_error(values: Sequence[float]) -> float | None:
    """The standard error of the mean of `values`; None for fewer than two.

    >>> standard_error([1.0, 3.0])
    1.0
    """
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values))


def step_noise(losses: Sequence[float]) -> float | None:
    """One step's loss's standard deviation from batch to batch, from successive differences (a trend cancels);
    None for fewer than MIN_STEPS steps or a non-finite loss."""
    if len(losses) < MIN_STEPS or not all(math.isfinite(x) for x in losses):
        return None
    diffs = [b - a for a, b in zip(losses, losses[1:])]
    return math.sqrt(sum(d * d for d in diffs) / len(diffs) / 2)


def paired(before: Sequence[float] | None, after: Sequence[float] | None) -> float | None:
    """The standard error of the mean change from `before` to `after`, batch by batch; None without both."""
    if not before or not after or len(before) != len(after):
        return None
    return standard_error([a - b for a, b in zip(before, after)])


def measures(run: ParityRun, samples: int, window: int) -> list[Measure]:
    """What `run` learned by its window, by its probe and, for (input, target) samples, by its targets."""
    window_loss = run.window_loss(samples - window, samples)
    steps = [loss for end, loss in zip(run.ends, run.losses) if end > samples - window]
    sd, initial = step_noise(run.losses), standard_error(run.initial_parts or ())
    window_error = None if sd is None or initial is None else math.sqrt(initial ** 2 + sd ** 2 / max(1, len(steps)))
    made = [Measure("window", run.initial_loss - window_loss, window_error),
            Measure("probe", run.initial_loss - run.final_loss, paired(run.initial_parts, run.final_parts))]
    if run.shuffled_loss is not None and math.isfinite(run.shuffled_loss):
        made.append(Measure("targets", run.shuffled_loss - run.final_loss,
                            paired(run.final_parts, run.shuffled_parts)))
    return made


def clear(run: ParityRun, samples: int, window: int) -> float | None:
    """How clearly `run` learned: the least of its measures' drops over their standard errors; None where the noise
    of one is unknown."""
    zs = [m.z for m in measures(run, samples, window)]
    return None if any(z is None for z in zs) else min(z for z in zs if z is not None)


def learned_clearly(run: ParityRun, samples: int, window: int) -> bool:
    """Every measure of what `run` learned stands SIGNAL_Z standard errors above zero, and the least of them is at
    least MIN_SIGNAL of the initial loss."""
    z = clear(run, samples, window)
    least = min(m.drop for m in measures(run, samples, window))
    return z is not None and z >= SIGNAL_Z and least >= MIN_SIGNAL * abs(run.initial_loss)
