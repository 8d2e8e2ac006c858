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

from autotune.config import Config
from autotune.loop import DeviceLoader, Step
from autotune.loop.hooks import StepError, StepOptions
from autotune.loop.sourced import WrappedLoader
from autotune.tuned import caller, distributed, loading
from autotune.tuned import file as tuned_file
from autotune.workloads import Workload, load, resolve
from autotune.workloads.settings import baseline_config

_told: set[tuple[str, str]] = set()


class NoProfileWarning(UserWarning):
    """The tuned file has no profile for this machine; the workload's defaults are used."""


@dataclasses.dataclass(frozen=True)
class Tuned:
    """What a tuned file says for this machine: the config, the learning rate, and where it came from.

    ``config.batch_size`` is per process; under torchrun the global batch is ``world_size`` times it, and ``lr``
    is the rate for the global batch by the profile's rule (``autotune.tuned.distributed``).
    """

    workload: Workload
    config: Config
    lr: float
    hardware: str
    profile: dict[str, Any] | None
    world_size: int = 1

    @property
    def global_batch_size(self) -> int:
        """Samples per update over every process: the per-process batch times the world size."""
        return self.config.batch_size * self.world_size


def _hardware(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def _default_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def load_tuned(recipe: str, device: torch.device | str | None = None, world_size: int | None = None) -> Tuned:
    """The profile matching this machine, or the workload's defaults with a warning naming what exists.

    `world_size`: processes training together (data parallel, gradients averaged); the rate then follows the
    global batch, ``world_size x batch_size``, by the profile's rule: ``lr x W`` (linear), ``lr x sqrt(W)`` (sqrt),
    ``lr`` (none). Unset, the rate is the profile's own, for one process. Under torch.distributed, a profile tuned
    with more CPU cores than each process on this host gets warns (``CpuShareWarning``).
    """
    device = torch.device(device) if device is not None else _default_device()
    _, ranks = distributed.world()
    if world_size is not None:
        distributed.lr_for_world(1.0, "none", world_size)  # a bad world size is one error, before anything else
    world = world_size or 1
    ref = resolve(recipe)
    workload = load(ref)
    hardware = _hardware(device)
    data = tuned_file.read(ref.tuned_path, ref.name) if ref.tuned_path.exists() else None
    profile = tuned_file.match(data, hardware) if data else None
    if profile is None:
        have = ", ".join(repr(h) for h in (data or {}).get("profiles", {})) or "none"
        warnings.warn(
            f"{ref.tuned_path} has no profile for {hardware!r} (profiles: {have}); using {ref.name}'s own defaults. "
            f"Run `autotune search --recipe {recipe}` on this machine to tune it.",
            NoProfileWarning,
            stacklevel=caller.stacklevel(),  # the user's call: of load_tuned, or of tuned_loader/tuned_step
        )
        config = baseline_config(workload, device.type == "cuda")
        lr = distributed.lr_for_world(float(workload.defaults["lr"]), "linear", world)
        return Tuned(workload, config, lr, hardware, None, world)
    config = tuned_file.knobs_to_config(profile["knobs"])
    rule = profile.get("lr_rule", "linear")
    lr = distributed.lr_for_world(float(profile.get("lr", workload.defaults["lr"])), rule, world)
    # The processes sharing this host: torchrun's, not `world_size` (a job's ranks may span hosts).
    distributed.check_cpu_share(profile, ref.name, hardware, distributed.ranks_on_host(ranks),
                                len(os.sched_getaffinity(0)))
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
        per = f"batch size {config.batch_size}" if world == 1 else (
            f"batch size {config.batch_size} per process, {config.batch_size * world} over {world} processes")
        print(
            f"autotune: {ref.name} on {hardware} uses {per} (the workload's is "
            f"{workload.defaults['batch_size']}); its learning rate is {lr:g} by the "
            f"{rule} rule. "
            f"{checked}; build your optimizer with load_tuned({recipe!r}"
            f"{'' if world == 1 else f', world_size={world}'}).lr.",
            file=sys.stderr,
        )
    return Tuned(workload, config, lr, hardware, profile, world)


def tuned_loader(
    dataset: Dataset, recipe: str, device: torch.device | str | None = None, **kwargs: Any
) -> DataLoader | DeviceLoader | WrappedLoader:
    """A loader built from the tuned profile matching this machine.

    A ``torch.utils.data.DataLoader``, or, when the profile places the data on the
    device, a ``DeviceLoader`` with the same iteration contract whose batches are
    already on the device. Keyword arguments are either knobs (``batch_size=256``),
    which win over the profile, ``shuffle``/``drop_last``, or your own DataLoader
    arguments (``collate_fn``, ``sampler``, ``batch_sampler``, ``worker_init_fn``,
    ``generator``, ``timeout``), kept as you give them; without a ``collate_fn`` the
    workload's own is used; a profile with ``pad_multiple`` passes it to that
    collate_fn as ``pad_to_multiple_of``, and one with ``bucketing`` batches samples of
    similar length by the workload's ``sample_lengths(dataset)``. An argument the
    profile cannot honour is one clear error.
    A profile with ``decode = gpu`` or ``device_normalize`` yields batches already on
    the device, made from `dataset`'s own transform.
    A workload that gives ``build_device_dataset`` and ``device_augment`` has its
    device-resident copy built from those, not from `dataset`, so its random
    augmentation still runs (on the device).

    For example::

        loader = tuned_loader(train_dataset, recipe="mnist_cnn")
        loader = tuned_loader(texts, recipe="text_transformer", collate_fn=pad_batch)
    """
    device = torch.device(device) if device is not None else _default_device()
    tuned = load_tuned(recipe, device)
    asked = loading.arguments(tuned.config, tuned.workload, kwargs)
    dataset = loading.for_rank(dataset, asked, recipe)
    user, shuffle = loading.order(dataset, tuned.workload, asked, recipe)
    loading.refuse_conflicts(asked.config, user, shuffle, recipe)
    loading.refuse_stream_knobs(asked, recipe)
    return loading.build(dataset, tuned.workload, asked, user, shuffle, device, recipe)


def tuned_step(
    model: torch.nn.Module,
    loss_fn: Callable | None,
    optimizer: torch.optim.Optimizer,
    recipe: str,
    device: torch.device | str | None = None,
    compute_loss: Callable[[torch.nn.Module, Any], torch.Tensor] | None = None,
    *,
    cuda_graph: bool | None = None,
    options: StepOptions | None = None,
    **keywords: Any,
) -> Step:
    """A step that applies the profile's loop knobs to your model, loss and optimizer.

    amp (with a GradScaler for fp16), channels_last, cudnn.benchmark, and CUDA graph
    capture of the whole step. ``loss = step(x, y)``, or ``loss = step(batch)`` for a
    batch of any structure, returns the loss tensor without a host sync. The loss is
    ``loss_fn(model(x), y)``, or ``compute_loss(model, batch)`` when given (with
    neither, the workload's own ``compute_loss``). Build the optimizer with the
    learning rate the recipe states (``load_tuned(recipe).lr``) when the tuned batch
    size differs from yours.

    `keywords` are the step's options, as ``Step`` takes them (``StepOptions``, ``autotune.loop.hooks``;
    docs/api.md, under tuned_step). Hooks: ``clip_grad_norm`` clips before each update; ``accumulate=N``
    makes each call one micro-batch and updates every Nth call; ``after_update()`` runs
    after each update (an EMA, logging). An LR scheduler works as in eager code, under a
    graph too. ``cuda_graph=False`` turns the profile's graph off.

    Side effects, each documented in docs/api.md; the keyword arguments turn off those
    that can be: ``torch.backends.cudnn.benchmark`` is set for the whole process
    (``set_cudnn_benchmark=False``); the model is moved to the device and memory format
    (``move_model=False``: it must be there already) and put in train mode; under a graph,
    Adam-style optimizers get ``capturable=True`` (``set_capturable=False`` runs eagerly)
    and Adam/AdamW's ``param_groups[i]["lr"]`` become device tensors (``tensor_lr=False``:
    floats, and the graph is captured again when the rate changes).

    For example::

        step = tuned_step(model, criterion, optimizer, recipe="mnist_cnn")
        step = tuned_step(model, criterion, optimizer, recipe="mnist_cnn", clip_grad_norm=1.0, accumulate=4)
    """
    device = torch.device(device) if device is not None else _default_device()
    tuned = load_tuned(recipe, device)
    if loss_fn is None and compute_loss is None:
        compute_loss = tuned.workload.compute_loss
        if compute_loss is None:
            raise StepError(
                f"tuned_step: give loss_fn or compute_loss; {recipe}'s workload declares no compute_loss(model, batch)"
            )
    config = tuned.config if cuda_graph is None else dataclasses.replace(tuned.config, cuda_graph=cuda_graph)
    options = StepOptions.given(options, keywords, "tuned_step")
    return Step(model, loss_fn, optimizer, config, device, compute_loss=compute_loss, options=options)
