"""The update after backward, under a step's hooks: accumulation's averaging, clipping, the optimizer step.

Functions of what they are given, with no state of their own, so that both paths of a ``Step``
(``autotune.loop.step``) run the same lines: the eager step calls them, and its CUDA graph
(``autotune.loop.graph``) captures those very calls. Each runs on device tensors with no host sync,
which is what lets a capture take it; GradScaler's step is the exception (it reads its inf check on the
host), so under fp16 the update runs eagerly after the graph's replay.
"""

from __future__ import annotations

import torch
from torch import nn


def backward(loss: torch.Tensor, accumulate: int, scaler: torch.amp.GradScaler | None) -> None:
    """Backward from one micro-batch's loss, divided by `accumulate` and scaled under fp16.

    >>> w = torch.ones(2, requires_grad=True)
    >>> backward((3 * w).sum(), accumulate=3, scaler=None)
    >>> w.grad
    tensor([1., 1.])
    """
    scaled = loss / accumulate if accumulate > 1 else loss  # the micro-batches' gradients average
    (scaler.scale(scaled) if scaler else scaled).backward()


def clip(
    model: nn.Module, optimizer: torch.optim.Optimizer, max_norm: float, scaler: torch.amp.GradScaler | None
) -> torch.Tensor:
    """``clip_grad_norm_`` over the model's parameters, after unscaling under fp16; the norm before clipping.

    >>> model = nn.Linear(2, 1, bias=False)
    >>> model.weight.grad = torch.tensor([[3.0, 4.0]])
    >>> clip(model, torch.optim.SGD(model.parameters(), lr=0.1), 1.0, scaler=None)
    tensor(5.)
    >>> model.weight.grad
    tensor([[0.6000, 0.8000]])
    """
    if scaler is not None:
        scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
    # foreach on device tensors, no error_if_nonfinite: no host sync, so it is captured with the step.
    return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)


def optimizer_step(optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None) -> None:
    """``optimizer.step()``, or under fp16 the scaler's step (skipped on an inf gradient) and its scale's update."""
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
