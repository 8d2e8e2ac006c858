"""The training step a config describes: eager, or captured whole in a CUDA graph.

Moves the batch to the device, applies channels_last and autocast, and steps
the optimizer (through a GradScaler under fp16). A batch is any nested
structure (``autotune.batch``); its loss is the workload's
``compute_loss(model, batch)``, or ``loss_fn(model(x), y)`` for an ``(x, y)``
batch. The same object serves the trials and the user's training code
(``autotune.tuned.api.tuned_step``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from autotune import batch as batches
from autotune.config import Config

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
GRAPH_WARMUP_STEPS = 3  # eager steps on a side stream before capture, as torch.cuda.graphs asks

ComputeLoss = Callable[[nn.Module, Any], torch.Tensor]


def pair_loss(loss_fn: Callable) -> ComputeLoss:
    """``compute_loss`` for an ``(x, y)`` batch: ``loss_fn(model(x), y)``."""

    def compute_loss(model: nn.Module, batch: Any) -> torch.Tensor:
        if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
            raise batches.BatchError(
                f"a batch must be (input, target) for build_loss()(model(input), target), but got a "
                f"{type(batch).__name__}{f' of {len(batch)}' if isinstance(batch, (tuple, list)) else ''}; "
                "declare compute_loss(model, batch) in the workload"
            )
        x, y = batch
        return loss_fn(model(x), y)

    return compute_loss


class Step:
    """``loss = step(batch)``: one training step under a config's loop knobs.

    Moves the batch to the device (non-blocking when pinned), applies channels_last
    and autocast, and steps the optimizer (through a GradScaler under fp16). With
    ``cuda_graph`` the whole step is captured once, after a side-stream warm-up, and
    replayed with the batch copied into static buffers; a batch of another signature
    (an epoch's last, short batch) runs eagerly on the same parameters and optimizer.
    It returns the loss as a fresh tensor (a graph's own output is overwritten by the
    next replay) without synchronising the host. ``step(x, y)`` is ``step((x, y))``.

    For example::

        step = Step(model, nn.CrossEntropyLoss(), optimizer, config, device)
        for x, y in loader:
            loss = step(x, y)

        step = Step(model, None, optimizer, config, device, compute_loss=lambda m, b: m(**b).loss)
        for batch in loader:
            loss = step(batch)
    """

    def __init__(
        self,
        model: nn.Module,
        loss_fn: Callable | None,
        optimizer: torch.optim.Optimizer,
        config: Config,
        device: torch.device,
        compute_loss: ComputeLoss | None = None,
    ) -> None:
        if compute_loss is None and loss_fn is None:
            raise ValueError("a step needs loss_fn (for (x, y) batches) or compute_loss(model, batch)")
        self.model, self.loss_fn, self.optimizer, self.config = model, loss_fn, optimizer, config
        self.compute_loss: ComputeLoss = compute_loss or pair_loss(loss_fn)  # type: ignore[arg-type]
        self.device = device
        self.non_blocking = config.pin_memory or config.placement == "device"
        self.memory_format = torch.channels_last if config.channels_last else torch.contiguous_format
        self.amp_dtype = AMP_DTYPES.get(config.amp)
        self.scaler = torch.amp.GradScaler(device.type) if config.amp == "fp16" else None
        if device.type == "cuda":
            torch.backends.cudnn.benchmark = config.cudnn_benchmark
        model.to(device=device, memory_format=self.memory_format)
        model.train()
        self.use_graph = config.cuda_graph and device.type == "cuda"
        if self.use_graph:
            for group in optimizer.param_groups:
                if "capturable" in group:  # Adam-style optimizers keep their step count on the device
                    group["capturable"] = True
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static: Any = None  # the captured batch's buffers
        self.static_signature: batches.Signature | None = None
        self.static_loss: torch.Tensor | None = None
        self.calls = 0
        self.capture_s = 0.0  # one-time cost of the capture, reported with the trial

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def loss(self, batch: Any) -> torch.Tensor:
        """The loss of a batch already on the device, with no autocast and no update: for evaluation."""
        return self.compute_loss(self.model, batch)

    def gradient(self, batch: Any) -> list[torch.Tensor]:
        """Each parameter's gradient of the loss of one batch already on the device, at the current weights, under
        this step's numerics (autocast, memory format, fp16's loss scale); no update. What the numerics check
        compares (``autotune.parity.gradients``).

        Under fp16 the loss is scaled as the step scales it and the gradient unscaled after; while the scaled
        gradient overflows, the scale is halved and the batch run again, as GradScaler backs off over steps, from
        the same random state (the same dropout masks). Every parameter's gradient is cleared before and after,
        not only the optimizer's.
        """
        scale = self.scaler.get_scale() if self.scaler is not None else 1.0
        cuda = self.device.type == "cuda"
        cpu_state = torch.get_rng_state()
        cuda_state = torch.cuda.get_rng_state(self.device) if cuda else None
        while True:
            torch.set_rng_state(cpu_state)
            if cuda_state is not None:
                torch.cuda.set_rng_state(cuda_state, self.device)
            self.model.zero_grad(set_to_none=True)
            with self._autocast():
                loss = self.compute_loss(self.model, batch)
            (loss * scale).backward()
            grads = [torch.zeros_like(p) if p.grad is None else p.grad / scale for p in self.model.parameters()]
            if self.scaler is None or scale <= 1.0 or all(bool(torch.isfinite(g).all()) for g in grads):
                self.model.zero_grad(set_to_none=True)
                return grads
            scale /= 2

    def _forward_backward(self, batch: Any) -> torch.Tensor:
        with self._autocast():
            loss = self.compute_loss(self.model, batch)
        (self.scaler.scale(loss) if self.scaler else loss).backward()
        return loss

    def _optimizer_step(self) -> None:
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()

    def _eager(self, batch: Any, set_to_none: bool = True) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=set_to_none)
        loss = self._forward_backward(batch)
        self._optimizer_step()
        return loss.detach()

    def to_device(self, *batch: Any) -> Any:
        """The batch on the step's device, in its memory format (non-blocking when pinned)."""
        return batches.to_device(
            _one(batch), self.device, self.non_blocking, self.memory_format is torch.channels_last
        )

    def __call__(self, *batch: Any) -> torch.Tensor:
        batch = _one(batch)
        if not self.use_graph:
            return self._eager(self.to_device(batch))
        signature = batches.signature(batch)
        if self.static is not None and signature != self.static_signature:
            # Zero the captured gradient buffers in place: the graph and the scaler keep using them.
            return self._eager(self.to_device(batch), set_to_none=self.graph is None)
        if self.static is None:
            self.static = batches.empty_like(batch, self.device, self.memory_format is torch.channels_last)
            self.static_signature = signature
        batches.copy_into(self.static, batch, non_blocking=self.non_blocking)
        if self.calls < GRAPH_WARMUP_STEPS:
            self.calls += 1
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                loss = self._eager(self.static)
            torch.cuda.current_stream(self.device).wait_stream(side)
            return loss
        if self.graph is None:
            self._capture()
        assert self.graph is not None and self.static_loss is not None
        self.graph.replay()
        if self.scaler is not None:
            # The scaler's inf check reads a flag on the host; it stays outside the graph.
            self._optimizer_step()
        # A copy: the static loss is overwritten by the next replay, and callers may keep losses.
        return self.static_loss.clone()

    def _capture(self) -> None:
        start = time.perf_counter()
        self.graph = torch.cuda.CUDAGraph()
        self.optimizer.zero_grad(set_to_none=True)  # gradients are then allocated from the graph's pool
        assert self.static is not None
        # thread_local: DataLoader's pin-memory thread keeps calling CUDA while we capture; under the
        # default ("global") mode its calls invalidate the capture ("operation failed due to a previous
        # error during capture", seen on an H200 with pinned, multi-worker loaders).
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            loss = self._forward_backward(self.static)
            if self.scaler is None:
                self.optimizer.step()
            self.static_loss = loss.detach()
        torch.cuda.synchronize(self.device)
        self.capture_s = time.perf_counter() - start


def _one(args: tuple[Any, ...]) -> Any:
    """``step(batch)`` and ``step(x, y)`` alike: one argument is the batch, several make a tuple."""
    if not args:
        raise TypeError("a step takes a batch: step(batch), or step(x, y) for an (input, target) pair")
    return args[0] if len(args) == 1 else args
