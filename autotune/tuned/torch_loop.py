"""A profile's loop knobs as a plain PyTorch training loop that fits the workload's batches.

An ``(x, y)`` workload scores a batch as ``loss_fn(model(x), y)``; one that gives
``compute_loss(model, batch)`` (dict batches, a model that returns its own loss,
detection targets) scores it itself, and its batch is moved to the device as
autotune moves it: every tensor in its dicts, lists and tuples. A workload's
``collate_fn`` goes into the DataLoader, with ``pad_to_multiple_of`` when the
profile pads (``pad_multiple``). ``compile`` compiles the loss as ``tuned_step``
does: the forward and the loss, one graph.

    autotune export --recipe text_transformer --to torch
"""

from __future__ import annotations

import dataclasses

from autotune.config import Config


@dataclasses.dataclass(frozen=True)
class Batches:
    """How a workload makes and scores its batches: what the loop written for it must do."""

    collate_fn: bool = False  # the workload gives its own collate_fn
    compute_loss: bool = False  # the workload scores a batch itself: compute_loss(model, batch)


def collate_arg(config: Config, batches: Batches) -> str | None:
    """The DataLoader's ``collate_fn`` argument, as code; None for DataLoader's own."""
    if not batches.collate_fn:
        return None
    if config.pad_multiple:
        return f"functools.partial(collate_fn, pad_to_multiple_of={config.pad_multiple})"
    return "collate_fn"


def loop_lines(config: Config, hardware: str, lr: str, batches: Batches) -> list[str]:
    """The loop `config`'s loop knobs make, written out; `lr`: the optimizer's rate as code."""
    device = "cpu" if hardware == "cpu" else "cuda"
    fmt = ", memory_format=torch.channels_last" if config.channels_last else ""
    blocking = ", non_blocking=True" if config.pin_memory else ""
    lines = ["", f'device = "{device}"']
    if config.cudnn_benchmark:
        lines.append("torch.backends.cudnn.benchmark = True")
    lines.append(f"model.to(device{fmt})")
    lines.append(f"optimizer = YourOptimizer(model.parameters(), lr={lr})")
    if config.amp == "fp16":
        lines.append(f'scaler = torch.amp.GradScaler("{device}")')
    if batches.compute_loss:
        lines += _to_device(config, blocking)
        score = "compute_loss(model, batch)"
        if config.compile != "off":
            lines.append(f'compute_loss = torch.compile(compute_loss, fullgraph=True, mode="{config.compile}")')
        lines += ["for batch in loader:", "    batch = to_device(batch)"]
    else:
        score = "loss_fn(model(x), y)"
        if config.compile != "off":
            lines.append(f"score = torch.compile(lambda model, x, y: loss_fn(model(x), y), fullgraph=True, "
                         f'mode="{config.compile}")')
            score = "score(model, x, y)"
        lines += ["for x, y in loader:", f"    x = x.to(device{blocking}{fmt})", f"    y = y.to(device{blocking})"]
    if config.amp != "off":
        dtype = "bfloat16" if config.amp == "bf16" else "float16"
        lines += [f'    with torch.autocast("{device}", dtype=torch.{dtype}):', f"        loss = {score}"]
    else:
        lines.append(f"    loss = {score}")
    lines.append("    optimizer.zero_grad(set_to_none=True)")
    if config.amp == "fp16":
        lines += ["    scaler.scale(loss).backward()", "    scaler.step(optimizer)", "    scaler.update()"]
    else:
        lines += ["    loss.backward()", "    optimizer.step()"]
    return lines


def _to_device(config: Config, blocking: str) -> list[str]:
    """A function that moves every tensor of a batch of any structure, as autotune does (channels_last: its 4-D
    floating tensors, the images)."""
    if config.channels_last:
        moved = [
            "        fmt = torch.channels_last if batch.dim() == 4 and batch.is_floating_point() else "
            "torch.preserve_format",
            f"        return batch.to(device{blocking}, memory_format=fmt)",
        ]
    else:
        moved = [f"        return batch.to(device{blocking})"]
    return [
        "",
        "def to_device(batch):  # every tensor in the batch's dicts, lists and tuples",
        "    if isinstance(batch, torch.Tensor):",
        *moved,
        "    if isinstance(batch, dict):",
        "        return {k: to_device(v) for k, v in batch.items()}",
        "    if isinstance(batch, (list, tuple)):",
        "        moved = [to_device(v) for v in batch]",
        '        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)',
        "    return batch",
        "",
    ]
