"""The parity check: a faster config may win only if it trains like the workload's own.

AMP, CUDA graphs, channels_last, cudnn.benchmark, device placement and a new
batch size each make training faster, and each can silently change what is
trained. Before a config may win, it and the baseline (the workload's own batch
size and loader, fp32, eager) train a short run from the same initial weights
over the same data order, and are compared at equal samples seen::

    verdict = check(runner, Config(batch_size=128), 0.01, Config(batch_size=1024), 0.08)
    verdict.passed, verdict.deviation, verdict.probe_deviation   # True, 0.041, -0.004

The run. ``S = max(512 baseline steps, 8 candidate steps)`` samples: 65,536 for
the seed's MNIST CNN (1.1 epochs), where a 64x batch still takes 8 steps. Each
run records every step's loss as the step reports it, and evaluates a probe set
(the data set's first 4,096 samples, transformed under a fixed seed; fp32, no
autocast, in batches of the baseline's size) before and after training. Both runs
must agree on the untrained probe loss ``L0``: it proves the same weights and
data. Each epoch's order comes from a generator seeded for that epoch, so every
loader (DataLoader with or without persistent workers, the device-resident one)
visits the same samples in the same order.

The comparison, two numbers, each within the tolerance of the knob family:

- ``deviation``: the loss over the last quarter of the run's samples, each step
  weighted by the samples it overlaps (a 64x batch's 2 steps against the
  baseline's 128), the issue's "loss over the last window";
- ``probe_deviation``: the probe loss of the weights after ``S`` samples, the
  same for both runs, with no lag for a large batch and no trust in what the
  step reports (a graph replaying a stale input reports the loss of that input).

Both are ``(L_candidate - L_baseline) / unit`` (see ``deviation()``): the unit is
what the baseline learned (``L0 - L_baseline``) or, when the candidate learned
less and that is smaller, what the baseline has left (``L_baseline``); at least 1%
of ``L0``. A raw relative difference cannot work: MNIST sits on a plateau near
ln 10 through the first epoch, where batch 8192 at the unscaled learning rate is
within 2% of the baseline's loss. A candidate also fails when any loss or
parameter is NaN or inf.

Measured on a CPU, deterministic, so the numbers repeat exactly. mnist_cnn
(synthetic MNIST, SGD, baseline batch 128 at lr 0.01, S = 65,536, L0 = 2.3022,
baseline window loss 2.2599, probe 2.2383)::

    config (lr by the linear rule unless said)        deviation  probe
    same config; placement=device; 2 persistent workers   0       0      (bitwise)
    amp=bf16                                           -0.004   -0.002
    amp=fp16 with its GradScaler                       +0.000   +0.000
    stale input: the step trains on its first batch    -1.956   -0.265
    batch 32 / 256 / 512 / 1024                        -0.006 / +0.005 / +0.016 / +0.041
                                             probe     +0.002 /  0.000 / +0.002 / -0.004
    batch 2048 / 4096 at lr 0.16 / 0.32                +0.073 / +0.160, probe -0.012 / -0.024
    batch 8192 at lr 0.5 (the old LR_MAX)              +0.498   +0.405
    batch 2048 / 4096 / 8192 at lr 0.08 (LR_MAX now)   +0.708 / +0.880 / +0.961, probe +0.73 / +0.87 / +0.93
    batch 8192 at lr 0.01 (unscaled)                   +1.043   +0.988
    batch 1024 at lr 0.028 (sqrt rule)                 +0.809   +0.825

and on the 4-class tests/workloads/tiny.py (S = 8,192, 16 epochs, converged:
L0 = 1.385, baseline 0.0041): bf16, device, workers, batch 4 to 64 linear all
within 0.001; batch 128 at 0.4 -0.002; batch 128 at 0.05 (unscaled) +12.6 and
+8.5; sqrt +1.1 and +0.84; the stale input +0.096 on the probe. On
tests/workloads/underflow.py, fp16 without a GradScaler: +99.7 (nothing learned).

Tolerances (``TOLERANCES``):

- ``loader`` (only workers, pinning, prefetch, persistence differ) and
  ``numerics`` (amp, cuda_graph, channels_last, cudnn_benchmark, placement):
  0.05, over 10x bf16's deviation; the stale input is at 0.096 (tiny) to 1.96.
  On a GPU non-deterministic kernels add noise of bf16's order.
- ``batch_size``: 0.25. A larger step lags the baseline in the window at equal
  samples (its loss is that of the weights at the start of its 8,192 samples),
  so the window deviation grows with the batch under a correct rule, 0.160 at
  32x; the probe does not lag. 0.25 passes those and rejects the unscaled, the
  sqrt-scaled and the capped large batches (0.5 or more).

What a short run cannot see. Run for 3 epochs, batch 1024 at lr 0.08 tracks the
baseline to the end (both reach loss 0.011), but batch 2048 at 0.16 and 4096 at
0.32 (which pass above) and 8192 at 0.5 blow up where the baseline's loss falls
(batch 2048: loss 4.2 at 115k samples) and end at 1.8 to 2.3, against 0.011.
The workload's ``LR_MAX`` is the guard for that: mnist_cnn's is 0.08, measured,
so larger batches get 0.08, learn too little in the check and are rejected.

The numbers of a check go into the tuned recipe under ``parity`` and are
printed by ``autotune show``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.data import RandomSampler

from autotune.config import Config
from autotune.loop import Step

LOADER_KNOBS = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor")
NUMERICS_KNOBS = ("amp", "cuda_graph", "channels_last", "cudnn_benchmark", "placement")
# |deviation| and |probe_deviation| allowed (units: see deviation()); the module docstring has the measurements.
TOLERANCES = {"loader": 0.05, "numerics": 0.05, "batch_size": 0.25}
FAMILIES = tuple(TOLERANCES)
BASELINE_STEPS = 512  # the baseline trains at least this many steps: 65,536 samples, 1.1 epochs, for mnist_cnn
CANDIDATE_STEPS = 8  # and a candidate at least this many, however large its batch
WINDOW_PARTS = 4  # the compared window is the last quarter of the run
PROGRESS_FLOOR = 0.01  # a baseline that learned less than 1% of its initial loss is measured against 1%
INITIAL_RTOL = 1e-3  # two runs from the same weights and data agree on the initial loss this closely
ORDER_SEED = 0  # seeds the generator that orders the data of every parity run
PROBE_SAMPLES = 4096  # the fixed samples both runs are evaluated on, before and after training

Builder = Callable[[Config, float], tuple[Any, Step, float]]


class ParityError(RuntimeError):
    """The check cannot judge anything: the baseline itself failed or diverged."""


class TraceFailed(RuntimeError):
    """A parity run that crashed, ran out of memory or timed out; the message is the reason."""


@dataclasses.dataclass(frozen=True)
class Trace:
    """The losses of one short training run, by samples seen."""

    batch_size: int
    lr: float
    initial_loss: float  # the untrained model on the probe set
    final_loss: float  # the trained model on the probe set
    ends: tuple[int, ...]  # samples seen after each step
    losses: tuple[float, ...]  # each step's loss, on the batch it trained on
    finite_params: bool  # every parameter finite after the run
    seconds: float

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

    def first_nonfinite(self) -> tuple[int, float] | None:
        for end, loss in zip(self.ends, self.losses):
            if not math.isfinite(loss):
                return end, loss
        return None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "Trace":
        values = dict(values)
        values["ends"], values["losses"] = tuple(values["ends"]), tuple(values["losses"])
        return cls(**values)


def run_length(baseline_batch: int, batch: int) -> tuple[int, int]:
    """Samples to train and the window compared at their end, for two batch sizes.

    >>> run_length(128, 8192)
    (65536, 16384)
    """
    samples = max(BASELINE_STEPS * baseline_batch, CANDIDATE_STEPS * batch)
    return samples, samples // WINDOW_PARTS


def family(baseline: Config, candidate: Config) -> str:
    """Which tolerance applies: the loosest family among the knobs that differ."""
    if candidate.batch_size != baseline.batch_size:
        return "batch_size"
    if any(getattr(candidate, k) != getattr(baseline, k) for k in NUMERICS_KNOBS):
        return "numerics"
    return "loader"


def _own_order(loader: Any, seed: int) -> None:
    """Seed the order of a shuffling loader's next epoch, whatever the loader.

    A DataLoader draws one global seed per epoch with persistent workers and two
    without, and RandomSampler draws from its generator more than the one
    permutation it uses; a fresh generator per epoch makes the epoch's order
    the first permutation of `seed` in every loader (DeviceLoader draws as
    RandomSampler does).
    """
    generator = torch.Generator()
    generator.manual_seed(seed)
    sampler = getattr(loader, "sampler", None)
    if isinstance(sampler, RandomSampler):
        sampler.generator = generator
    elif hasattr(loader, "generator") and getattr(loader, "shuffle", False):
        loader.generator = generator


def probe(dataset: Any, samples: int = PROBE_SAMPLES) -> tuple[Any, Any]:
    """The first `samples` of the data set, transformed under a fixed seed: the same tensors in every run."""
    n = min(samples, len(dataset))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(ORDER_SEED)  # a random transform draws the same augmentation every time
        pairs = [dataset[i] for i in range(n)]
    return torch.stack([torch.as_tensor(x) for x, _ in pairs]), torch.stack([torch.as_tensor(y) for _, y in pairs])


def probe_loss(step: Step, probe_set: tuple[Any, Any], batch: int) -> float:
    """The model's mean loss on the probe set, fp32, no autocast, no update; computed by us, not by the step.

    Evaluated in batches of the baseline's size in every run: it fits wherever the
    baseline trains, and batch-norm statistics see the same batches in both runs.
    """
    model = step.model
    saved = [b.detach().clone() for b in model.buffers()]  # batch-norm statistics move even under no_grad
    inputs, targets = probe_set
    total = 0.0
    with torch.no_grad():
        for lo in range(0, len(inputs), batch):
            x, y = step._to_device(inputs[lo : lo + batch], targets[lo : lo + batch])
            total += float(step.loss_fn(model(x), y)) * len(x)
    for buffer, value in zip(model.buffers(), saved):
        buffer.copy_(value)
    return total / len(inputs)


def run_trace(build: Builder, config: Config, lr: float, samples: int, probe_set: tuple[Any, Any], probe_batch: int) -> Trace:
    """Build `config` from the seed and train it for `samples`, recording every step's loss.

    `build` is ``Runner.build``: it seeds, then builds the loader and step. The
    probe set is evaluated, in batches of `probe_batch`, before and after the run.
    """
    loader, step, _ = build(config, lr)
    start = time.perf_counter()
    initial = probe_loss(step, probe_set, probe_batch)
    ends: list[int] = []
    losses: list[Any] = []
    seen = epoch = 0
    while seen < samples:
        before = seen
        _own_order(loader, ORDER_SEED + epoch)
        epoch += 1
        for x, y in loader:
            loss = step(x, y)
            seen += len(x)
            ends.append(seen)
            # A graph step returns the same tensor every replay: keep a copy, and sync only once, at the end.
            losses.append(loss.detach().float().clone())
            if seen >= samples:
                break
        if seen == before:
            raise ValueError(f"the loader of {config.describe()} yielded no batch")
    values = torch.stack(losses).cpu().tolist()
    finite = all(bool(torch.isfinite(p).all()) for p in step.model.parameters())
    final = probe_loss(step, probe_set, probe_batch) if finite else math.nan
    seconds = time.perf_counter() - start
    return Trace(config.batch_size, lr, initial, final, tuple(ends), tuple(values), finite, seconds)


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The outcome of one check, with the numbers that decided it."""

    passed: bool
    family: str
    tolerance: float  # for both deviations
    samples: int  # each run trained this many
    window: int  # the last `window` of them are compared
    lr: float
    baseline_lr: float
    initial_loss: float | None = None  # the untrained model on the probe set (both runs agree on it)
    loss: float | None = None  # training loss over the window, as the step reported it
    baseline_loss: float | None = None
    deviation: float | None = None  # (loss - baseline_loss) / scale; None when not reached
    probe_loss: float | None = None  # the trained model on the probe set, evaluated by the check
    baseline_probe_loss: float | None = None
    probe_deviation: float | None = None
    run_s: float = 0.0  # the candidate's parity run
    reason: str | None = None  # why it failed

    @property
    def word(self) -> str:
        return "pass" if self.passed else "REJECT"

    def summary(self) -> str:
        """One line: the decision and its numbers."""
        if self.deviation is None or self.probe_deviation is None:
            return f"{self.word:<6}  {self.reason}"
        return (
            f"{self.word:<6}  deviation {self.deviation:+.1%}, probe {self.probe_deviation:+.1%} "
            f"(tolerance ±{self.tolerance:.0%}, {self.family}): loss {self.loss:.4g} vs {self.baseline_loss:.4g}, "
            f"probe {self.probe_loss:.4g} vs {self.baseline_probe_loss:.4g} at {self.samples:,} samples "
            f"from {self.initial_loss:.4g}; lr {self.lr:g}"
        )

    def as_record(self) -> dict[str, Any]:
        """Plain data for the study and the tuned recipe: finite numbers only, nothing absent as None."""
        record: dict[str, Any] = {}
        for key, value in dataclasses.asdict(self).items():
            if value is None or (isinstance(value, float) and not math.isfinite(value)):
                continue
            record[key] = round(value, 6) if isinstance(value, float) else value
        return record


