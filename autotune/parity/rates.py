"""The learning rates a new batch size is tried at, and the batches a margin's rejections rule out unrun.

A batch size that fails at its rule's rate is tried at the gentler rules' (and, when those showed the rate too low,
the bolder ones'); a run that rejects a batch at a rate by a clear margin (``verdict.clearly_too_far``) rejects every
config of that batch at that rate, and a batch rejected at every rate it would be tried at needs no run of its own.
``autotune.parity.check`` asks; this keeps the rejections and reads them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping

from autotune.config import Config, LrRule
from autotune.parity.reasons import too_low
from autotune.parity.verdict import ParityVerdict, changes_math

Rejections = dict[tuple[int, float], tuple[Config, ParityVerdict]]  # (batch, lr): the run's config and verdict


class RejectedBatches:
    """The (batch size, learning rate) pairs a run rejected by a margin: every config of that batch fails at that
    rate too. `lr_of(config)`: the search's rule's rate; `lr_at(config, rule)`: another rule's."""

    def __init__(self, baseline: Config, lr_of: Callable[[Config], float], lr_rule: LrRule | None,
                 lr_at: Callable[[Config, str], float] | None) -> None:
        self.baseline, self.lr_of, self.lr_rule, self.lr_at = baseline, lr_of, lr_rule, lr_at
        self.by_rate: Rejections = {}

    def ladder(self, config: Config) -> tuple[Rates, Rates]:
        """The rates to try `config` at (its rule's, then each gentler one's) and, for a new batch size, the bolder
        ones, nearest first (each capped rate once)."""
        return ladder(config, self.lr_of(config), self.lr_rule, self.lr_at, self.baseline.batch_size)

    def hopeless(self, config: Config) -> tuple[Config, ParityVerdict, str] | None:
        """A config whose batch was rejected by a margin at every rate it would be tried at, or one larger than a
        batch that learned too little at every rate (``larger_than_rejected``); the verdict it takes, and why."""
        found = rejected_at_every_rate(self.by_rate, config.batch_size, *self.ladder(config))
        if found is not None:
            twin, verdict = found[-1]
            return twin, verdict, f"batch {config.batch_size} at lr {verdict.lr:g} is too far whatever the numerics"
        return larger_than_rejected(self.by_rate, self.baseline, config, self.ladder, self.lr_of(config))


Rates = list[tuple[str | None, float]]


def ladder(
    config: Config, first: float, lr_rule: LrRule | None, lr_at: Callable[[Config, str], float] | None, base_batch: int
) -> tuple[Rates, Rates]:
    """The rates to try `config` at: its rule's (`first`) and each gentler one's; then the bolder ones, nearest
    first. A new batch size only; a capped rate that equals another rule's is tried once."""
    rates: Rates = [(lr_rule.name if lr_rule else None, first)]
    if lr_rule is None or lr_at is None or config.batch_size == base_batch:
        return rates, []
    bolder: Rates = []
    for rules, into in ((lr_rule.gentler(), rates), (lr_rule.bolder(), bolder)):
        for rule in rules:
            lr = lr_at(config, rule)
            if all(not math.isclose(lr, seen) for _, seen in [*rates, *bolder]):
                into.append((rule, lr))
    return rates, bolder


def rejected_at_every_rate(
    rejected: Mapping[tuple[int, float], tuple[Config, ParityVerdict]], batch: int, rates: Rates, bolder: Rates
) -> list[tuple[Config, ParityVerdict]] | None:
    """The runs that rejected `batch` by a margin at each of `rates` (and at each `bolder` one, when the gentler ones
    showed the rate too low), in that order; None when a rate is left that no run has ruled out."""
    def runs(tried: Rates) -> list[tuple[Config, ParityVerdict]] | None:
        found = [rejected.get((batch, lr)) for _, lr in tried]
        return None if any(f is None for f in found) else [f for f in found if f is not None]

    found = runs(rates)
    if not found:
        return None
    if too_low([(rule, verdict) for (rule, _), (_, verdict) in zip(rates, found)]):
        more = runs(bolder)
        return None if more is None else found + more
    return found


def larger_than_rejected(
    rejected: Mapping[tuple[int, float], tuple[Config, ParityVerdict]],
    baseline: Config,
    config: Config,
    ladder_of: Callable[[Config], tuple[Rates, Rates]],
    lr: float,
) -> tuple[Config, ParityVerdict, str] | None:
    """`config`'s rejection without a run, when its batch is larger than one above the baseline's that learned too
    little at every rate it was tried at, with nothing but its batch changed from the baseline's math: on as many
    samples, a larger batch takes fewer steps, each further from the baseline's; without this, larger batches
    took all of a check's runs and a smaller, faster one went unchecked (docs/parity.md, "The check"). A batch
    rejected beside amp, or for learning more than the baseline, says nothing of a larger one."""
    def batch_alone(twin: Config, verdict: ParityVerdict) -> bool:
        # The baseline's math (autotune.parity.verdict.SAME_MATH_KNOBS): mnist_cnn's rejected batches were
        # device-resident in a CUDA graph, which an equality of every knob but the loader's never let through.
        same_math = changes_math(baseline, twin) == ["batch_size"]
        return same_math and (verdict.deviation or 0.0) > 0 and (verdict.probe_deviation or 0.0) >= 0

    for batch in sorted({b for b, _ in rejected if baseline.batch_size < b < config.batch_size}):
        found = rejected_at_every_rate(rejected, batch, *ladder_of(dataclasses.replace(config, batch_size=batch)))
        if found is None or not all(batch_alone(*f) for f in found):
            continue
        twin, verdict = found[-1]
        why = f"batch {batch} learned too little at every rate, and batch {config.batch_size} is larger"
        carried = ParityVerdict(False, verdict.family, verdict.tolerance, verdict.samples, verdict.window, lr,
                                verdict.baseline_lr, initial_loss=verdict.initial_loss,
                                baseline_loss=verdict.baseline_loss, baseline_probe_loss=verdict.baseline_probe_loss,
                                reason=why, conclusive=verdict.conclusive)
        return twin, carried, why
    return None
