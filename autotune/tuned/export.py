"""A tuned profile in the terms of the framework a job trains with: Hugging Face, Lightning, or plain PyTorch.

``export(recipe, "hf")`` gives, per profile, the keyword arguments the framework takes
(``TrainingArguments``; Lightning's ``Trainer`` plus the DataLoader's; a plain
``DataLoader``), the knobs it sets with a line of the user's code, and the knobs it
cannot express, with what leaving them out costs. That cost is measured, never
guessed: the profile's rate was measured with every knob; the workload's own config
(the baseline, measured in the same run) is a rate without them; and when the
study is at hand, the best trial that any of the lost knobs leaves out.

    autotune export --recipe mnist_cnn --to hf
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.config import Config
from autotune.tuned import file as tuned_file
from autotune.tuned.torch_loop import Batches, collate_arg, loop_lines

if TYPE_CHECKING:
    import optuna

TARGETS = ("hf", "lightning", "torch")
# What each knob's tuned value does, for a knob no target can express, and how the loss reads.
_LOST_WHY = {
    "placement": "the whole transformed data set kept on the device, batches sliced there, no DataLoader "
    "(tuned_loader)",
    "decode": "JPEG decoding and augmentation of whole batches on the GPU (tuned_loader)",
    "device_normalize": "workers hand over uint8 images; the device runs ToTensor and Normalize (tuned_loader)",
    "cuda_graph": "the whole step captured once as a CUDA graph and replayed (tuned_step)",
    "bucketing": "batches of samples of similar length (tuned_loader's length buckets)",
    "channels_last": "the model and its image batches in channels_last (tuned_step)",
    "pad_multiple": "batches padded to a multiple of the tuned length (tuned_loader)",
    "cudnn_benchmark": "cuDNN's autotuned convolution plans",
    "compile": "the step's forward and loss compiled as one graph by torch.compile (tuned_step)",
}
# Per target: knobs it cannot express at all; knobs one line of the user's code sets (with that line). Every other
# knob is in the target's arguments, or (torch) in the loop written out (autotune.tuned.torch_loop).
_LOST = {
    "hf": ("placement", "decode", "device_normalize", "cuda_graph", "compile"),
    "lightning": ("placement", "decode", "device_normalize", "cuda_graph", "bucketing", "compile"),
    "torch": ("placement", "decode", "device_normalize", "cuda_graph", "bucketing"),
}
_CODE = {
    "hf": {
        "cudnn_benchmark": "torch.backends.cudnn.benchmark = True  # before trainer.train()",
        "channels_last": "model.to(memory_format=torch.channels_last), and a data_collator that returns "
        "channels_last images",
        "pad_multiple": "DataCollatorWithPadding(tokenizer, pad_to_multiple_of={pad_multiple})",
    },
    "lightning": {
        "channels_last": "self.to(memory_format=torch.channels_last) in setup(), and "
        "batch[0].to(memory_format=torch.channels_last) in on_after_batch_transfer()",
        "pad_multiple": "a collate_fn that pads to a multiple of {pad_multiple}",
    },
    "torch": {
        "pad_multiple": "a collate_fn that pads to a multiple of {pad_multiple} (pad_to_multiple_of={pad_multiple})",
    },
}
_PRECISION = {"off": "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed"}


@dataclasses.dataclass(frozen=True)
class Lost:
    """A tuned knob the target cannot express: its setting, what it does."""

    knob: str
    value: Any
    what: str


@dataclasses.dataclass(frozen=True)
class Export:
    """One profile in one framework's terms."""

    recipe: str
    hardware: str
    target: str
    config: Config
    lr: float | None  # the profile's rate, for its batch on one process
    kwargs: dict[str, Any]  # TrainingArguments / Lightning Trainer / the learning rate, by target
    loader_kwargs: dict[str, Any]  # the DataLoader's (lightning, torch); empty for hf, whose Trainer makes it
    code: dict[str, str]  # knob -> the line of the user's code that sets it
    lost: list[Lost]
    cost: list[str]  # measured rates that say what the lost knobs are worth
    notes: list[str]
    batches: Batches = Batches()  # how the workload makes and scores batches: the torch loop fits them


