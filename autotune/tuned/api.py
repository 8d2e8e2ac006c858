"""Training code reads the committed tuned file: `tuned_loader` and `tuned_step`.

from autotune import tuned_loader, tuned_step

loader = tuned_loader(train_dataset, recipe="mnist_cnn")
step = tuned_step(model, criterion, optimizer, recipe="mnist_cnn")
for epoch in range(epochs):
    for x, y in loader:
        loss = step(x, y)          # no host sync; read loss.item() when you log
"""

from __future__ import annotations

import dataclasses
import os
import sys
import warnings
from typing import Any, Callable

import torch
from torch.utils.data import DataLoader, Dataset

from autotune.config import Config, baseline_config
from autotune.loop import DeviceLoader, Step, build_loader
from autotune.tuned import file as tuned_file
from autotune.workloads import Workload, load, resolve
from autotune.workloads.locate import data_root

_told: set[tuple[str, str]] = set()


class NoProfileWarning(UserWarning):
    """The tuned file has no profile for this machine; the workload's defaults are used."""


@dataclasses.dataclass(frozen=True)
class Tuned:
    """What a tuned file says for this machine: the config, the learning rate, and where it came from."""

    workload: Workload
    config: Config
    lr: float
    hardware: str
    profile: dict[str, Any] | None


def _hardware(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def _default_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def load_tuned(recipe: str, device: torch.device | str | None = None) -> Tuned:
    """The profile matching this machine, or the workload's defaults with a warning naming what exists."""
    device = torch.device(device) if device is not None else _default_device()
    ref = resolve(recipe)
    workload = load(ref)
    hardware = _hardware(device)
    data = tuned_file.read(ref.tuned_path) if ref.tuned_path.exists() else None
    profile = tuned_file.match(data, hardware) if data else None
    if profile is None:
        have = ", ".join(repr(h) for h in (data or {}).get("profiles", {})) or "none"
        warnings.warn(
            f"{ref.tuned_path} has no profile for {hardware!r} (profiles: {have}); using {ref.name}'s own defaults. "
            f"Run `autotune search --recipe {recipe}` on this machine to tune it.",
            NoProfileWarning,
            stacklevel=3,
        )
        config = baseline_config(workload, device.type == "cuda")
        return Tuned(workload, config, float(workload.defaults["lr"]), hardware, None)
    config = tuned_file.knobs_to_config(profile["knobs"])
    lr = float(profile.get("lr", workload.defaults["lr"]))
    if config.batch_size != workload.defaults["batch_size"] and (ref.name, hardware) not in _told:
        _told.add((ref.name, hardware))
        check = profile.get("parity") or {}
        if check.get("checked") and check.get("passed"):
            checked = (
                f"The parity check trained it at that rate like the baseline (tolerance ±{check['tolerance']:.0%})"
            )
        elif check.get("checked"):
            why = check.get("reason", "see autotune show")
            checked = f"The parity check found it trains differently from the baseline ({why})"
        else:
            checked = "It was not checked to train like the baseline"
        print(
            f"autotune: {ref.name} on {hardware} uses batch size {config.batch_size} (the workload's is "
            f"{workload.defaults['batch_size']}); its learning rate is {lr:g} by the "
            f"{profile.get('lr_rule', 'linear')} rule. "
            f"{checked}; build your optimizer with load_tuned({recipe!r}).lr.",
            file=sys.stderr,
        )
    return Tuned(workload, config, lr, hardware, profile)


def tuned_loader(
    dataset: Dataset, recipe: str, device: torch.device | str | None = None, **overrides: Any
) -> DataLoader | DeviceLoader:
    """A loader built from the tuned profile matching this machine.

    A ``torch.utils.data.DataLoader``, or, when the profile places the data on the
    device, a ``DeviceLoader`` with the same iteration contract whose batches are
    already on the device. Keyword overrides (``batch_size=256``, ``shuffle=True``)
    win over the profile. A workload that gives ``build_device_dataset`` and
    ``device_augment`` has its device-resident copy built from those, not from
    `dataset`, so its random augmentation still runs (on the device).

    For example::

        loader = tuned_loader(train_dataset, recipe="mnist_cnn")
    """
    device = torch.device(device) if device is not None else _default_device()
    tuned = load_tuned(recipe, device)
    workload = tuned.workload
    shuffle = overrides.pop("shuffle", workload.default("shuffle"))
    drop_last = overrides.pop("drop_last", workload.default("drop_last"))
    try:
        config = dataclasses.replace(tuned.config, **overrides)
    except TypeError as exc:
        raise TypeError(
            f"tuned_loader: unknown override in {sorted(overrides)}; overrides are knob names or shuffle/drop_last."
        ) from exc
    if (
        config.placement == "device"
        and workload.build_device_dataset is not None
        and workload.deterministic_transform is not True
    ):
        source = workload.build_device_dataset(data_root())
        return build_loader(
            source,
            config,
            shuffle,
            drop_last,
            device,
            workload.device_augment,
            materialize_workers=min(4, len(os.sched_getaffinity(0))),
        )
    return build_loader(
        dataset, config, shuffle, drop_last, device, materialize_workers=min(4, len(os.sched_getaffinity(0)))
    )


def tuned_step(
    model: torch.nn.Module,
    loss_fn: Callable,
    optimizer: torch.optim.Optimizer,
    recipe: str,
    device: torch.device | str | None = None,
) -> Step:
    """A step that applies the profile's loop knobs to your model, loss and optimizer.

    amp (with a GradScaler for fp16), channels_last, cudnn.benchmark, and CUDA graph
    capture of the whole step. ``loss = step(x, y)`` returns the loss tensor without a
    host sync. Build the optimizer with the learning rate the recipe states
    (``load_tuned(recipe).lr``) when the tuned batch size differs from yours.

    For example::

        step = tuned_step(model, criterion, optimizer, recipe="mnist_cnn")
    """
    device = torch.device(device) if device is not None else _default_device()
    tuned = load_tuned(recipe, device)
    return Step(model, loss_fn, optimizer, tuned.config, device)
