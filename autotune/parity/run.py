"""A parity run, inside a trial process: train a config briefly and record every step's loss.

The parity check (``autotune.parity.verdict``) compares two such runs, the
baseline's and a candidate's, made from the same initial weights over the same
data order. This module makes one: it seeds the build, fixes each epoch's order
with a generator of its own, evaluates a fixed probe set before and after
training, and returns the losses as plain data (``ParityRun``) that crosses the
process boundary as JSON. docs/parity.md gives the measurements behind the design.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import IterableDataset, RandomSampler, default_collate

from autotune.batch import samples_in
from autotune.config import Config
from autotune.loop import Step
from autotune.streams.keys import key_of
from autotune.text import nonfinite

ORDER_SEED = 0  # seeds the generator that orders the data of every parity run
PROBE_SAMPLES = 4096  # the fixed samples both runs are evaluated on, before and after training
PROBE_PARTS = 3  # a probe set is no larger than this part of the check's runs
AFTER_PROBES = 2.5  # a run that stops in time leaves this many of its first probe evaluation's time for the last ones

Builder = Callable[[Config, float], tuple[Any, Step, float]]


@dataclasses.dataclass(frozen=True)
class ParityRun:
    """The losses of one short training run, by samples seen."""

    batch_size: int
    lr: float
    initial_loss: float  # the untrained model on the probe set
    final_loss: float  # the trained model on the probe set
    ends: tuple[int, ...]  # samples seen after each step
    losses: tuple[float, ...]  # each step's loss, on the batch it trained on
    finite_params: bool  # every parameter finite after the run
    seconds: float
    # The trained model on the probe set with its targets shuffled across samples ((input, target) samples only):
    # above `final_loss` by what the model learned from its inputs, not from the targets' overall spread.
    shuffled_loss: float | None = None
    # The same three losses batch by batch over the probe set (the batches in the same order each time): the noise
    # each is judged against (``autotune.parity.signal``). None: made without them.
    initial_parts: tuple[float, ...] | None = None
    final_parts: tuple[float, ...] | None = None
    shuffled_parts: tuple[float, ...] | None = None

    @property
    def samples(self) -> int:
        return self.ends[-1] if self.ends else 0

    def window_loss(self, lo: int, hi: int) -> float:
        """The mean loss over samples (lo, hi], each step weighted by the samples it overlaps."""
        total = weight = 0.0
        start = 0
        for end, loss in zip(self.ends, self.losses):
            overlap = min(end, hi) - max(start, lo)
            if overlap > 0:
                total += loss * overlap
                weight += overlap
            start = end
        if weight == 0:
            raise ValueError(f"`0 <= lo < hi <= samples` must hold, but got ({lo=}, {hi=}, samples={self.samples}).")
        return total / weight

    def first_nonfinite(self) -> tuple[int, int, float] | None:
        """The first step whose loss is NaN or inf (counted from 1), the samples seen after it, and the loss."""
        for step, (end, loss) in enumerate(zip(self.ends, self.losses), 1):
            if not math.isfinite(loss):
                return step, end, loss
        return None

    def diverged(self) -> str | None:
        """How this run's training diverged, in a few words (its loss, else its parameters); None if it did not."""
        bad = self.first_nonfinite()
        if bad is not None:
            return f"loss became {nonfinite(bad[2])} at step {bad[0]}"
        if not self.finite_params:
            return "parameters became NaN or inf in its run"
        return None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "ParityRun":
        values = dict(values)
        values["ends"], values["losses"] = tuple(values["ends"]), tuple(values["losses"])
        for key in ("initial_parts", "final_parts", "shuffled_parts"):
            if values.get(key) is not None:
                values[key] = tuple(values[key])
        return cls(**values)


def own_order(loader: Any, seed: int) -> None:
    """Seed the order of a shuffling loader's next epoch, whatever the loader.

    A DataLoader draws one global seed per epoch with persistent workers and two
    without, and RandomSampler draws from its generator more than the one
    permutation it uses; a fresh generator per epoch makes the epoch's order
    the first permutation of `seed` in every loader (DeviceLoader draws as
    RandomSampler does). A workload's own sampler with a ``generator`` attribute
    (a length-bucketing sampler, say) is seeded the same way, and so is the
    bucketing knob's batch sampler; one without draws from the global generator,
    which the build seeded alike in both runs.
    """
    generator = torch.Generator()
    generator.manual_seed(seed)
    sampler = getattr(loader, "sampler", None)
    batch_sampler = getattr(loader, "batch_sampler", None)
    if isinstance(sampler, RandomSampler) or hasattr(sampler, "generator"):
        sampler.generator = generator
    elif hasattr(batch_sampler, "generator"):  # bucketing's LengthBuckets draws the order of its batches
        batch_sampler.generator = generator
    elif hasattr(loader, "generator") and getattr(loader, "shuffle", False):
        loader.generator = generator


@dataclasses.dataclass(frozen=True)
class ProbeSet:
    """Fixed samples both runs are evaluated on, batched by the workload's own collate_fn."""

    samples: list[Any]
    collate: Callable[[list[Any]], Any]

    def __len__(self) -> int:
        return len(self.samples)

    def batches(self, batch: int) -> Iterator[tuple[Any, int]]:
        """Host batches of up to `batch` samples, with how many samples each holds."""
        for lo in range(0, len(self.samples), batch):
            part = self.samples[lo : lo + batch]
            yield self.collate(part), len(part)

    def shuffled(self) -> "ProbeSet | None":
        """The same inputs, each with another sample's target; None unless every sample is an (input, target) pair.

        Each target moves half the set along, so no sample keeps its own: a model that learned nothing from its
        inputs (only how the targets are spread) has the same loss on both sets.
        """
        pairs = all(isinstance(s, (tuple, list)) and len(s) == 2 for s in self.samples)
        if not pairs or len(self.samples) < 2:
            return None
        half = len(self.samples) // 2
        targets = [s[1] for s in self.samples[half:] + self.samples[:half]]
        return ProbeSet([(s[0], t) for s, t in zip(self.samples, targets)], self.collate)


