"""The training step a config describes: eager, or captured whole in a CUDA graph.

Moves the batch to the device, applies channels_last and autocast, and steps
the optimizer (through a GradScaler under fp16). A batch is any nested
structure (``autotune.batch``); its loss is the workload's
``compute_loss(model, batch)``, or ``loss_fn(model(x), y)`` for an ``(x, y)``
batch. The same object serves the trials and the user's training code
(``autotune.tuned.api.tuned_step``).

Its parts, each in a module of its own: the checks it makes when built
(``hooks``), the update after backward (``update``), the CUDA graph's capture
and replay (``graph``), and the rates a graph captured as numbers (``recapture``).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from autotune import batch as batches
from autotune.config import Config
from autotune.loop import compiled, update
from autotune.loop.graph import GRAPH_WARMUP_STEPS, GraphOffWarning, RecaptureWarning, StepGraph
from autotune.loop.hooks import StepOptions, check_placed, device_lrs, graph_off_reason
from autotune.loop.recapture import RECAPTURE_LIMIT

# The step's public names, some of them defined in the modules the step is made of (graph, hooks, recapture).
__all__ = ["AMP_DTYPES", "GRAPH_WARMUP_STEPS", "RECAPTURE_LIMIT", "GraphOffWarning", "RecaptureWarning", "Step",
           "StepOptions", "pair_loss"]

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

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
    next replay) without synchronising the host. ``step(x, y)`` is ``step((x, y))``. With
    ``compile`` the loss is computed by ``torch.compile`` (``autotune.loop.compiled``), inside the
    graph too where both are on.

    Hooks, between backward and the update and after it (docs/api.md, under tuned_step), given as keywords or as
    ``options=StepOptions(...)`` (``autotune.loop.hooks``; keywords win over it):

    - ``clip_grad_norm``: ``torch.nn.utils.clip_grad_norm_`` over the model's parameters
      before each update (after unscaling under fp16); the norm before clipping is
      ``step.grad_norm``, a device tensor. Captured in the graph.
    - ``accumulate``: each call is one micro-batch; its loss is divided by ``accumulate``
      and the update runs on every ``accumulate``-th call. Under a graph, one graph covers a
      micro-batch's forward and backward (gradients add up in place), another the update.
    - ``after_update()``: called after each update (an EMA of the weights, logging). It runs
      eagerly after the graph's replay, unless ``capture_after_update=True`` captures it into
      the graph (then its Python runs once, at capture: only device work is repeated).

    The learning rate: under a graph, Adam and AdamW read it from a device tensor that
    schedulers reach (``autotune.loop.lr``); another optimizer's graph is captured again
    whenever its rate changes (a ``RecaptureWarning`` says so once).

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
        *,
        options: StepOptions | None = None,
        **keywords: Any,
    ) -> None:
        """`keywords`: the fields of ``StepOptions`` (clip_grad_norm, accumulate, after_update, ...)."""
        if compute_loss is None and loss_fn is None:
            raise ValueError("a step needs loss_fn (for (x, y) batches) or compute_loss(model, batch)")
        self.options = options = StepOptions.given(options, keywords, "Step")
        self.model, self.loss_fn, self.optimizer, self.config = model, loss_fn, optimizer, config
        self.compute_loss: ComputeLoss = compute_loss or pair_loss(loss_fn)  # type: ignore[arg-type]
        self.eager_loss = self.compute_loss  # what a short batch runs under compile (`_loss_for`)
        self.compiled = compiled.compile_loss(self.compute_loss, config.compile)  # None: compile off
        if self.compiled is not None:
            self.compute_loss = self.compiled
        self.device = device
        self.non_blocking = config.pin_memory or config.placement == "device"
        self.memory_format = torch.channels_last if config.channels_last else torch.contiguous_format
        self.amp_dtype = AMP_DTYPES.get(config.amp)
        self.scaler = torch.amp.GradScaler(device.type) if config.amp == "fp16" else None
        if device.type == "cuda" and options.set_cudnn_benchmark:
            torch.backends.cudnn.benchmark = config.cudnn_benchmark  # process-wide: every model's convolutions
        if options.move_model:
            model.to(device=device, memory_format=self.memory_format)
        else:
            check_placed(model, device)
        model.train()
        self.graph_reason = graph_off_reason(config, device, optimizer, options.set_capturable)
        self.use_graph = self.graph_reason is None and config.cuda_graph
        if config.cuda_graph and self.graph_reason is not None and device.type == "cuda":
            warnings.warn(f"the step runs eagerly: {self.graph_reason}", GraphOffWarning, stacklevel=3)
        if self.use_graph:
            for group in optimizer.param_groups:
                if "capturable" in group:  # Adam-style optimizers keep their step count on the device
                    group["capturable"] = True
        self.lrs = device_lrs(optimizer, device, options.tensor_lr, self.use_graph)
        self.grad_norm: torch.Tensor | None = None  # the last update's gradient norm before clipping
        self.micro = 0  # micro-batches since the last update, eager or replayed
        self.graphed = StepGraph(optimizer)  # the graphs and their buffers, used while use_graph holds

    # The hooks, read on the step (its graph, trial reports, tests): the options' own values.

    @property
    def clip_grad_norm(self) -> float | None:
        return self.options.clip_grad_norm

    @property
    def accumulate(self) -> int:
        return self.options.accumulate

    @property
    def after_update(self) -> Callable[[], None] | None:
        return self.options.after_update

    @property
    def capture_after_update(self) -> bool:
        return self.options.capture_after_update

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

    # _forward_backward, _update and _eager are the step's own work, which its graph (autotune.loop.graph) runs and
    # captures too: one definition for both paths.

    def _forward_backward(self, batch: Any) -> torch.Tensor:
        with self._autocast():
            loss = self._loss_for(batch)(self.model, batch)
        update.backward(loss, self.accumulate, self.scaler)
        return loss

    def _loss_for(self, batch: Any) -> ComputeLoss:
        """The loss a batch runs: the compiled one, but eagerly for a batch short of the config's batch size.

        A short batch is an epoch's last, or under a stream each worker's last of each pass (15 workers: 15 a pass,
        of as many sizes as their shares differ). Compiled, a new size is a recompile (Dynamo makes the batch dimension
        dynamic and compiles again), a one-off of the order of the first compile, paid in the middle of a pass and of
        any measurement that crosses one; eagerly it costs about a batch's step. The math is the same either way, as
        the CUDA graph runs such a batch eagerly too (``autotune.loop.graph``).
        """
        if self.compiled is None:
            return self.compute_loss
        try:
            short = batches.samples_in(batch) < self.config.batch_size
        except batches.BatchError:  # no leading batch dimension to read: the compiled loss, as for any batch
            short = False
        return self.eager_loss if short else self.compute_loss

    def _update(self, with_after_update: bool = True) -> None:
        """Clip, step, and the user's after_update: eagerly, or inside a graph's capture."""
        if self.clip_grad_norm is not None:
            self.grad_norm = update.clip(self.model, self.optimizer, self.clip_grad_norm, self.scaler)
        update.optimizer_step(self.optimizer, self.scaler)
        if self.after_update is not None and with_after_update:
            self.after_update()

    def _eager(self, batch: Any, set_to_none: bool = True) -> torch.Tensor:
        """One micro-batch eagerly: gradients cleared at a cycle's start, the update at its end."""
        if self.lrs is not None:
            self.lrs.sync()
        if self.micro == 0:
            self.optimizer.zero_grad(set_to_none=set_to_none)
        loss = self._forward_backward(batch)
        self.micro += 1
        if self.micro == self.accumulate:
            self.micro = 0
            self._update()
        return loss.detach()

    def to_device(self, *batch: Any) -> Any:
        """The batch on the step's device, in its memory format (non-blocking when pinned)."""
        return batches.to_device(
            _one(batch), self.device, self.non_blocking, self.memory_format is torch.channels_last
        )

    @property
    def compile_s(self) -> float:
        """One-time cost of compiling the step (its first steps, and any recompilation), reported with the trial."""
        return 0.0 if self.compiled is None else self.compiled.compile_s

    def __call__(self, *batch: Any) -> torch.Tensor:
        if self.compiled is not None:  # its compile time counted, its failures named
            return self.compiled.timed(self._call, _one(batch))
        return self._call(_one(batch))

    def _call(self, batch: Any) -> torch.Tensor:
        if not self.use_graph:
            return self._eager(self.to_device(batch))
        return self.graphed(self, batch)

    # The graph's state, read on the step (trial reports, tests, docs/api.md).

    @property
    def graph(self) -> torch.cuda.CUDAGraph | None:
        """The captured step (with accumulate > 1: a micro-batch's forward and backward); None until captured."""
        return self.graphed.graph

    @property
    def update_graph(self) -> torch.cuda.CUDAGraph | None:
        """With accumulate > 1, the captured update, apart; None until captured, and without accumulation."""
        return self.graphed.update_graph

    @property
    def static(self) -> Any:
        """The captured batch's buffers, which each graphed step copies its batch into."""
        return self.graphed.static

    @property
    def captures(self) -> int:
        """Captures so far: the first, and one again at each change of a rate the graph reads as a number."""
        return self.graphed.captures

    @property
    def recaptures(self) -> int:
        """Captures again after the learning rate changed (``autotune.loop.recapture``)."""
        return self.graphed.rates.recaptures

    @property
    def capture_s(self) -> float:
        """One-time cost of the capture, reported with the trial."""
        return self.graphed.capture_s


def _one(args: tuple[Any, ...]) -> Any:
    """``step(batch)`` and ``step(x, y)`` alike: one argument is the batch, several make a tuple."""
    if not args:
        raise TypeError("a step takes a batch: step(batch), or step(x, y) for an (input, target) pair")
    return args[0] if len(args) == 1 else args