def deviation(initial: float, baseline: float, candidate: float) -> float:
    """How far `candidate`'s loss is from `baseline`'s, in units of what the baseline learned or has left.

    A candidate above the baseline (it learned less) is measured against the
    smaller of the baseline's progress (``initial - baseline``) and its remaining
    loss (``baseline``): on a plateau a small shortfall is a large share of the
    progress, and near convergence a loss 40 times the baseline's is a large
    share of what is left. A candidate below the baseline (it learned more) is
    measured against the progress alone: learning much faster than the baseline
    is a different run (a memorised batch), converging a little further is not.
    The unit is at least 1% of ``initial``.

    >>> round(deviation(2.30, 2.26, 2.30), 2)  # no progress where the baseline made 0.04
    1.0
    """
    progress = initial - baseline
    unit = min(progress, baseline) if candidate > baseline else progress
    return (candidate - baseline) / max(unit, PROGRESS_FLOOR * abs(initial))


def compare(baseline: Trace, candidate: Trace, family_name: str, samples: int, window: int) -> Verdict:
    """Judge `candidate` against `baseline` at `samples` seen, over the last `window` of them."""
    tolerance = TOLERANCES[family_name]
    numbers: dict[str, Any] = dict(family=family_name, tolerance=tolerance, samples=samples, window=window,
                                   lr=candidate.lr, baseline_lr=baseline.lr, run_s=round(candidate.seconds, 3))
    if baseline.first_nonfinite() or not baseline.finite_params or not math.isfinite(baseline.initial_loss):
        raise ParityError(f"the baseline's own parity run is not finite (batch {baseline.batch_size}, "
                          f"lr {baseline.lr:g}); nothing can be compared to it.")
    if baseline.samples < samples or candidate.samples < samples:
        raise ValueError(f"both runs must reach {samples:,} samples, but got baseline {baseline.samples:,}, "
                         f"candidate {candidate.samples:,}.")
    bad = candidate.first_nonfinite()
    if bad is not None:
        return Verdict(False, **numbers, reason=f"loss is {bad[1]} after {bad[0]:,} samples")
    if not candidate.finite_params:
        return Verdict(False, **numbers, reason="parameters are NaN or inf after the run")
    l0 = baseline.initial_loss
    numbers["initial_loss"] = l0
    if not math.isclose(candidate.initial_loss, l0, rel_tol=INITIAL_RTOL):
        return Verdict(False, **numbers, reason=(
            f"not the same start: the untrained model's probe loss is {candidate.initial_loss:.6f}, "
            f"the baseline's {l0:.6f} (same weights and data agree within {INITIAL_RTOL:.0e})"))
    lo = samples - window
    numbers.update(loss=candidate.window_loss(lo, samples), baseline_loss=baseline.window_loss(lo, samples),
                   probe_loss=candidate.final_loss, baseline_probe_loss=baseline.final_loss)
    numbers["deviation"] = deviation(l0, numbers["baseline_loss"], numbers["loss"])
    numbers["probe_deviation"] = deviation(l0, baseline.final_loss, candidate.final_loss)
    passed = abs(numbers["deviation"]) <= tolerance and abs(numbers["probe_deviation"]) <= tolerance
    return Verdict(passed, **numbers)