def _is_on(knob: str, value: Any) -> bool:
    defaults = {f.name: f.default for f in dataclasses.fields(Config) if f.name != "batch_size"}
    return value != defaults.get(knob) and not (knob == "decode" and value == "cpu")


def export_profile(recipe: str, hardware: str, profile: dict[str, Any], target: str,
                   shuffle: bool = True, drop_last: bool = False, study_trials: list[dict[str, Any]] | None = None,
                   batches: Batches = Batches()) -> Export:
    """`profile` (a tuned file's table for `hardware`) in `target`'s terms; `study_trials` (complete trials'
    ``config`` and ``samples_per_s``) measure what the lost knobs are worth, when the study is at hand; `batches`:
    the workload's collate_fn and compute_loss, which the torch loop uses (default: ``(x, y)`` batches)."""
    if target not in TARGETS:
        raise ValueError(f"target must be one of {', '.join(TARGETS)}, but got {target!r}")
    config = tuned_file.knobs_to_config(profile["knobs"])
    lr = profile.get("lr")
    loader = {"batch_size": config.batch_size, "shuffle": shuffle, "drop_last": drop_last,
              "num_workers": config.num_workers, "pin_memory": config.pin_memory}
    if config.num_workers > 0:  # DataLoader refuses both without workers
        loader["persistent_workers"] = config.persistent_workers
        if config.prefetch_factor is not None:
            loader["prefetch_factor"] = config.prefetch_factor
    if target == "hf":
        kwargs: dict[str, Any] = {"per_device_train_batch_size": config.batch_size}
        if lr is not None:
            kwargs["learning_rate"] = lr
        kwargs |= {
            "dataloader_num_workers": config.num_workers,
            "dataloader_pin_memory": config.pin_memory,
            "dataloader_persistent_workers": config.persistent_workers and config.num_workers > 0,
            "dataloader_drop_last": drop_last,
            "bf16": config.amp == "bf16",
            "fp16": config.amp == "fp16",
        }
        kwargs |= _hf_order(shuffle, config.bucketing)
        if config.prefetch_factor is not None and config.num_workers > 0:
            kwargs["dataloader_prefetch_factor"] = config.prefetch_factor
        loader = {}
    elif target == "lightning":
        kwargs = {"precision": _PRECISION[config.amp], "benchmark": config.cudnn_benchmark}
    else:
        kwargs = {} if lr is None else {"lr": lr}
    values = config.as_dict()
    code = {k: line.format(**values) for k, line in _CODE[target].items() if _is_on(k, values[k])}
    if target == "torch" and "pad_multiple" in code and batches.collate_fn:
        code["pad_multiple"] = (f"the DataLoader above passes pad_to_multiple_of={config.pad_multiple} to the "
                                f"workload's collate_fn")
    lost = [Lost(k, values[k], _LOST_WHY[k]) for k in _LOST[target] if _is_on(k, values[k])]
    return Export(recipe, hardware, target, config, lr, kwargs, loader, code, lost,
                  _cost(profile, config, lost, study_trials), _notes(recipe, profile, config, target), batches)


def _hf_order(shuffle: bool, bucketing: bool) -> dict[str, Any]:
    """The Trainer's order: `train_sampling_strategy` from transformers 5 on (it replaced `group_by_length`).

    The installed transformers decides which name; without one, the current name. The Trainer shuffles by default.
    """
    try:
        import transformers

        names = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    except ImportError:
        names = {"train_sampling_strategy"}
    if "train_sampling_strategy" in names:
        strategy = "group_by_length" if bucketing else ("random" if shuffle else "sequential")
        return {} if strategy == "random" else {"train_sampling_strategy": strategy}
    return {"group_by_length": True} if bucketing else {}


def _rate(value: float) -> str:
    return f"{value:,.0f} samples/s"


