"""A step captured whole in CUDA graphs and replayed: the warm-up, the captures, the replays, the eager runs beside.

The step (forward, backward, update) is captured once, after ``GRAPH_WARMUP_STEPS`` eager steps on a side
stream, and replayed with each batch copied into static buffers. With ``accumulate > 1`` there are two
graphs: one for a micro-batch's forward and backward (gradients add up in place), one for the update. A
batch of another signature (an epoch's last, short batch) runs eagerly on the same parameters, optimizer
and gradient buffers. Under fp16 the update runs eagerly after each replay: GradScaler reads its inf check
on the host.

``StepGraph`` holds the graphs' state apart from the ``Step`` (``autotune.loop.step``) so the eager step
reads on its own. It captures the step's own forward, backward and update, and reads the step's settings
(device, hooks, scaler, micro-batch count) as they are at each call, which is why each method takes the
step rather than keeping it: a step that held a graph that held the step would be a reference cycle, and
its graphs' memory would wait for the garbage collector instead of going with the last reference. What it
reads and runs of the step is ``GraphedStep``; ``Step`` is one, and this module never imports it (the step
imports the graph).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any, Protocol

import torch

from autotune import batch as batches
from autotune.loop.lr import DeviceLr
from autotune.loop.recapture import CapturedRates

GRAPH_WARMUP_STEPS = 3  # eager steps on a side stream before capture, as torch.cuda.graphs asks
# stacklevel for the warnings of StepGraph._follow_lr: past StepGraph.__call__, Step._call and Step.__call__ to the
# user's `step(batch)` (under accumulation _replay_micro is one frame more, and the warning names Step.__call__).
_USER_FRAME = 5


class GraphOffWarning(UserWarning):
    """The profile asks for a CUDA graph, but this step runs eagerly; the message says why."""


class RecaptureWarning(UserWarning):
    """The learning rate changed under a graph that reads it as a number: the step captures the graph again."""


class GraphedStep(Protocol):
    """What a ``StepGraph`` reads and runs of its step (``autotune.loop.step.Step`` is one): the settings as they
    are at each call, the step's own eager work, and the state the graph moves on (``micro``, ``use_graph``)."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    device: torch.device
    memory_format: torch.memory_format
    non_blocking: bool
    scaler: torch.amp.GradScaler | None
    lrs: DeviceLr | None
    micro: int  # micro-batches since the last update
    use_graph: bool
    graph_reason: str | None

    @property
    def accumulate(self) -> int: ...

    @property
    def after_update(self) -> Callable[[], None] | None: ...

    @property
    def capture_after_update(self) -> bool: ...

    def to_device(self, *batch: Any) -> Any: ...

    def _forward_backward(self, batch: Any) -> torch.Tensor: ...

    def _update(self, with_after_update: bool = True) -> None: ...

    def _eager(self, batch: Any, set_to_none: bool = True) -> torch.Tensor: ...


