"""The workload contract: what a workload file declares, imported and validated.

A workload is a plain Python file, ``recipes/<name>.py``, that declares::

    DEFAULTS = dict(batch_size=128, lr=1e-2, epochs=10, shuffle=False, pin_memory=True)

    def build_dataset(root): ...          # the training Dataset, as the user builds it
    def build_model(): ...                # an nn.Module on the CPU
    def build_loss(): ...                 # an nn.Module or callable (output, target) -> loss
    def build_optimizer(params, lr): ...  # a torch.optim.Optimizer

and optionally:

- ``DETERMINISTIC_TRANSFORM`` (bool), ``LR_MAX`` (float: the cap of the learning-rate rule);
- for batches that are not ``(input, target)`` pairs: ``collate_fn(samples)`` (passed to
  the DataLoader as it is), ``compute_loss(model, batch)`` (returns the loss tensor; with
  it, ``build_loss`` may be left out), ``samples_in(batch)`` (default: the leading
  dimension of the batch's first tensor) and ``tokens_in(batch)`` (real tokens, not
  padding: autotune then states tokens/s and the share of padding), and
  ``build_sampler(dataset)`` (a sampler that orders the samples, e.g. by length;
  with it, ``shuffle`` stays False), and ``sample_lengths(dataset)`` (each sample's
  length, e.g. its tokens, in the data set's order: the ``bucketing`` knob groups
  samples of similar length by it); a ``collate_fn`` that takes the keyword
  ``pad_to_multiple_of`` gets the ``pad_multiple`` knob;
- for a stream (``build_dataset`` returns an ``IterableDataset``, docs/streams.md): ``samples_per_epoch`` in
  DEFAULTS (one pass, where the stream has no ``len()``) and ``sample_key(sample)`` (a sample's identity, where
  neither its source nor its content gives one);
- for a workload with random augmentation, a pair ``build_device_dataset(root)`` +
  ``device_augment(x)`` that lets its data live on the GPU.

It is the only place user code runs; nothing is inherited.
"""

from __future__ import annotations

import dataclasses
import importlib.machinery
import importlib.util
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from autotune.workloads.locate import RecipeRef, WorkloadError

# Keys a workload's DEFAULTS may hold, with their types. Anything else is an error:
# a typo such as `batchsize` must not silently fall back to a default.
DEFAULT_KEYS: dict[str, type | tuple[type, ...]] = {
    "batch_size": int,  # samples per step, the untuned value
    "lr": (int, float),  # learning rate at that batch size
    "epochs": int,  # the length of the workload's declared training run
    "shuffle": bool,
    "num_workers": int,
    "pin_memory": bool,
    "drop_last": bool,
    "persistent_workers": bool,
    "prefetch_factor": int,
    "samples_per_epoch": int,  # a stream's pass (an IterableDataset without len()): what one epoch of the run reads
}
REQUIRED_DEFAULTS = ("batch_size", "lr", "epochs")
REQUIRED_FUNCTIONS = ("build_dataset", "build_model", "build_optimizer")
# Optional, for batches of any structure and loops with an order of their own.
BATCH_HOOKS = ("collate_fn", "compute_loss", "samples_in", "tokens_in", "build_sampler", "sample_lengths",
               "sample_key")


@dataclasses.dataclass(frozen=True)
class Workload:
    """A loaded, validated workload."""

    name: str
    path: Path
    defaults: dict[str, Any]
    build_dataset: Callable[[Path], Any]
    build_model: Callable[[], Any]
    build_loss: Callable[[], Any] | None
    build_optimizer: Callable[[Any, float], Any]
    deterministic_transform: bool | None
    lr_max: float | None
    build_device_dataset: Callable[[Path], Any] | None
    device_augment: Callable[[Any], Any] | None
    collate_fn: Callable[[list[Any]], Any] | None = None
    compute_loss: Callable[[Any, Any], Any] | None = None
    samples_in: Callable[[Any], int] | None = None
    tokens_in: Callable[[Any], int] | None = None
    build_sampler: Callable[[Any], Any] | None = None
    sample_lengths: Callable[[Any], Any] | None = None  # dataset -> one length per sample (ints), cheap
    sample_key: Callable[[Any], Any] | None = None  # a stream's sample -> its identity (autotune.streams.keys)

    def count(self, batch: Any) -> int:
        """Samples in a batch: the workload's own count, else the leading dimension of its first tensor."""
        if self.samples_in is not None:
            return int(self.samples_in(batch))
        from autotune.batch import samples_in  # torch is imported only when batches are counted

        return samples_in(batch)

    def lengths(self, dataset: Any) -> Any:
        """Each sample's length by the workload's ``sample_lengths``, checked: a 1-D int64 array, one per sample."""
        import numpy as np  # a million lengths check in milliseconds as an array, in seconds as Python ints

        if self.sample_lengths is None:
            raise WorkloadError(f"workload {self.path} declares no sample_lengths(dataset); bucketing needs it")
        raw = np.asarray(self.sample_lengths(dataset))
        if raw.ndim != 1 or not (raw.size == 0 or np.issubdtype(raw.dtype, np.integer)):
            raise WorkloadError(
                f"workload {self.path}: sample_lengths(dataset) must give one int per sample, but gave an array of "
                f"shape {raw.shape} and dtype {raw.dtype}"
            )
        lengths = raw.astype(np.int64)
        if len(lengths) != len(dataset):
            raise WorkloadError(
                f"workload {self.path}: sample_lengths(dataset) must give one length per sample, but gave "
                f"{len(lengths)} for {len(dataset)} samples"
            )
        if len(lengths) and lengths.min() < 0:
            raise WorkloadError(
                f"workload {self.path}: sample_lengths(dataset) must be >= 0, but gave {int(lengths.min())}"
            )
        return lengths

    def default(self, key: str) -> Any:
        """The workload's own value for a DataLoader setting, else DataLoader's default."""
        loader_defaults = {
            "shuffle": False,
            "num_workers": 0,
            "pin_memory": False,
            "drop_last": False,
            "persistent_workers": False,
            "prefetch_factor": 2,
        }
        return self.defaults.get(key, loader_defaults.get(key))


