"""The compiled step: ``torch.compile`` of the workload's loss, its compile time counted, its failures named.

What is compiled is ``compute_loss(model, batch)``, the forward the step runs: one graph
holds the model and its loss (the loss's reduction fuses with the logits), and the model
stays the plain ``nn.Module`` the rest of autotune reads (its ``state_dict`` keys, its
parameters, ``train()``/``eval()``). AOTAutograd compiles the backward with it, at the first
backward. The optimizer step stays eager (its foreach kernels).

How it combines with ``cuda_graph``: the compiled step is captured whole by the step's own
graph code (``autotune.loop.graph``), optimizer step included, after its warm-up steps have
compiled it. ``default`` and ``max-autotune-no-cudagraphs`` launch Triton kernels that a
capture records like any other. ``reduce-overhead`` is not a value: its CUDA graph trees
capture the forward and the backward apart, with the optimizer step outside, which
``cuda_graph=on`` already does in one replay; and its own captures cannot run inside ours.
``benchmarks/compile_steps.py`` measures it beside compile + graph on a GPU.

Why ``fullgraph=True``: a step broken into several graphs returns to Python between them
(a guard check and a launch gap at each break, no fusion across it), and the break is in
the workload's code, where only its author can remove it. So a break fails the trial with
its line named (``autotune.study.failed.hopeless`` then stops trying compile on the workload),
rather than a slower compiled step being measured as if it were the compiler's best.

Failures become ``CompileError``, whose message is the trial's reason:
- a graph break: the line in the workload where Dynamo stopped, what it could not trace
  there, and how many breaks the step has in all (``torch._dynamo.explain``);
- recompilations up to Dynamo's ``recompile_limit`` (past it, Dynamo runs the function
  eagerly): the guard that failed last, and the advice (shapes that vary, or a value the
  step changes);
- a compiler error (``BackendCompilerFailed``: Inductor, Triton, a C compiler).
An out-of-memory error keeps its own reason (``autotune.trial.oom``).
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import torch
from torch import nn

from autotune.errors import AutotuneError

ComputeLoss = Callable[[nn.Module, Any], torch.Tensor]

# torch.compile's arguments for each value of the `compile` knob but "off" (autotune.config.COMPILE_CHOICES). Tests
# put a fake backend here ({"backend": fn}) to exercise everything but Inductor itself.
COMPILE_OPTIONS: dict[str, dict[str, Any]] = {
    "default": {"mode": "default"},
    "max-autotune-no-cudagraphs": {"mode": "max-autotune-no-cudagraphs"},
}
REASON = "compile:"  # how every reason of a compile failure starts; autotune.study.failed.hopeless keys on it
GRAPH_BREAK = "compile: graph break"
RECOMPILED = "compile: recompiled"
COMPILER_ERROR = "compile: compiler error"
WORKLOAD_MODULE_PREFIX = "autotune_workload_"  # autotune.workloads.contract imports each workload under this prefix
SHAPE_ADVICE = (
    "batches vary in shape: pad them to a few lengths (pad_multiple), group them by length (bucketing), "
    "or compile with dynamic=True; or leave compile off"
)
VALUE_ADVICE = (
    "the step reads a value that changes from step to step (a Python number, an attribute it sets on the model); "
    "keep it in a tensor or constant, or leave compile off"
)


class CompileError(AutotuneError, RuntimeError):
    """A compiled step that cannot run as compiled; the message is the trial's reason."""


