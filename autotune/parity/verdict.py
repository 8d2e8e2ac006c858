"""The parity check's verdict: a faster config may win only if it trains like the workload's own.

AMP, CUDA graphs, channels_last, cudnn.benchmark, device placement, batches
grouped by length, padding to a multiple and a new batch size each make
training faster, and each can silently change what is trained. Before a
config may win, it and the baseline (the workload's own batch size and loader,
fp32, eager) each make a parity run (``autotune.parity.run``) from the
same initial weights over the same data order, and ``compare`` judges
them at equal samples seen, by two numbers, each within the tolerance of the
knob family that differs:

- ``deviation``: the loss over the last quarter of the run's samples, each step
  weighted by the samples it overlaps;
- ``probe_deviation``: the loss of a fixed probe set after the run.

Both are in units of what the baseline learned (``deviation()``). A candidate
also fails when any loss or parameter is NaN or inf; a baseline whose run diverged
ends the check (``baseline_diverged``): the workload's own settings diverge, and
nothing can be judged against them. A baseline that learned
under MIN_PROGRESS of its initial loss (random labels, a plateau), or whose probe
loss hardly rises when the probe's targets are shuffled (it learned how the
targets are spread, not what its inputs say: ResNet-50 after 18,000 ImageNet
samples), gives no unit to judge by: the check is inconclusive
(``conclusive()``), and a config that changes the math (batch size, amp)
cannot pass it. Device decode is judged by its images instead
(``autotune.parity.inputs``): once they pass, it keeps the math. A config at
the baseline's batch that changes only amp and compile gets no run at all: its
gradients judge it (``autotune.parity.numerics``).
docs/parity.md gives the measurements the tolerances were chosen from.
``ParityCheck`` (``autotune.parity.check``) runs the check over a
search's fastest configs.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from autotune.config import LOADER_KNOBS, Config
from autotune.errors import AutotuneError
from autotune.parity import signal
from autotune.parity.run import ParityRun
from autotune.text import nonfinite

# bucketing changes which samples share a batch (and so each step's gradient), pad_multiple the shapes the model's
# kernels reduce over (masked positions are not free of rounding): both are judged as numerics.
NUMERICS_KNOBS = (
    "amp", "cuda_graph", "channels_last", "cudnn_benchmark", "placement", "decode", "decode_share", "bucketing",
    "pad_multiple",
    "compile",
)
# Knobs that change speed but not the arithmetic of training: the same samples, in the same order, through the same
# operations. cudnn.benchmark and channels_last pick among kernels that compute the same convolution (checked on a
# first SGD step from the same weights: docs/parity.md, "Inconclusive"), and a
# CUDA graph replays the kernels the eager step launched. Only configs that differ from the baseline in these alone
# may win when the check is inconclusive.
SAME_MATH_KNOBS = (*LOADER_KNOBS, "placement", "cudnn_benchmark", "channels_last", "cuda_graph")
# |deviation| and |probe_deviation| allowed (units: see deviation()); docs/parity.md has the measurements.
TOLERANCES = {"loader": 0.05, "numerics": 0.05, "batch_size": 0.25}
FAMILIES = tuple(TOLERANCES)
BASELINE_STEPS = 512  # the baseline trains at least this many steps: 65,536 samples, 1.1 epochs, for mnist_cnn
CANDIDATE_STEPS = 8  # and a candidate at least this many, however large its batch
PARITY_BASELINE_S = 45.0  # the baseline's run is cut to what it trains in this long (its trial's rate)
CHECK_SHARE = 0.15  # the whole check aims to take at most this share of the search's time budget
RUNS_IN_SHARE = 4  # the baseline's run is cut to a quarter of the check's share: it and three candidates fit
MIN_PROGRESS = 0.015  # the baseline must learn this share of its initial loss in the run, else it is inconclusive
EXTEND_FACTOR = 2  # an inconclusive check's runs are made this much longer, once, if its time allows
MIN_BASELINE_STEPS = 64  # but never below this many of its steps
WINDOW_PARTS = 4  # the compared window is the last quarter of the run
PROGRESS_FLOOR = 0.01  # a baseline that learned less than 1% of its initial loss is measured against 1%
INITIAL_RTOL = 1e-3  # two runs from the same weights and data agree on the initial loss this closely


class ParityError(AutotuneError, RuntimeError):
    """The check cannot judge anything: the baseline itself failed or diverged."""


class ParityRunFailed(AutotuneError, RuntimeError):
    """A parity run that crashed, ran out of memory or timed out; the message is the reason."""


class ParityRunOutOfTime(ParityRunFailed):
    """A parity run stopped at what was left of the check's share of the search's budget: the clock's doing, not the
    config's, so it judges nothing (a baseline's makes the check inconclusive, not failed)."""


def run_length(
    baseline_batch: int, batch: int, baseline_rate: float | None = None, run_s: float = PARITY_BASELINE_S
) -> tuple[int, int]:
    """Samples to train and the window compared at their end, for two batch sizes.

    With `baseline_rate` (samples/s, the baseline's trial), the run is cut to what the
    baseline trains in `run_s` (``run_seconds``), but never below MIN_BASELINE_STEPS of
    its batches nor CANDIDATE_STEPS of the larger one: a heavy model's check then costs
    minutes, not tens of them.

    >>> run_length(128, 8192)
    (65536, 16384)
    >>> run_length(256, 256, baseline_rate=615.0)  # ResNet-50 on 4 JPEG-decoding workers
    (27675, 6918)
    """
    samples = max(BASELINE_STEPS * baseline_batch, CANDIDATE_STEPS * batch)
    if baseline_rate is not None:
        bounded = int(run_s * baseline_rate)
        samples = max(min(samples, bounded), MIN_BASELINE_STEPS * baseline_batch, CANDIDATE_STEPS * batch)
    return samples, samples // WINDOW_PARTS


def largest_batch(baseline_batch: int, baseline_rate: float, run_s: float) -> int:
    """The largest batch whose shortest run (CANDIDATE_STEPS of it) the baseline trains in `run_s` at its trial's
    rate; never under the baseline's own. A larger one's run would outlast the check's share (docs/parity.md,
    "Within a time bound").

    >>> largest_batch(64, baseline_rate=2000.0, run_s=2.25)  # 4,500 samples: 562 of them 8 times
    562
    >>> largest_batch(256, baseline_rate=1000.0, run_s=18.0)
    2250
    """
    return max(baseline_batch, int(run_s * baseline_rate) // CANDIDATE_STEPS)


def run_seconds(budget_s: float | None) -> float:
    """How long the baseline's run may take: PARITY_BASELINE_S, or less when the check's budget is smaller.

    >>> run_seconds(72.0)  # 15% of the default 8-minute search
    18.0
    """
    return PARITY_BASELINE_S if budget_s is None else min(PARITY_BASELINE_S, budget_s / RUNS_IN_SHARE)


def family(baseline: Config, candidate: Config) -> str:
    """Which tolerance applies: the loosest family among the knobs that differ."""
    if candidate.batch_size != baseline.batch_size:
        return "batch_size"
    if any(getattr(candidate, k) != getattr(baseline, k) for k in NUMERICS_KNOBS):
        return "numerics"
    return "loader"


@dataclasses.dataclass(frozen=True)
class ParityVerdict:
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
    # False: the baseline learned too little to judge by (MIN_PROGRESS); only a config with its math may pass.
    conclusive: bool = True
    lr_rule: str | None = None  # the rule `lr` came from (config.LR_RULES), when the search named one
    lr_reason: str | None = None  # why that rule: the optimizer's, --lr-scaling, or a bolder rate that failed
    # decode = gpu: whether its images matched the host pipeline's (autotune.parity.inputs), and how far apart
    inputs_passed: bool | None = None
    inputs_distance: float | None = None
    inputs_host_distance: float | None = None  # the host pipeline drawn twice: the noise level
    # amp and compile at the baseline's batch, judged with no run: whether its gradients' error was within the
    # batch's own noise (autotune.parity.numerics), and that error as a share of the noise
    numerics_passed: bool | None = None
    numerics_ratio: float | None = None
    # bucketing on one side only: the training loss over the window averages other batches (``compare``), so the
    # verdict is the probe set's alone, and the training loss's deviation is shown, not judged
    probe_only: bool = False

    @property
    def word(self) -> str:
        if self.passed:
            return "pass"
        return "REJECT" if self.conclusive else "inconclusive"

    def summary(self) -> str:
        """One line: the decision and its numbers."""
        if self.deviation is None or self.probe_deviation is None:
            return f"{self.word:<6}  {self.reason}"
        line = (
            f"{self.word:<6}  deviation {self.deviation:+.1%}, probe {self.probe_deviation:+.1%} "
            f"(tolerance ±{self.tolerance:.0%}, {self.family}): loss {self.loss:.4g} vs {self.baseline_loss:.4g}, "
            f"probe {self.probe_loss:.4g} vs {self.baseline_probe_loss:.4g} at {self.samples:,} samples "
            f"from {self.initial_loss:.4g}; lr {self.lr:g}"
        )
        if self.lr_rule is not None:
            line += f" ({self.lr_rule})"
        if self.probe_only:
            line += f"; judged by the probe alone: {BUCKETED_WINDOW}"
        return line if self.conclusive else f"{line}; {self.reason}"

    def as_record(self) -> dict[str, Any]:
        """Plain data for the study and the tuned file: finite numbers only, nothing absent as None."""
        record: dict[str, Any] = {}
        for key, value in dataclasses.asdict(self).items():
            if value is None or (isinstance(value, float) and not math.isfinite(value)):
                continue
            record[key] = round(value, 6) if isinstance(value, float) else value
        return record


def baseline_diverged(run: ParityRun) -> str:
    """Why a baseline run whose training diverged (or whose probe loss was no number before training) ends the check:
    nothing can be judged against it, and the fault is the workload's own, not any config's."""
    what = run.diverged() or f"probe loss was {nonfinite(run.initial_loss)} before training"
    return (f"the baseline's {what}: the workload's own settings diverge; fix the workload (its learning rate, its "
            f"data)")


def deviation(initial: float, baseline: float, candidate: float, floor: float = PROGRESS_FLOOR) -> float:
    """How far `candidate`'s loss is from `baseline`'s, in units of what the baseline learned or has left.

    A candidate above the baseline (it learned less) is measured against the
    smaller of the baseline's progress (``initial - baseline``) and its remaining
    loss (``baseline``): on a plateau a small shortfall is a large share of the
    progress, and near convergence a loss 40 times the baseline's is a large
    share of what is left. A candidate below the baseline (it learned more) is
    measured against the progress alone: learning much faster than the baseline
    is a different run (a memorised batch), converging a little further is not.
    The unit is at least `floor` of ``initial`` (``unit_floor``).

    >>> round(deviation(2.30, 2.26, 2.30), 2)  # no progress where the baseline made 0.04
    1.0
    """
    progress = initial - baseline
    unit = min(progress, baseline) if candidate > baseline else progress
    return (candidate - baseline) / max(unit, floor * abs(initial))


def unit_floor(baseline: ParityRun, samples: int, window: int) -> float:
    """The least unit deviations from `baseline` are measured in, as a share of its initial loss: PROGRESS_FLOOR, or
    less where it learned less than that but clearly above its noise (``autotune.parity.signal``). Held at the 1%
    floor, a candidate that learned half what such a baseline learned would pass (docs/parity.md, "A slow learner").
    """
    learned = progress(baseline, samples, window)
    if learned < PROGRESS_FLOOR and signal.learned_clearly(baseline, samples, window):
        return learned
    return PROGRESS_FLOOR


def compare(baseline: ParityRun, candidate: ParityRun, family_name: str, samples: int, window: int,
            probe_only: bool = False) -> ParityVerdict:
    """Judge `candidate` against `baseline` at `samples` seen, over the last `window` of them.

    `probe_only` (bucketing on one side, ``window_comparable``): the training loss over the window is no like-for-like
    measure, and the probe set's loss alone decides; both deviations are stated.
    """
    tolerance = TOLERANCES[family_name]
    numbers: dict[str, Any] = dict(
        family=family_name,
        tolerance=tolerance,
        samples=samples,
        window=window,
        lr=candidate.lr,
        baseline_lr=baseline.lr,
        run_s=round(candidate.seconds, 3),
    )
    if baseline.diverged() is not None or not math.isfinite(baseline.initial_loss):
        raise ParityError(baseline_diverged(baseline))
    if baseline.samples < samples or candidate.samples < samples:
        raise ValueError(
            f"both runs must reach {samples:,} samples, but got baseline {baseline.samples:,}, "
            f"candidate {candidate.samples:,}."
        )
    diverged = candidate.diverged()
    if diverged is not None:  # a run that diverged trains like nothing: rejected, whatever its other numbers
        bad = candidate.first_nonfinite()
        after = f" ({bad[1]:,} samples in)" if bad is not None else ""
        return ParityVerdict(False, **numbers, reason=f"its {diverged}{after}")
    l0 = baseline.initial_loss
    numbers["initial_loss"] = l0
    if not math.isclose(candidate.initial_loss, l0, rel_tol=INITIAL_RTOL):
        return ParityVerdict(
            False,
            **numbers,
            reason=(
                f"not the same start: the untrained model's probe loss is {candidate.initial_loss:.6f}, "
                f"the baseline's {l0:.6f} (same weights and data agree within {INITIAL_RTOL:.0e})"
            ),
        )
    lo = samples - window
    numbers.update(
        loss=candidate.window_loss(lo, samples),
        baseline_loss=baseline.window_loss(lo, samples),
        probe_loss=candidate.final_loss,
        baseline_probe_loss=baseline.final_loss,
    )
    floor = unit_floor(baseline, samples, window)
    numbers["deviation"] = deviation(l0, numbers["baseline_loss"], numbers["loss"], floor)
    numbers["probe_deviation"] = deviation(l0, baseline.final_loss, candidate.final_loss, floor)
    passed = (probe_only or abs(numbers["deviation"]) <= tolerance) and abs(numbers["probe_deviation"]) <= tolerance
    return ParityVerdict(passed, **numbers, probe_only=probe_only)


# Why a bucketed run's training loss is not compared: each batch's loss is the mean over its own tokens, and batches of
# similar length weight a window's samples otherwise than mixed ones do. On text_transformer (batch 32, one H200) the
# bucketed run's window read +11.1% over the baseline's while its probe loss read +0.2%.
BUCKETED_WINDOW = "bucketing makes batches of similar length, whose losses weight the window's samples otherwise"


def window_comparable(baseline: Config, candidate: Config) -> bool:
    """Whether the two runs' training losses over a window measure the same thing: not where one buckets by length."""
    return baseline.bucketing == candidate.bucketing


