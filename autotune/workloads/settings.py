"""A workload's own settings, in the knobs' terms: its untuned config and the learning-rate rule of its optimizer."""

from __future__ import annotations

from autotune.config import Config, LrRule, lr_rule_for
from autotune.workloads.contract import Workload


def baseline_config(workload: Workload, cuda: bool) -> Config:
    """The workload's own, untuned settings, expressed as knobs."""
    workers = workload.default("num_workers")
    return Config(
        batch_size=workload.defaults["batch_size"],
        num_workers=workers,
        pin_memory=bool(workload.default("pin_memory")) and cuda,
        persistent_workers=bool(workload.default("persistent_workers")) and workers > 0,
        prefetch_factor=workload.defaults.get("prefetch_factor") if workers > 0 else None,
    )


def workload_lr_rule(workload: Workload, override: str | None = None) -> LrRule:
    """The rule for the optimizer `workload` builds, unless `override` (``--lr-scaling``) names one.

    The optimizer is built over one stand-in parameter, which is cheap; one that needs
    the model's own parameters (named groups, a shape rule) is built over the model's.
    """
    if override is not None:
        return lr_rule_for(None, override)
    import torch

    lr = float(workload.defaults["lr"])
    try:
        optimizer = workload.build_optimizer([torch.nn.Parameter(torch.zeros(2, 2))], lr)
    except Exception:  # the workload's own code: any error means it wants its model's parameters
        optimizer = workload.build_optimizer(workload.build_model().parameters(), lr)
    return lr_rule_for(optimizer)