def probe_size(samples: int) -> int:
    """The probe set's size for a check whose runs train `samples`: PROBE_SAMPLES, or a third of the run where that is
    fewer. Evaluated up to three times a run, forward only, a probe that size costs about a third of the run; a larger
    one costs a slow model more than its training (docs/parity.md, "The run").

    >>> probe_size(65536), probe_size(2048)
    (4096, 682)
    """
    return min(PROBE_SAMPLES, samples // PROBE_PARTS)


def probe(dataset: Any, collate_fn: Callable[[list[Any]], Any] | None = None, samples: int = PROBE_SAMPLES,
          sample_key: Callable[[Any], Any] | None = None) -> ProbeSet:
    """`samples` of the data set drawn at random under a fixed seed, transformed under it: the same in every run.

    Drawn across the whole set, not its first samples: a class-sorted folder (ImageFolder) would give the
    first few classes only, whose loss moves with how the model spreads its guesses, not with what it learned.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(ORDER_SEED)  # a random transform draws the same augmentation every time
        if isinstance(dataset, IterableDataset):  # a stream has no index: its first samples, read in one process
            drawn = _first_pass(dataset, samples, sample_key)
        else:
            n = min(samples, len(dataset))
            chosen = torch.randperm(len(dataset))[:n].tolist()
            drawn = [dataset[i] for i in chosen]
    return ProbeSet(drawn, collate_fn or default_collate)


def _first_pass(stream: Any, samples: int, sample_key: Callable[[Any], Any] | None = None) -> list[Any]:
    """The distinct samples among the first `samples` of `stream` (each known as ``autotune.streams.keys`` knows it):
    an endless stream comes round to its first samples again, and a probe set holding a sample twice could give it
    its own target when shuffled."""
    drawn, seen = [], set()
    for sample in itertools.islice(iter(stream), samples):
        key = key_of(sample, sample_key)
        if key not in seen:
            seen.add(key)
            drawn.append(sample)
    return drawn


def probe_loss(step: Step, probe_set: ProbeSet, batch: int) -> float:
    """The model's mean loss on the probe set, fp32, no autocast, no update; computed by us, not by the step.

    Evaluated in batches of the baseline's size in every run: it fits wherever the
    baseline trains, and batch-norm statistics see the same batches in both runs.
    """
    return probe_losses(step, probe_set, batch)[0]


def probe_losses(step: Step, probe_set: ProbeSet, batch: int) -> tuple[float, tuple[float, ...]]:
    """The probe set's mean loss (``probe_loss``) and its loss batch by batch, the batches in their fixed order."""
    model = step.model
    saved = [b.detach().clone() for b in model.buffers()]  # batch-norm statistics move even under no_grad
    total, parts = 0.0, []
    with torch.no_grad():
        for host, samples in probe_set.batches(batch):
            loss = float(step.loss(step.to_device(host)))
            total += loss * samples
            parts.append(loss)
    for buffer, value in zip(model.buffers(), saved):
        buffer.copy_(value)
    return total / len(probe_set), tuple(parts)


def train(
    build: Builder,
    config: Config,
    lr: float,
    samples: int,
    probe_set: ProbeSet,
    probe_batch: int,
    count: Callable[[Any], int] = samples_in,
    stop_after_s: float | None = None,
) -> ParityRun:
    """Build `config` from the seed and train it for `samples`, recording every step's loss.

    `build` is ``Runner.build``: it seeds, then builds the loader and step. The
    probe set is evaluated, in batches of `probe_batch`, before and after the run.
    `count(batch)` is the workload's count of a batch's samples. With `stop_after_s`
    (seconds from the build's start), training stops early where going on would leave
    no time for the probe's evaluations after it: the run holds the samples it reached.
    """
    began = time.perf_counter()
    loader, step, _ = build(config, lr)
    start = time.perf_counter()
    initial, initial_parts = probe_losses(step, probe_set, probe_batch)
    # After training the probe is evaluated twice (plain and with its targets shuffled), each as long as this one.
    stop_at = None if stop_after_s is None else began + stop_after_s - AFTER_PROBES * (time.perf_counter() - start)
    ends: list[int] = []
    losses: list[Any] = []
    seen = epoch = 0
    while seen < samples:
        before = seen
        own_order(loader, ORDER_SEED + epoch)
        epoch += 1
        for batch in loader:
            loss = step(batch)
            seen += count(batch)
            ends.append(seen)
            # A graph step returns the same tensor every replay: keep a copy, and sync only once, at the end.
            losses.append(loss.detach().float().clone())
            if seen >= samples or (stop_at is not None and time.perf_counter() >= stop_at):
                break
        if stop_at is not None and time.perf_counter() >= stop_at:
            break
        if seen == before:
            raise ValueError(f"the loader of {config.describe()} yielded no batch")
    values = torch.stack(losses).cpu().tolist()
    finite = all(bool(torch.isfinite(p).all()) for p in step.model.parameters())
    final, final_parts = probe_losses(step, probe_set, probe_batch) if finite else (math.nan, None)
    shuffled_set = probe_set.shuffled() if finite else None
    shuffled, shuffled_parts = (probe_losses(step, shuffled_set, probe_batch) if shuffled_set is not None
                                else (None, None))
    seconds = time.perf_counter() - start
    return ParityRun(config.batch_size, lr, initial, final, tuple(ends), tuple(values), finite, seconds, shuffled,
                     initial_parts, final_parts, shuffled_parts)
