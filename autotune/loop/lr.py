"""The learning rate as a device tensor that an LR scheduler reaches, also inside a captured CUDA graph.

A graph replays the kernels it captured with the arguments they had. An optimizer
that reads ``param_groups[i]["lr"]`` as a Python float bakes that number into the
graph, and a scheduler's later changes reach nothing. Adam and AdamW (with
``capturable=True``) read a tensor learning rate on the device instead, so the step
keeps one 0-dim tensor per param group there and the graph reads its current value.

PyTorch's schedulers write into a tensor learning rate in place (``fill_``, since
torch 2.6); older ones, and a user's own ``group["lr"] = x``, replace it with a new
object. ``DeviceLr.sync`` runs before every step and copies such a value into the
tensor the graph reads, so both kinds reach it, without a host sync.

Other optimizers turn a tensor rate into a number on the host inside ``step()``
(SGD's foreach path calls ``alpha=-lr``), which a graph cannot capture: for them the
step keeps the float and captures again when it changes (``autotune.loop.recapture``).
"""

from __future__ import annotations

import torch

# Optimizers whose step reads a tensor learning rate on the device, so that a captured graph follows it:
# torch/optim/adam.py takes `lr` as a Tensor with capturable=True (foreach or not; AdamW shares that code).
TENSOR_LR_UNDER_GRAPH = ("Adam", "AdamW")


def reads_tensor_lr_under_graph(optimizer: torch.optim.Optimizer) -> bool:
    """Whether `optimizer`'s captured step follows a tensor learning rate (Adam, AdamW and their subclasses)."""
    return any(cls.__name__ in TENSOR_LR_UNDER_GRAPH for cls in type(optimizer).__mro__)


def group_lrs(optimizer: torch.optim.Optimizer) -> list[float]:
    """Each param group's learning rate as a float: what a graph that reads numbers captured.

    Only for optimizers whose rate is a number; a tensor rate would need a host sync to read.
    """
    values = []
    for i, group in enumerate(optimizer.param_groups):
        lr = group["lr"]
        if isinstance(lr, torch.Tensor):
            raise TypeError(
                f"param_groups[{i}]['lr'] is a tensor, but {type(optimizer).__name__} under a CUDA graph reads its "
                f"learning rate as a number (only {', '.join(TENSOR_LR_UNDER_GRAPH)} read a tensor there); "
                "give it a float"
            )
        values.append(float(lr))
    return values


class DeviceLr:
    """One 0-dim float32 tensor on `device` per param group, put in place of each group's ``lr``.

    For example::

        lrs = DeviceLr(optimizer, device)
        scheduler.step()      # fills the tensor in place, or assigns a float
        lrs.sync()            # a float assigned is copied into the tensor the step reads
        optimizer.step()
    """

    def __init__(self, optimizer: torch.optim.Optimizer, device: torch.device) -> None:
        self.optimizer = optimizer
        self.device = device
        self.tensors: list[torch.Tensor] = []
        self.sync()

    def sync(self) -> None:
        """Put each group's current learning rate into its device tensor, and that tensor back into the group.

        A float is written with ``fill_`` (a kernel launch, no host sync); a tensor of the user's with ``copy_``.
        A group added since (``add_param_group``) gets a tensor of its own.
        """
        groups = self.optimizer.param_groups
        while len(self.tensors) < len(groups):
            # A fresh tensor that is no group's yet: the loop below fills it from the group's own value.
            self.tensors.append(torch.zeros((), dtype=torch.float32, device=self.device))
        for group, tensor in zip(groups, self.tensors):
            lr = group["lr"]
            if lr is tensor:
                continue
            if isinstance(lr, torch.Tensor):
                tensor.copy_(lr.detach().reshape(()))
            else:
                tensor.fill_(float(lr))
            group["lr"] = tensor