def check(runner: Any, baseline: Config, baseline_lr: float, candidate: Config, lr: float) -> ParityVerdict:
    """Train both configs in this process and compare them: the one-call form of the check.

    `runner` is a ``Runner`` (or anything with its ``build`` and ``dataset``).

    For example, ``check(runner, Config(batch_size=128), 0.01, Config(batch_size=8192), 0.01).passed``
    is False for mnist_cnn: the unscaled learning rate learns too little.
    """
    from autotune.parity.run import probe, train

    samples, window = run_length(baseline.batch_size, candidate.batch_size)
    workload = runner.workload
    probe_set = probe(runner.dataset, workload.collate_fn)
    base = train(runner.build, baseline, baseline_lr, samples, probe_set, baseline.batch_size, workload.count)
    run = train(runner.build, candidate, lr, samples, probe_set, baseline.batch_size, workload.count)
    return compare(base, run, family(baseline, candidate), samples, window,
                   probe_only=not window_comparable(baseline, candidate))


# A stream's samples come interleaved from its workers: on a stream whose own order is the same every pass, another
# worker count is another data order, judged by a training run as bucketing's order is (docs/streams.md).
STREAM_SAME_MATH_KNOBS = tuple(k for k in SAME_MATH_KNOBS if k != "num_workers")