class _NoCacheLoader(importlib.machinery.SourceFileLoader):
    """Imports a workload without writing its compiled form: no __pycache__ appears in the user's recipes folder."""

    def set_data(self, path: str, data: bytes, *, _mode: int = 0o666) -> None:
        pass  # the one place a source loader writes bytecode


def _import_file(path: Path) -> ModuleType:
    # A private module name per file: workloads never land in each other's globals.
    module_name = f"autotune_workload_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path, loader=_NoCacheLoader(module_name, str(path)))
    if spec is None or spec.loader is None:
        raise WorkloadError(f"cannot import workload file {path}.")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # a workload that calls sys.exit() at import fails to import too
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(path)]
        where = f"{path}, line {frames[-1].lineno}" if frames else str(path)
        if isinstance(exc, SyntaxError) and exc.lineno is not None:
            where = f"{path}, line {exc.lineno}"
        said = f": {exc}" if str(exc) else ""  # sys.exit() with no argument says nothing
        raise WorkloadError(f"workload {where} failed to import: {type(exc).__name__}{said}") from exc
    sys.modules.setdefault(module_name, module)
    return module


def load(ref: RecipeRef) -> Workload:
    """Import and validate a workload file; every problem is reported at once."""
    module = _import_file(ref.workload_path)
    problems: list[str] = []
    defaults = getattr(module, "DEFAULTS", None)
    if not isinstance(defaults, dict):
        problems.append("DEFAULTS must be a dict, e.g. DEFAULTS = dict(batch_size=128, lr=1e-2, epochs=10)")
        defaults = {}
    for key in REQUIRED_DEFAULTS:
        if key not in defaults:
            problems.append(f"DEFAULTS lacks {key!r}")
    for key, value in defaults.items():
        if key not in DEFAULT_KEYS:
            problems.append(f"DEFAULTS has unknown key {key!r}; known keys: {', '.join(DEFAULT_KEYS)}")
        elif isinstance(value, bool) and DEFAULT_KEYS[key] is not bool or not isinstance(value, DEFAULT_KEYS[key]):
            problems.append(f"DEFAULTS[{key!r}] must be {_type_name(DEFAULT_KEYS[key])}, but got {value!r}")
    for key in ("batch_size", "epochs", "samples_per_epoch"):
        if isinstance(defaults.get(key), int) and defaults[key] < 1:
            problems.append(f"DEFAULTS[{key!r}] must be >= 1, but got {defaults[key]!r}")
    for name in REQUIRED_FUNCTIONS:
        if not callable(getattr(module, name, None)):
            problems.append(f"missing function {name}()")
    for name in BATCH_HOOKS:
        if getattr(module, name, None) is not None and not callable(getattr(module, name)):
            problems.append(f"{name} must be a function, but got {type(getattr(module, name)).__name__}")
    if callable(getattr(module, "build_sampler", None)) and defaults.get("shuffle") is True:
        problems.append("DEFAULTS['shuffle'] is True and build_sampler() gives an order too: set shuffle=False")
    if not callable(getattr(module, "build_loss", None)) and not callable(getattr(module, "compute_loss", None)):
        problems.append(
            "missing function build_loss() (for (input, target) batches) or compute_loss(model, batch) (for any batch)"
        )
    has_dev_ds = callable(getattr(module, "build_device_dataset", None))
    has_aug = callable(getattr(module, "device_augment", None))
    if has_dev_ds != has_aug:
        problems.append("build_device_dataset() and device_augment() come as a pair: define both or neither")
    if problems:
        raise WorkloadError(
            f"workload {ref.workload_path} has {len(problems)} problem(s):\n  - " + "\n  - ".join(problems)
        )
    return Workload(
        name=ref.name,
        path=ref.workload_path,
        defaults=dict(defaults),
        build_dataset=module.build_dataset,
        build_model=module.build_model,
        build_loss=getattr(module, "build_loss", None),
        build_optimizer=module.build_optimizer,
        deterministic_transform=getattr(module, "DETERMINISTIC_TRANSFORM", None),
        lr_max=getattr(module, "LR_MAX", None),
        build_device_dataset=getattr(module, "build_device_dataset", None),
        device_augment=getattr(module, "device_augment", None),
        **{name: getattr(module, name, None) for name in BATCH_HOOKS},
    )


def _type_name(t: type | tuple[type, ...]) -> str:
    if isinstance(t, tuple):
        return "a number" if float in t else " or ".join(x.__name__ for x in t)
    return {"int": "an int", "bool": "a bool", "float": "a float"}.get(t.__name__, t.__name__)