class StepGraph:
    """``loss = graph(step, batch)``: one step of `step` through its CUDA graphs, captured at the first call
    past the warm-up.

    For example (what ``Step`` does while its ``use_graph`` holds)::

        graph = StepGraph(optimizer)
        loss = graph(step, batch)  # eager on a side stream, then a capture, then replays
    """

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.graph: torch.cuda.CUDAGraph | None = None
        self.update_graph: torch.cuda.CUDAGraph | None = None  # with accumulate > 1: the update, apart
        self.static: Any = None  # the captured batch's buffers
        self.static_signature: batches.Signature | None = None
        self.static_loss: torch.Tensor | None = None
        self.calls = 0  # warm-up steps run
        self.captures = 0
        self.rates = CapturedRates(optimizer)  # captures again after the learning rate changed
        self.capture_s = 0.0  # one-time cost of the capture, reported with the trial

    def __call__(self, step: GraphedStep, batch: Any) -> torch.Tensor:
        signature = batches.signature(batch)
        if self.static is not None and signature != self.static_signature:
            if self.graph is not None and step.accumulate > 1:
                return self._eager_beside_graphs(step, step.to_device(batch))
            # Zero the captured gradient buffers in place: the graph and the scaler keep using them.
            return step._eager(step.to_device(batch), set_to_none=self.graph is None)
        if self.static is None:
            self.static = batches.empty_like(batch, step.device, step.memory_format is torch.channels_last)
            self.static_signature = signature
        batches.copy_into(self.static, batch, non_blocking=step.non_blocking)
        # Warm up on a side stream; with accumulation, capture only at a cycle's start (gradients all zero).
        if self.calls < GRAPH_WARMUP_STEPS or (self.graph is None and step.micro != 0):
            self.calls += 1
            side = torch.cuda.Stream(step.device)
            side.wait_stream(torch.cuda.current_stream(step.device))
            with torch.cuda.stream(side):
                loss = step._eager(self.static)
            torch.cuda.current_stream(step.device).wait_stream(side)
            return loss
        if step.lrs is not None:
            step.lrs.sync()
        if self.graph is None:
            self._capture(step)
        if step.accumulate > 1:
            return self._replay_micro(step)
        if not self._follow_lr(step):
            return step._eager(self.static)  # the graph is given up: this step and the next run eagerly
        assert self.graph is not None and self.static_loss is not None
        self.graph.replay()
        self._after_replay(step)
        # A copy: the static loss is overwritten by the next replay, and callers may keep losses.
        return self.static_loss.clone()

    def _after_replay(self, step: GraphedStep) -> None:
        """What an update does outside the graph: fp16's whole update, or the user's after_update."""
        if step.scaler is not None:
            # The scaler's inf check reads a flag on the host; it stays outside the graph.
            step._update()
        elif step.after_update is not None and not step.capture_after_update:
            step.after_update()

    def _replay_micro(self, step: GraphedStep) -> torch.Tensor:
        assert self.graph is not None and self.static_loss is not None
        self.graph.replay()
        loss = self.static_loss.clone()
        step.micro += 1
        if step.micro == step.accumulate:
            step.micro = 0
            if step.scaler is None and self._follow_lr(step):
                assert self.update_graph is not None
                self.update_graph.replay()
                if step.after_update is not None and not step.capture_after_update:
                    step.after_update()
            else:  # fp16 (the scaler reads a host flag), or the graph given up: the update eagerly
                step._update()
                _zero_in_place(step.model)
        return loss

    def _eager_beside_graphs(self, step: GraphedStep, batch: Any) -> torch.Tensor:
        """A micro-batch of another signature under accumulation: it adds into the graphs' gradient buffers."""
        loss = step._forward_backward(batch)
        step.micro += 1
        if step.micro == step.accumulate:
            step.micro = 0
            step._update()
            _zero_in_place(step.model)
        return loss.detach()

    def _follow_lr(self, step: GraphedStep) -> bool:
        """Before a captured update of an optimizer that reads its rate as a number: capture it again when the rate
        changed (``autotune.loop.recapture``). False when it changed too often (a per-step schedule): the graph is
        given up, the update runs eagerly from here on, and a GraphOffWarning says so."""
        if step.lrs is not None or step.scaler is not None:
            return True
        now = self.rates.changed()
        if now is None:
            return True
        if self.rates.exhausted:
            step.graph_reason = self.rates.why_eager()
            warnings.warn(
                f"the step runs eagerly from here on: {step.graph_reason}", GraphOffWarning, stacklevel=_USER_FRAME
            )
            step.use_graph, self.graph, self.update_graph = False, None, None
            return False
        if self.rates.recaptures == 1:
            warnings.warn(self.rates.why_again(now, self.capture_s), RecaptureWarning, stacklevel=_USER_FRAME)
        if step.accumulate > 1:
            self._capture_update(step)
        else:
            self._capture(step)
        return True

    def _capture(self, step: GraphedStep) -> None:
        start = time.perf_counter()
        assert self.static is not None
        if step.accumulate > 1:
            # Gradients stay allocated and add up in place across micro-batches; the update graph zeroes them.
            step.optimizer.zero_grad(set_to_none=False)
        else:
            step.optimizer.zero_grad(set_to_none=True)  # gradients are then allocated from the graph's pool
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: DataLoader's pin-memory thread keeps calling CUDA while we capture; under the
        # default ("global") mode its calls invalidate the capture ("operation failed due to a previous
        # error during capture", seen with pinned, multi-worker loaders).
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            loss = step._forward_backward(self.static)
            if step.scaler is None and step.accumulate == 1:
                step._update(with_after_update=step.capture_after_update)
            self.static_loss = loss.detach()
        if step.accumulate > 1 and step.scaler is None:
            self._capture_update(step, timed=False)
        self._captured(step, start)

    def _capture_update(self, step: GraphedStep, timed: bool = True) -> None:
        start = time.perf_counter()
        self.update_graph = torch.cuda.CUDAGraph()
        grads = [p.grad for p in step.model.parameters() if p.grad is not None]
        with torch.cuda.graph(self.update_graph, capture_error_mode="thread_local"):
            step._update(with_after_update=step.capture_after_update)
            torch._foreach_zero_(grads)  # the next cycle's micro-batches add into zeros
        if timed:
            self._captured(step, start)

    def _captured(self, step: GraphedStep, start: float) -> None:
        torch.cuda.synchronize(step.device)
        self.captures += 1
        self.rates.captured(as_numbers=step.lrs is None and step.scaler is None)
        if self.captures == 1:
            self.capture_s = time.perf_counter() - start


def _zero_in_place(model: torch.nn.Module) -> None:
    """Zero the gradients without freeing them: the graphs read and write these very buffers."""
    for p in model.parameters():
        if p.grad is not None:
            p.grad.zero_()