def check(runner: Any, baseline: Config, baseline_lr: float, candidate: Config, lr: float) -> Verdict:
    """Train both configs in this process and compare them: the one-call form of the check.

    `runner` is a ``Runner`` (or anything with its ``build`` and ``dataset``).

    >>> check(runner, Config(batch_size=128), 0.01, Config(batch_size=8192), 0.01).passed  # doctest: +SKIP
    False
    """
    samples, window = run_length(baseline.batch_size, candidate.batch_size)
    probe_set = probe(runner.dataset)
    base = run_trace(runner.build, baseline, baseline_lr, samples, probe_set, baseline.batch_size)
    trace = run_trace(runner.build, candidate, lr, samples, probe_set, baseline.batch_size)
    return compare(base, trace, family(baseline, candidate), samples, window)


def _numerics(config: Config) -> tuple[Any, ...]:
    # Loader knobs change speed, not the samples or their order: configs equal here train alike.
    return tuple(v for k, v in config.as_dict().items() if k not in LOADER_KNOBS)


def _clearly_too_far(verdict: Verdict) -> bool:
    """A batch-size rejection that no numerics knob can undo: beyond its tolerance by more than numerics may move it."""
    worst = max(abs(verdict.deviation or 0.0), abs(verdict.probe_deviation or 0.0))
    return verdict.family == "batch_size" and worst > TOLERANCES["batch_size"] + TOLERANCES["numerics"]


