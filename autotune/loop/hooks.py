"""What a step is asked beyond its config, and what it checks before it trains.

``StepOptions``: the hooks and the switches for what a step changes outside itself, one frozen object that
``Step`` (``autotune.loop.step``) and ``tuned_step`` (``autotune.tuned.api``) both take, checked once, when
made. Then the rules the step applies at construction, apart so each reads on its own: why graph capture is
off (said, never silent), which learning rates become device tensors (``autotune.loop.lr``), and that a model
the step must not move is already on its device.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from autotune.config import Config
from autotune.errors import AutotuneError
from autotune.loop.lr import TENSOR_LR_UNDER_GRAPH, DeviceLr, reads_tensor_lr_under_graph


class StepError(AutotuneError, ValueError):
    """A step given an argument it cannot take (``accumulate=0``, ``clip_grad_norm=-1``); the message names the
    value and the rule. Still a ``ValueError``, as it was."""


class StepTypeError(StepError, TypeError):
    """A step given an argument of the wrong kind (an ``after_update`` that is not callable); still a ``TypeError``."""


@dataclasses.dataclass(frozen=True)
class StepOptions:
    """How a step trains beyond its config, and what it may change outside itself (docs/api.md, under tuned_step).

    Made from the keyword arguments of ``Step`` and ``tuned_step``; a value the step cannot take is one error,
    raised here, that names the value and the rule.

    >>> StepOptions(clip_grad_norm=1.0, accumulate=4).accumulate
    4
    >>> options = StepOptions.given(StepOptions(accumulate=4), {"move_model": False}, "Step")
    >>> options.accumulate, options.move_model
    (4, False)
    """

    clip_grad_norm: float | None = None  # clip_grad_norm_ to this before each update; None: no clipping
    accumulate: int = 1  # micro-batches per update: the update runs on every accumulate-th call
    after_update: Callable[[], None] | None = None  # called after each update (an EMA, logging)
    capture_after_update: bool = False  # under a graph, after_update is captured: its Python runs once, at capture
    tensor_lr: bool | None = None  # device-tensor learning rates; None: for Adam/AdamW under a graph
    set_cudnn_benchmark: bool = True  # set torch.backends.cudnn.benchmark to the config's, process-wide
    move_model: bool = True  # move the model to the device and memory format; False: it must be there already
    set_capturable: bool = True  # under a graph, give Adam-style optimizers capturable=True

    def __post_init__(self) -> None:
        check_hooks(self.clip_grad_norm, self.accumulate, self.after_update, self.capture_after_update)

    @classmethod
    def given(cls, options: StepOptions | None, keywords: dict[str, Any], caller: str) -> StepOptions:
        """`options` (or the defaults) with the `keywords` a caller was given; an unknown keyword is a TypeError."""
        names = [field.name for field in dataclasses.fields(cls)]
        unknown = sorted(set(keywords) - set(names))
        if unknown:
            raise TypeError(f"{caller}() got an unexpected keyword argument {', '.join(map(repr, unknown))}; the "
                            f"step options are {', '.join(names)}")
        if options is None:
            return cls(**keywords)
        return dataclasses.replace(options, **keywords) if keywords else options


def check_hooks(
    clip_grad_norm: float | None, accumulate: int, after_update: Callable[[], None] | None, capture_after_update: bool
) -> None:
    """One error naming the value and the rule for a hook the step cannot take."""
    if clip_grad_norm is not None and (
        isinstance(clip_grad_norm, bool) or not isinstance(clip_grad_norm, (int, float))
        or not math.isfinite(clip_grad_norm) or clip_grad_norm <= 0
    ):
        raise StepError(f"`clip_grad_norm > 0` (a finite number, or None for no clipping) must hold, but got "
                        f"{clip_grad_norm=}.")
    if isinstance(accumulate, bool) or not isinstance(accumulate, int) or accumulate < 1:
        raise StepError(f"`accumulate >= 1` (micro-batches per update, an int) must hold, but got {accumulate=}.")
    if after_update is not None and not callable(after_update):
        raise StepTypeError(f"after_update must be a callable taking no arguments, but got {after_update=}.")
    if capture_after_update and after_update is None:
        raise StepError("capture_after_update=True captures after_update into the graph, but no after_update "
                        "is given (after_update=None).")


def graph_off_reason(
    config: Config, device: torch.device, optimizer: torch.optim.Optimizer, set_capturable: bool
) -> str | None:
    """Why this step cannot capture a CUDA graph, or None when it can (or the config does not ask for one)."""
    if not config.cuda_graph:
        return None
    if device.type != "cuda":
        return f"cuda_graph needs a CUDA device, but the step runs on {device}"
    keeps_on_host = [i for i, g in enumerate(optimizer.param_groups) if g.get("capturable") is False]
    if not set_capturable and keeps_on_host:
        return (f"{type(optimizer).__name__} counts its steps on the host unless capturable=True, and "
                f"set_capturable=False keeps param_groups {keeps_on_host} as they are")
    return None


def device_lrs(
    optimizer: torch.optim.Optimizer, device: torch.device, tensor_lr: bool | None, graphed: bool
) -> DeviceLr | None:
    """The device learning rates a step reads: on for Adam/AdamW under a graph unless `tensor_lr` says otherwise."""
    if tensor_lr is None:
        tensor_lr = graphed and reads_tensor_lr_under_graph(optimizer)
    if not tensor_lr:
        return None
    if graphed and not reads_tensor_lr_under_graph(optimizer):
        raise StepError(
            f"tensor_lr=True under a CUDA graph needs an optimizer that reads a tensor learning rate on the device "
            f"({', '.join(TENSOR_LR_UNDER_GRAPH)}), but got {type(optimizer).__name__}; leave tensor_lr unset, and "
            "the graph is captured again when the rate changes"
        )
    return DeviceLr(optimizer, device)


def check_placed(model: nn.Module, device: torch.device) -> None:
    elsewhere = sorted({str(p.device) for p in model.parameters() if p.device.type != device.type})
    if elsewhere:
        raise StepError(f"move_model=False keeps the model where it is, but its parameters are on {elsewhere}, "
                        f"not the step's device {device}; move it, or leave move_model=True")
