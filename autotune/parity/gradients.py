"""The numerics check, inside a trial process: a config's gradients against the baseline's.

amp changes the arithmetic of training, and compile the kernels and their
fusion. A short training run could judge them where the baseline learns
measurably in the check's time, but on a heavy model it costs more than the
check's share of the search, and where the baseline learns too little (ResNet-50 on ImageNet-class
data learns nothing from its inputs in the first minute) a run's deviations are
noise. This judges them without learning, by what every step is made of: the
gradient; at the baseline's batch it is the only judge of them
(``autotune.parity.check``). The baseline trains WARM_STEPS steps (fp32, its
own loader and rate); at those weights, on the same BATCHES batches of the
baseline's size, the baseline's step and the candidate's numerics (its autocast
dtype and loss scale, its memory format) each compute each batch's gradient.
``compare`` returns how far apart the two are, against how far the baseline's
gradients of two different batches are apart: the noise SGD trains through at
that batch size. ``autotune.parity.numerics`` judges the two numbers.

Why not at the initial weights: an untrained BatchNorm ResNet's gradient is
chaotic (most of its norm is the first convolution's, and any rounding moves it);
a few dozen steps of training settle it (docs/parity.md, "amp and compile", has
the ratios step by step).

It is a check of one point of training: an error that grows as training moves
on (logits that outgrow what bf16 resolves) is what a conclusive run catches.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from typing import Any

import torch

from autotune.config import Config
from autotune.parity.run import ORDER_SEED, Builder, own_order

BATCHES = 8  # batches of the baseline's size, each one's gradient computed by both numerics
WARM_STEPS = 50  # the baseline's steps before the gradients are compared: off the chaotic initial weights
SEED = 0  # seeds each batch's forward alike in both (dropout, stochastic layers)


def numerics_of(baseline: Config, candidate: Config) -> Config:
    """The baseline with `candidate`'s numerics: its autocast dtype, memory format and compiler (which changes
    kernels and fusion, so rounding, not the model).

    A graph replays the eager step's kernels, and the loader knobs and placement change no arithmetic; decode is
    judged by its images (``autotune.parity.images``). cuDNN's choice of kernels stays the baseline's: it is one
    flag for the whole process, so both steps must run under one setting. The batch size stays the baseline's: a
    new one is judged by a training run.
    """
    return dataclasses.replace(baseline, amp=candidate.amp, channels_last=candidate.channels_last,
                               compile=candidate.compile)


def _flat(grads: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([g.float().reshape(-1) for g in grads])  # reshape: the logical order, in any memory format


def train_steps(step: Any, loader: Any, steps: int) -> int:
    """Train `steps` steps through `loader`, epoch after epoch; returns how many (a loader with no batch raises)."""
    trained = 0
    while trained < steps:
        before = trained
        for batch in loader:
            step(batch)
            trained += 1
            if trained == steps:
                break
        if trained == before:
            raise ValueError("the loader yielded no batch")
    return trained


def compare(build: Builder, baseline: Config, candidate: Config, lr: float, batches: int = BATCHES,
            warm_steps: int = WARM_STEPS) -> dict[str, Any]:
    """The candidate's gradient error and the baseline's batch-to-batch noise, as squared norms (float).

    `error`: the mean over the batches of |g_candidate - g_baseline|^2; `noise`: the unbiased variance of one
    batch's baseline gradient about their mean (half the mean |g_i - g_j|^2 of two batches), sum over parameters;
    `signal`: the mean's squared norm. `finite`: every candidate gradient finite. All at the weights the baseline
    reached in `warm_steps` steps. `build` is ``Runner.build``.
    """
    start = time.perf_counter()
    loader, base_step, _ = build(baseline, lr)
    trained = train_steps(base_step, loader, warm_steps)
    own_order(loader, ORDER_SEED)
    host = list(itertools.islice(iter(loader), batches))
    if len(host) < 2:
        raise ValueError(f"the numerics check needs at least 2 batches of {baseline.batch_size}, but got {len(host)}")
    _, step, _ = build(numerics_of(baseline, candidate), lr)
    step.model.load_state_dict(base_step.model.state_dict())  # the trained weights, in the candidate's format
    # Running sums, not the gradients themselves: the check must fit wherever two models and a step fit.
    total: torch.Tensor | None = None
    squares = 0.0
    error = 0.0
    finite = True
    for i, batch in enumerate(host):
        torch.manual_seed(SEED + i)
        reference = _flat(base_step.gradient(base_step.to_device(batch)))
        torch.manual_seed(SEED + i)
        mine = _flat(step.gradient(step.to_device(batch)))
        finite = finite and bool(torch.isfinite(mine).all())
        error += float(torch.sum((mine - reference).square(), dtype=torch.float64)) if finite else float("inf")
        del mine
        reference = reference.double()  # the noise is a difference of two sums: kept exact in float64
        squares += float(reference.square().sum())
        total = reference if total is None else total.add_(reference)
        del reference
    assert total is not None
    signal = float((total / len(host)).square().sum())
    # sum |r_i - mean|^2 = sum |r_i|^2 - k |mean|^2, the unbiased variance of one batch's gradient
    noise = max(0.0, squares - len(host) * signal) / (len(host) - 1)
    return {
        "error": error / len(host),
        "noise": noise,
        "signal": signal,
        "finite": finite,
        "batches": len(host),
        "batch_size": baseline.batch_size,
        "warm_steps": trained,
        "seconds": time.perf_counter() - start,
    }