def same_math_knobs(workers_set_order: bool) -> tuple[str, ...]:
    """The knobs that keep the baseline's arithmetic and data order: where the worker count sets the order
    (``DataFacts.workers_set_order``), it is not one."""
    return STREAM_SAME_MATH_KNOBS if workers_set_order else SAME_MATH_KNOBS


def changes_math(baseline: Config, candidate: Config, same: tuple[str, ...] = SAME_MATH_KNOBS) -> list[str]:
    """The knobs in which `candidate` trains with other arithmetic (or data order) than `baseline`: outside `same`."""
    return [k for k in baseline.as_dict() if k not in same and getattr(candidate, k) != getattr(baseline, k)]


def progress(run: ParityRun, samples: int, window: int) -> float:
    """What a run learned, as a share of its initial loss: the smallest of its window's drop, its probe's drop and,
    for (input, target) samples, how far its probe loss rises when the probe's targets are shuffled.

    The window is the training loss on batches before the step trained on them, and
    the probe a fixed sample of the data set: both must fall for learning. But a
    classifier first learns how the targets are spread (ResNet-50 from 7.11 to 6.89
    in 18,000 ImageNet samples, which is ln 1000 = 6.91: guessing evenly) before it
    learns anything from its inputs; only the third measure tells the two apart.
    """
    learned = min(m.drop for m in signal.measures(run, samples, window))
    return learned / abs(run.initial_loss) if run.initial_loss else 0.0