def _cost(profile: dict[str, Any], config: Config, lost: list[Lost],
          trials: list[dict[str, Any]] | None) -> list[str]:
    """What leaving the lost knobs out costs, from measured rates only."""
    if not lost:
        return []
    tuned = profile["samples_per_s"]
    names = ", ".join(f"{item.knob}={item.value}" for item in lost)
    lines = [
        f"measured with every tuned knob: {_rate(tuned)} (spread ±{profile.get('spread', 0):.0%}).",
        f"the workload's own config, measured in the same run: {_rate(profile['baseline_samples_per_s'])} "
        f"({profile['baseline_samples_per_s'] / tuned:.1%} of it).",
    ]
    if trials is None:
        lines.append(f"the best trial without {names} is in the study, which is not at hand (pass --storage).")
        return lines
    defaults = Config(batch_size=config.batch_size).as_dict()
    # Only trials of the same math (batch size, amp) as the tuned config: a faster trial at another batch size
    # may not have passed the parity check, and says nothing about what these knobs are worth.
    same = [t for t in trials if t["config"].get("batch_size") == config.batch_size
            and t["config"].get("amp", "off") == config.amp]
    groups = [lost] + ([[item] for item in lost] if len(lost) > 1 else [])
    for group in groups:  # all of them left out, then each alone
        names = ", ".join(f"{item.knob}={item.value}" for item in group)
        without = [t for t in same
                   if all(t["config"].get(item.knob, defaults[item.knob]) == defaults[item.knob] for item in group)]
        if not without:
            lines.append(f"the study measured no trial at batch size {config.batch_size}, amp={config.amp} "
                         f"without {names}.")
            continue
        best = max(without, key=lambda t: t["samples_per_s"])
        described = Config.from_dict(best["config"]).describe()
        lines.append(f"the study's best trial without {names} ({described}): {_rate(best['samples_per_s'])} "
                     f"({best['samples_per_s'] / tuned:.1%} of it; one trial's measurement, not re-measured).")
    return lines


def _notes(recipe: str, profile: dict[str, Any], config: Config, target: str) -> list[str]:
    notes = [
        f"batch size {config.batch_size} is per process: N processes (torchrun, DDP) train on N x {config.batch_size} "
        f"per step; the rate for that global batch is load_tuned({recipe!r}, world_size=N).lr "
        f"({profile.get('lr_rule', 'linear')} rule).",
    ]
    if profile.get("lr") is not None:
        notes.append(f"learning rate {profile['lr']:g} is for the workload's own optimizer; "
                     + ("Trainer builds AdamW unless given optimizers=(...)." if target == "hf" else
                        "build it with this rate."))
    check = profile.get("parity") or {}
    if check.get("checked"):
        verdict = "trains like the baseline" if check.get("passed") else "was found to train differently"
        notes.append(f"the parity check says this config {verdict} (tolerance ±{check['tolerance']:.0%}).")
    if profile.get("cpu_share") is not None:
        notes.append(f"tuned with {profile['cpu_share']} CPU cores; processes sharing a host's cores: tune one's "
                     f"share with `autotune search --recipe {recipe} --cpus N`.")
    return notes


def _call(name: str, kwargs: dict[str, Any], indent: str = "    ") -> list[str]:
    if not kwargs:
        return [f"{name}()"]
    return [f"{name}("] + [f"{indent}{k}={v!r}," for k, v in kwargs.items()] + [")"]


def render(item: Export) -> str:
    """An export as the lines a user pastes, with comments for what is set elsewhere and what is lost."""
    head = f"# {item.recipe}, profile {item.hardware!r}, for "
    lines: list[str]
    if item.target == "hf":
        lines = [head + "Hugging Face Trainer", "from transformers import TrainingArguments", ""]
        lines += _call("args = TrainingArguments", {"output_dir": "out", **item.kwargs})
    elif item.target == "lightning":
        lines = [head + "Lightning", "import lightning as L", "from torch.utils.data import DataLoader", ""]
        lines += _call("trainer = L.Trainer", item.kwargs)
        lines += _call("train_loader = DataLoader", {"dataset": _Raw("train_dataset"), **item.loader_kwargs})
        lines.append("# in configure_optimizers(): your optimizer at lr=" + _lr_of(item))
    else:
        collate = collate_arg(item.config, item.batches)
        imports = ["import functools"] if collate is not None and collate.startswith("functools.") else []
        lines = [head + "plain PyTorch", *imports, "import torch", "from torch.utils.data import DataLoader", ""]
        made = {"dataset": _Raw("train_dataset"), **item.loader_kwargs}
        if collate is not None:
            made["collate_fn"] = _Raw(collate)
        lines += _call("loader = DataLoader", made)
        lines += loop_lines(item.config, item.hardware, _lr_of(item), item.batches)
    if item.code:
        lines += ["", "# set in your own code:"] + [f"#   {k}: {line}" for k, line in item.code.items()]
    if item.lost:
        lines += ["", "# not expressible here (tuned_loader/tuned_step apply them), and what that costs:"]
        lines += [f"#   {lost.knob}={lost.value}: {lost.what}" for lost in item.lost]
        lines += [f"#   {line}" for line in item.cost]
    lines += ["", *[f"# {note}" for note in item.notes]]
    return "\n".join(lines)