class CompiledLoss:
    """``loss = compiled(model, batch)``: the workload's ``compute_loss`` under ``torch.compile``.

    ``timed(step, *args)`` runs one training step that calls it: the host seconds of steps that
    compiled (a first step, a recompilation) add up in ``compile_s``, and a failure of the compiler
    becomes a ``CompileError`` that names it. For example::

        compiled = CompiledLoss(compute_loss, "default")
        loss = compiled.timed(train_step, batch)  # train_step calls compiled(model, batch)
    """

    def __init__(self, compute_loss: ComputeLoss, mode: str, workload_files: Collection[Path] | None = None) -> None:
        if mode not in COMPILE_OPTIONS:
            raise ValueError(f"`mode` must be one of {tuple(COMPILE_OPTIONS)}, but got {mode!r}.")
        self.compute_loss, self.mode, self.workload_files = compute_loss, mode, workload_files
        self.fn = torch.compile(compute_loss, fullgraph=True, **COMPILE_OPTIONS[mode])
        self.compile_s = 0.0  # one-time cost: host seconds of the steps that compiled
        self.graphs_at_start = _graphs()
        # The arguments of a call not yet known to trace: what a graph break is explained on
        self.last: tuple[nn.Module, Any] | None = None

    @property
    def graphs(self) -> int:
        """Graphs Dynamo has compiled in this process since this was made: 1 for a step that never recompiled."""
        return _graphs() - self.graphs_at_start

    def __call__(self, model: nn.Module, batch: Any) -> torch.Tensor:
        self.last = (model, batch)
        return self.fn(model, batch)

    def timed(self, step: Callable[..., torch.Tensor], *args: Any) -> torch.Tensor:
        """Run `step(*args)`; count its time as compile time if it compiled; name a compile failure."""
        before = _graphs()
        start = time.perf_counter()
        try:
            loss = step(*args)
        except Exception as exc:
            reason = self.failure(exc)
            if reason is None:
                raise
            raise CompileError(reason) from exc
        self.last = None  # it traced: the batch need not be kept
        if _graphs() != before:
            self.compile_s += time.perf_counter() - start
            limit = _recompile_limit()
            if self.graphs >= limit:  # Dynamo compiles no more of it: every new shape now runs eagerly
                raise CompileError(self.recompiled(limit))
        return loss

    def failure(self, exc: BaseException) -> str | None:
        """The reason for a compile failure in `exc`'s chain; None for any other error (the workload's own, an OOM)."""
        from torch._dynamo.exc import BackendCompilerFailed, Unsupported

        found = _chain(exc)
        if any("out of memory" in str(e) for e in found):
            return None
        compiler = next((e for e in found if isinstance(e, BackendCompilerFailed)), None)
        if compiler is not None:
            inner = compiler.__cause__ or getattr(compiler, "inner_exception", None) or compiler
            return (f"{COMPILER_ERROR} ({self.mode}): {type(inner).__name__}: {_first_line(inner)[:200]}; "
                    f"leave compile={self.mode} off")
        unsupported = next((e for e in found if isinstance(e, Unsupported)), None)
        if unsupported is not None:
            return self.graph_break(unsupported)
        if any(type(e).__name__ == "FailOnRecompileLimitHit" for e in found):  # where the user asked Dynamo to fail
            return self.recompiled(_recompile_limit())
        return None

    def graph_break(self, exc: BaseException) -> str:
        """Where Dynamo stopped tracing the step and why, in the workload when it can be found, and how many graph
        breaks the step has in all (``torch._dynamo.explain``, which goes on past each)."""
        count, frames = None, list(getattr(exc, "real_stack", None) or [])
        if self.last is not None:
            try:
                explained = torch._dynamo.explain(self.compute_loss)(*self.last)
                count = explained.graph_break_count
                if not frames and explained.break_reasons:
                    frames = list(explained.break_reasons[0].user_stack)
            except Exception:  # explain traces the step again; where it cannot, the count is left out
                pass
        where = _place(frames, self.workload_files)
        many = f"{count} in the step; " if count else ""
        return (
            f"{GRAPH_BREAK} ({many}Dynamo stopped at {where}: {_first_line(exc)[:160]}): a compiled step must be "
            f"one graph; change that line (no Python branch on a tensor, no .item()), or leave compile off"
        )

    def recompiled(self, limit: int) -> str:
        """Recompilations up to Dynamo's limit: the guard that failed last, and the advice that follows from it."""
        from torch._dynamo import utils

        failures = getattr(utils, "guard_failures", {})
        code = getattr(self.compute_loss, "__code__", None)
        reasons = failures.get(code) or [r for rs in failures.values() for r in rs]
        guard = reasons[-1].split("  #")[0].strip()[:160] if reasons else ""
        shapes = any(word in guard for word in ("size", "stride", "shape", "dim"))
        last = f"; the last guard that failed: {guard}" if guard else ""
        return (f"{RECOMPILED}: {self.graphs} graphs, Dynamo's limit of {limit} (it runs any further call "
                f"eagerly){last}: {SHAPE_ADVICE if shapes or not guard else VALUE_ADVICE}")


def compile_loss(compute_loss: ComputeLoss, mode: str) -> CompiledLoss | None:
    """The compiled loss for a `compile` knob value; None for "off"."""
    return None if mode == "off" else CompiledLoss(compute_loss, mode)


def _graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def _recompile_limit() -> int:
    config = torch._dynamo.config
    return int(getattr(config, "recompile_limit", None) or config.cache_size_limit)  # the older name


def _chain(exc: BaseException, limit: int = 16) -> list[BaseException]:
    found: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in found and len(found) < limit:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def workload_files() -> list[Path]:
    """The workload files imported in this process (a trial process imports one)."""
    return [
        Path(module.__file__)
        for name, module in list(sys.modules.items())
        if name.startswith(WORKLOAD_MODULE_PREFIX) and getattr(module, "__file__", None)
    ]


def _place(frames: list[traceback.FrameSummary], files: Collection[Path] | None) -> str:
    """The innermost frame in the workload's folder (its file, or one beside it that it imports), else the innermost
    frame outside torch; as `file, line N: `code``."""
    folders = {Path(f).resolve().parent for f in (workload_files() if files is None else files)}
    ours = [f for f in frames if Path(f.filename).resolve().parent in folders]
    torch_dir = str(Path(torch.__file__).resolve().parent)
    outside = [f for f in frames if not str(Path(f.filename).resolve()).startswith(torch_dir)]
    frame = (ours or outside or frames or [None])[-1]
    if frame is None:
        return "a line Dynamo did not name"
    code = (frame.line or "").split("  #")[0].strip()
    return f"{frame.filename}, line {frame.lineno}: `{code}`"