class Gate:
    """Checks configs in the order given against one baseline run, keeping every verdict.

    `trace(config, lr, samples)` makes one parity run (in a trial process, in the
    search) and raises TraceFailed with the reason when it cannot. One run length
    serves every candidate, set by the largest batch among `candidates` (or
    `max_batch`), so the baseline trains once.
    """

    def __init__(self, baseline: Config, lr_of: Callable[[Config], float], trace: Callable[[Config, float, int], Trace],
                 candidates: Sequence[Config], echo: Callable[[str], None] = print, max_batch: int | None = None) -> None:
        self.baseline, self.lr_of, self.trace, self.echo = baseline, lr_of, trace, echo
        # `max_batch`: the largest batch any candidate may have, when the runs begin before all are known.
        largest = max_batch if max_batch is not None else max([c.batch_size for c in candidates], default=1)
        self.samples, self.window = run_length(baseline.batch_size, largest)
        self.verdicts: dict[Config, Verdict] = {}
        self.runs = 0  # candidates run; a config with the numerics (or the hopeless batch) of one run reuses its verdict
        self.seconds = 0.0  # wall time of every parity run, the baseline's included: the check's cost
        self.baseline_seconds = 0.0
        self._base: Trace | None = None
        self._base_from = ""  # where an adopted baseline run was made, for the summary
        self._by_numerics: dict[tuple[Any, ...], tuple[Config, Verdict]] = {}
        # Batch sizes (at their learning rate) rejected by a margin: every config with that batch fails too.
        self._batch_rejected: dict[int, tuple[Config, Verdict]] = {}

    def adopt_baseline(self, trace: Trace, where: str) -> None:
        """Use a baseline run made elsewhere (`where` says by whom), of this gate's length, instead of making one."""
        # A run trains whole batches until it has seen `samples`: it ends within one batch past them.
        if trace.batch_size != self.baseline.batch_size or not self.samples <= trace.samples < self.samples + trace.batch_size:
            raise ValueError(f"an adopted baseline run must train the baseline's batch {self.baseline.batch_size} for "
                             f"{self.samples:,} samples, but got batch {trace.batch_size} and {trace.samples:,} samples.")
        self._base, self._base_from = trace, where
        self.baseline_seconds = trace.seconds
        self.seconds += trace.seconds  # the check's cost, wherever it was paid

    def _timed(self, config: Config) -> Trace:
        start = time.perf_counter()
        try:
            return self.trace(config, self.lr_of(config), self.samples)
        finally:
            self.seconds += time.perf_counter() - start

    def select(self, ranked: Sequence[Config], want: int, max_runs: int) -> list[Config]:
        """The first `want` configs of `ranked` that pass, running at most `max_runs` more candidates."""
        passed: list[Config] = []
        limit = self.runs + max_runs
        for config in ranked:
            if len(passed) == want:
                break
            key = _numerics(config)
            if config in self.verdicts:
                verdict = self.verdicts[config]
            elif key in self._by_numerics:
                twin, verdict = self._by_numerics[key]
                self.echo(f"  parity {verdict.word:<6}  (same numerics as {twin.describe()})  {config.describe()}")
            elif config.batch_size in self._batch_rejected:
                twin, verdict = self._batch_rejected[config.batch_size]
                self.echo(f"  parity {verdict.word:<6}  (batch {config.batch_size} at lr {verdict.lr:g} is too far whatever the "
                          f"numerics: see {twin.describe()})  {config.describe()}")
            elif self.runs == limit:
                break
            else:
                verdict = self._check(config)
                self._by_numerics[key] = (config, verdict)
                if _clearly_too_far(verdict):
                    self._batch_rejected[config.batch_size] = (config, verdict)
                self.echo(f"  parity {verdict.summary()}  [{verdict.run_s:.1f} s]  {config.describe()}")
            self.verdicts[config] = verdict
            if verdict.passed:
                passed.append(config)
        return passed

    def summary(self) -> str:
        """The check's cost, in one line."""
        rejected = sum(not v.passed for v in self.verdicts.values())
        where = f", {self._base_from}" if self._base_from else ""
        return (f"parity: {len(self.verdicts)} config(s) checked, {rejected} rejected; {self.runs} run(s) and the "
                f"baseline's took {self.seconds:.1f} s (baseline {self.baseline_seconds:.1f} s{where})")

    def _check(self, config: Config) -> Verdict:
        if self._base is None:
            before = self.seconds
            try:
                self._base = self._timed(self.baseline)
            except TraceFailed as exc:
                raise ParityError(f"the baseline's parity run failed: {exc}") from exc
            self.baseline_seconds = self.seconds - before
        self.runs += 1
        name = family(self.baseline, config)
        try:
            trace = self._timed(config)
        except TraceFailed as exc:
            return Verdict(False, name, TOLERANCES[name], self.samples, self.window, self.lr_of(config), self._base.lr,
                           reason=str(exc))
        return compare(self._base, trace, name, self.samples, self.window)

    def record(self, config: Config) -> dict[str, Any]:
        """What the tuned recipe keeps: the winner's numbers and what the whole check cost."""
        return {
            "checked": True,
            **self.verdicts[config].as_record(),
            "configs_checked": len(self.verdicts),
            "configs_rejected": sum(not v.passed for v in self.verdicts.values()),
            "check_s": round(self.seconds, 1),
        }