def conclusive(baseline: ParityRun, samples: int, window: int) -> bool:
    """The baseline learned enough in the run for deviations from it to mean anything: MIN_PROGRESS of its initial
    loss, or less that its measures show clearly above their noise (``autotune.parity.signal``).

    >>> conclusive(ParityRun(16, 0.05, 1.391, 1.386, (8192,), (1.387,), True, 0.7), 8192, 2048)  # random labels
    False
    """
    return progress(baseline, samples, window) >= MIN_PROGRESS or signal.learned_clearly(baseline, samples, window)


def numerics(config: Config, ordering: tuple[str, ...] = ()) -> tuple[Any, ...]:
    # Loader knobs change speed, not the samples or their order: configs equal here train alike. The loader knobs in
    # `ordering` change the order (a stream's worker count, `same_math_knobs`): they count.
    return tuple(v for k, v in config.as_dict().items() if k not in LOADER_KNOBS or k in ordering)


def clearly_too_far(verdict: ParityVerdict) -> bool:
    """A batch-size rejection that no numerics knob can undo: beyond its tolerance by more than numerics may move it."""
    worst = max(abs(verdict.deviation or 0.0), abs(verdict.probe_deviation or 0.0))
    return verdict.family == "batch_size" and worst > TOLERANCES["batch_size"] + TOLERANCES["numerics"]