class _Raw(str):
    """A name printed as code, not as a string literal."""

    def __repr__(self) -> str:
        return str(self)


def _lr_of(item: Export) -> str:
    return f"{item.lr!r}" if item.lr is not None else "the workload's own"


def _find_study_trials(study: str | None, storage: str | optuna.storages.BaseStorage | None
                       ) -> list[dict[str, Any]] | None:
    """Complete trials' config and samples/s, or None when the study is not at hand."""
    if study is None or storage is None:
        return None
    missing = isinstance(storage, str) and storage.startswith("sqlite:///") and not Path(
        storage.removeprefix("sqlite:///")).exists()
    if missing:
        return None  # opening it would create an empty database file
    import optuna

    try:
        loaded = optuna.load_study(study_name=study, storage=storage)
    except Exception:  # no such study or storage: the export says the study is not at hand
        return None
    return [
        {"config": t.user_attrs["config"], "samples_per_s": t.value}
        for t in loaded.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        if "config" in t.user_attrs and t.value is not None
    ]


def export(recipe: str, target: str, hardware: str | None = None,
           storage: str | optuna.storages.BaseStorage | None = None,
           open_local: Callable[[str], optuna.storages.BaseStorage] | None = None) -> list[Export]:
    """Every profile of `recipe`'s tuned file (or the one for `hardware`) in `target`'s terms.

    `recipe`: a recipe name or path, or a ``.tuned.toml`` file (its workload is the recipe the file names).
    `storage`: the study's Optuna storage, or its URL; default, the search's own SQLite file (.autotune/NAME.db)
    when it is here. `autotune export --storage URL` opens it as search and report do, so a URL it cannot open is
    an error there. Raises TunedFileError for a tuned file that is missing or invalid, ValueError for a hardware it
    lacks. `open_local(url)` opens the search's own SQLite file when no `storage` is given (``autotune export``
    opens it as report does, so a damaged file is refused, not passed over as a study not at hand).
    """
    from autotune.workloads import load, resolve

    if target not in TARGETS:
        raise ValueError(f"target must be one of {', '.join(TARGETS)}, but got {target!r}")
    if recipe.endswith(".toml"):  # a tuned file itself (a result kept elsewhere); its workload by the name it holds
        path = Path(recipe)
        data = tuned_file.read(path)
        ref = resolve(data.get("recipe") or path.name.removesuffix(".tuned.toml"))
    else:
        ref = resolve(recipe)
        path = ref.tuned_path
        if not path.exists():
            raise tuned_file.TunedFileError(f"no tuned file at {path}: run `autotune search --recipe {recipe}`")
        data = tuned_file.read(path, ref.name)
    profiles = data.get("profiles", {})
    if hardware is not None and hardware not in profiles:
        raise ValueError(f"{path} has no profile for {hardware!r}; it has {', '.join(map(repr, profiles))}")
    workload = load(ref)
    batches = Batches(collate_fn=workload.collate_fn is not None, compute_loss=workload.compute_loss is not None)
    local = Path(".autotune") / f"{ref.name}.db"
    if storage is None and local.exists():
        url = f"sqlite:///{local.resolve()}"
        storage = open_local(url) if open_local is not None else url
    return [
        export_profile(ref.name, name, profile, target, bool(workload.default("shuffle")),
                       bool(workload.default("drop_last")), _find_study_trials(profile.get("study"), storage), batches)
        for name, profile in profiles.items()
        if hardware is None or name == hardware
    ]