_NUMBER = (int, float)
# The `parity` table of a tuned profile: key -> (types, required when checked).
RECORD_KEYS: dict[str, tuple[tuple[type, ...], bool]] = {
    "checked": ((bool,), True),
    "passed": ((bool,), True),
    "family": ((str,), True),
    "tolerance": (_NUMBER, True),
    "samples": ((int,), True),
    "window": ((int,), True),
    "lr": (_NUMBER, True),
    "baseline_lr": (_NUMBER, True),
    "initial_loss": (_NUMBER, False),
    "loss": (_NUMBER, False),
    "baseline_loss": (_NUMBER, False),
    "deviation": (_NUMBER, False),
    "probe_loss": (_NUMBER, False),
    "baseline_probe_loss": (_NUMBER, False),
    "probe_deviation": (_NUMBER, False),
    "run_s": (_NUMBER, False),
    "reason": ((str,), False),
    "configs_checked": ((int,), True),
    "configs_rejected": ((int,), True),
    "check_s": (_NUMBER, True),
}


def validate_record(at: str, record: dict[str, Any]) -> list[str]:
    """Every problem in a profile's `parity` table, as messages that name the key and the rule."""
    problems: list[str] = []
    checked = record.get("checked")
    if not isinstance(checked, bool):
        return [f"{at}.checked must be true or false, but got {checked!r}"]
    if not checked:
        extra = sorted(set(record) - {"checked"})
        return [f"{at} says checked = false, so it must hold nothing else, but has {extra}"] if extra else []
    for key, value in record.items():
        if key not in RECORD_KEYS:
            problems.append(f"{at} has unknown key {key!r}; known: {', '.join(RECORD_KEYS)}")
            continue
        types = RECORD_KEYS[key][0]
        if isinstance(value, bool) != (bool in types) or not isinstance(value, types):
            kind = "a number" if types == _NUMBER else " or ".join(t.__name__ for t in types)
            problems.append(f"{at}.{key} must be {kind}, but got {value!r}")
    problems += [f"{at} lacks {key!r}" for key, (_, required) in RECORD_KEYS.items() if required and key not in record]
    if problems:
        return problems
    if record["family"] not in FAMILIES:
        problems.append(f"{at}.family must be one of {', '.join(FAMILIES)}, but got {record['family']!r}")
    for key in ("tolerance", "lr", "baseline_lr", "samples", "window"):
        if record[key] <= 0:
            problems.append(f"{at}.{key} must be > 0, but got {record[key]!r}")
    if record["window"] > record["samples"]:
        problems.append(f"`window <= samples` must hold in {at}, but got (window={record['window']}, samples={record['samples']})")
    for key in ("check_s", "run_s", "configs_checked", "configs_rejected"):
        if record.get(key, 0) < 0:
            problems.append(f"{at}.{key} must be >= 0, but got {record[key]!r}")
    if record["configs_rejected"] > record["configs_checked"]:
        problems.append(f"`configs_rejected <= configs_checked` must hold in {at}, but got "
                        f"(configs_rejected={record['configs_rejected']}, configs_checked={record['configs_checked']})")
    if record["passed"]:
        for key in ("deviation", "probe_deviation"):
            if key in record and abs(record[key]) > record["tolerance"]:
                problems.append(f"{at} says passed, but |{key}| = {abs(record[key]):g} exceeds its tolerance {record['tolerance']:g}")
    return problems
