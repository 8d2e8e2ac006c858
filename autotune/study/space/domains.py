"""The knobs, their domains and conditions: the only place that calls ``suggest_*``.

A knob that cannot apply here (CUDA-only knobs on a CPU, channels_last on
non-image input, device placement of a data set that does not fit or has a
random transform) is left out of the space with a reason the recipe records.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from autotune.config import (
    AMP_CHOICES,
    COMPILE_CHOICES,
    DECODE_CHOICES,
    DECODE_SHARES,
    PAD_MULTIPLES,
    PLACEMENT_CHOICES,
    Config,
)
from autotune.knobs import (
    BATCH_EXPONENTS,
    BOOL_KNOBS,
    DEVICE_MEMORY_SHARE,
    INT_KNOBS,
    KNOBS,
    PREFETCH_RANGE,
    STREAM_KNOBS,
    DataFacts,
    Machine,
    SpaceError,
    max_workers,
)
from autotune.streams import ranks
from autotune.streams.facts import most_workers

if TYPE_CHECKING:
    import optuna

@dataclasses.dataclass(frozen=True)
class Space:
    """Each knob's allowed values, in order, and the knobs left out with their reasons."""

    domains: dict[str, tuple[Any, ...]]
    excluded: dict[str, str]

    def suggest(self, trial: "optuna.Trial") -> Config:
        """Sample a config; conditional knobs are asked for only when they apply."""
        values: dict[str, Any] = {}
        values["placement"] = self._pick(trial, "placement")
        values["batch_size"] = self._pick(trial, "batch_size")
        if values["placement"] == "stream":
            values["num_workers"] = self._pick(trial, "num_workers")
            values["pin_memory"] = self._pick(trial, "pin_memory")
            values["decode"] = self._pick(trial, "decode")
            if values["decode"] == "gpu":
                values["decode_share"] = self._pick(trial, "decode_share")
            if values["decode"] == "cpu":  # the device decode path makes its float images on the device already
                values["device_normalize"] = self._pick(trial, "device_normalize")
            values["bucketing"] = self._pick(trial, "bucketing")
            values["pad_multiple"] = self._pick(trial, "pad_multiple")
            if values["num_workers"] > 0:
                values["persistent_workers"] = self._pick(trial, "persistent_workers")
                values["prefetch_factor"] = self._pick(trial, "prefetch_factor")
        for knob in ("cudnn_benchmark", "channels_last", "amp", "cuda_graph", "compile"):
            values[knob] = self._pick(trial, knob)
        return Config(**values)

    def _pick(self, trial: "optuna.Trial", knob: str) -> Any:
        domain = self.domains[knob]
        if len(domain) == 1:
            return domain[0]
        try:
            if knob in ("num_workers", "prefetch_factor"):
                return trial.suggest_int(knob, domain[0], domain[-1])
            return trial.suggest_categorical(knob, domain)
        except ValueError as exc:  # Optuna refuses a knob's domain that differs from the study's earlier trials'
            raise SpaceError(
                f"study {trial.study.study_name!r} searched another domain of {knob} than this search's "
                f"({', '.join(map(str, domain))}): the workload or the machine changed since "
                f"({str(exc).rstrip('.')}). Search without --study to start a study for this workload, or name a new "
                f"one."
            ) from exc

    def params(self, config: Config) -> dict[str, Any] | None:
        """The study parameters that make `suggest` return `config`; None if outside the space."""
        params: dict[str, Any] = {}
        for knob, value in self.normalise(config).as_dict().items():
            if knob == "prefetch_factor" and value is None:
                continue
            if knob in STREAM_KNOBS and config.placement == "device":
                continue
            if knob in ("persistent_workers", "prefetch_factor") and config.num_workers == 0:
                continue
            if knob == "device_normalize" and config.decode != "cpu":
                continue
            if knob == "decode_share" and config.decode != "gpu":
                continue
            if value not in self.domains[knob]:
                return None
            if len(self.domains[knob]) > 1:
                params[knob] = value
        return params

    def normalise(self, config: Config) -> Config:
        """Knobs that do not apply take their neutral value, so equal loops compare equal."""
        changes: dict[str, Any] = {}
        if config.placement == "device":
            changes.update(
                num_workers=0, pin_memory=False, persistent_workers=False, prefetch_factor=None, decode="cpu",
                decode_share=1.0,
                device_normalize=False, bucketing=False, pad_multiple=0,
            )
        elif config.num_workers == 0:
            changes.update(persistent_workers=False, prefetch_factor=None)
        elif config.prefetch_factor is None:
            changes.update(prefetch_factor=2)  # DataLoader's own: the same loop as one that says so
        for knob in self.excluded:
            changes[knob] = self.domains[knob][0]
        if changes.get("decode", config.decode) != "cpu":  # the device decode path makes its float images there
            changes.update(device_normalize=False)
        else:  # no device decode: nothing to share
            changes.update(decode_share=1.0)
        return dataclasses.replace(config, **changes)

    def clip(self, config: Config) -> Config:
        """The nearest config inside the space: each value outside its domain replaced."""
        changes: dict[str, Any] = {}
        for knob, value in config.as_dict().items():
            domain = self.domains[knob]
            if value is None or value in domain:
                continue
            if knob in ("batch_size", "num_workers", "prefetch_factor"):
                changes[knob] = min(domain, key=lambda v: abs(v - value))
            else:
                changes[knob] = domain[0]
        clipped = self.normalise(dataclasses.replace(config, **changes))
        if clipped.num_workers > 0 and clipped.placement == "stream" and clipped.prefetch_factor is None:
            clipped = dataclasses.replace(clipped, prefetch_factor=min(2, self.domains["prefetch_factor"][-1]))
        return clipped

    def describe(self) -> list[str]:
        lines = []
        for knob in KNOBS:
            if knob in self.excluded:
                continue
            domain = self.domains[knob]
            if knob in ("num_workers", "prefetch_factor") and len(domain) > 2:
                shown = f"{domain[0]}..{domain[-1]}"
            elif knob == "batch_size" and len(domain) > 2:
                shown = f"{domain[0]}..{domain[-1]} (powers of two)"
            else:
                shown = "/".join(_show(v, knob) for v in domain)
            lines.append(f"{knob}: {shown}")
        return lines


def _show(value: Any, knob: str = "") -> str:
    if knob == "pad_multiple" and value == 0:
        return "off"  # padding to the longest sample, as the collate_fn does by itself
    return {True: "on", False: "off"}.get(value, str(value)) if isinstance(value, bool) else str(value)


def build_space(
    batch_size: int, machine: Machine, facts: DataFacts, fixes: dict[str, tuple[Any, ...]] | None = None
) -> Space:
    """The space for one workload on one machine, narrowed by the user's fixes."""
    cores_most = max_workers(machine.cpu_share, facts.load_cpu_share)
    most, narrowed = _stream_workers(facts, cores_most)
    domains: dict[str, tuple[Any, ...]] = {}
    excluded: dict[str, str] = {}
    scaled = (int(batch_size * 2.0**k) for k in BATCH_EXPONENTS)
    unknown = facts.stream and not facts.size  # a stream of unknown length: any batch size may be drawn from it
    sizes = tuple(b for b in scaled if b >= 1 and (unknown or b * 4 <= facts.size))
    domains["batch_size"] = sizes or (batch_size,)
    domains["num_workers"] = tuple(range(0, most + 1))
    domains["prefetch_factor"] = tuple(range(PREFETCH_RANGE[0], PREFETCH_RANGE[1] + 1))
    domains["persistent_workers"] = (False, True)
    domains["amp"] = ("off",) + tuple(d for d in AMP_CHOICES[1:] if d in machine.amp_dtypes)
    if machine.amp_missing:
        excluded["amp"] = machine.amp_missing
    for knob in ("pin_memory", "cudnn_benchmark", "cuda_graph"):
        domains[knob] = (False, True)
        if not machine.cuda:
            excluded[knob] = "needs CUDA"
    domains["compile"] = COMPILE_CHOICES
    if not machine.cuda:
        # Inductor's C++ code for a CPU step: every trial of every config would pay a compile that no measurement
        # here has shown to pay back.
        excluded["compile"] = "needs CUDA"
    elif machine.compiler_missing:
        excluded["compile"] = machine.compiler_missing
    domains["channels_last"] = (False, True)
    if not facts.image_4d:
        excluded["channels_last"] = "input is not a 4-D image batch"
    if machine.cuda and not facts.static_shapes:
        excluded["cuda_graph"] = (
            f"batches differ in shape ({facts.varying or 'from sample to sample'}); a graph replays one shape"
        )
    domains["placement"] = PLACEMENT_CHOICES
    fits = facts.size * facts.sample_bytes <= DEVICE_MEMORY_SHARE * machine.memory_bytes
    if facts.stream:
        excluded["placement"] = STREAM_PLACEMENT
    elif not fits:
        excluded["placement"] = (
            f"the data set ({facts.size * facts.sample_bytes / 2**30:.1f} GiB) exceeds "
            f"{DEVICE_MEMORY_SHARE:.0%} of {'device' if machine.cuda else 'host'} memory"
        )
    elif facts.unstackable:
        excluded["placement"] = f"a batch cannot be kept on the device as rows of tensors: {facts.unstackable}"
    elif not (facts.deterministic or facts.device_dataset):
        excluded["placement"] = "the transform is random and the workload gives no device_augment"
    domains["decode"] = DECODE_CHOICES
    if not machine.cuda:
        excluded["decode"] = "needs CUDA"
    elif not facts.gpu_decode:
        excluded["decode"] = facts.gpu_decode_refused or "the data set's transform was not read"
    domains["decode_share"] = DECODE_SHARES
    if "decode" in excluded:
        excluded["decode_share"] = excluded["decode"]
    domains["device_normalize"] = (False, True)
    if not machine.cuda:
        excluded["device_normalize"] = "needs CUDA"  # on a CPU the same arithmetic would only move to the loop
    elif not facts.device_normalize:
        excluded["device_normalize"] = facts.device_normalize_refused or "the data set's transform was not read"
    domains["bucketing"] = (False, True)
    if facts.bucket_refused:
        excluded["bucketing"] = facts.bucket_refused
    domains["pad_multiple"] = PAD_MULTIPLES
    if facts.pad_refused:
        excluded["pad_multiple"] = facts.pad_refused
    for knob in excluded:
        domains[knob] = (domains[knob][0],)
    limits = {**excluded, **({"num_workers": narrowed} if narrowed else {})}
    for knob, allowed in (fixes or {}).items():
        domains[knob] = _narrow(knob, domains[knob], allowed, limits)
    return Space(domains, excluded)


STREAM_PLACEMENT = "a stream (IterableDataset) is read as it comes, not kept on the device"


def _stream_workers(facts: DataFacts, cores_most: int) -> tuple[int, str]:
    """The most workers worth trying, of the `cores_most` the cores allow: a stream's within its shards over the
    ranks, less the counts its pass check ruled out; and why, where that is fewer ("": as many). No count at all,
    where the ranks outnumber the shards, is a SpaceError."""
    overlap = ranks.refusal(facts.shards, 0, facts.world_size) if facts.stream else None
    if overlap is not None:  # every config would read shards another rank reads
        raise SpaceError(f"the search assumes WORLD_SIZE={facts.world_size} ranks (torchrun's): {overlap}.")
    most = most_workers(facts, cores_most)
    if most >= cores_most:
        return most, ""
    refused = "; ".join(f"num_workers={w}: {why}" for w, why in facts.stream_refused if w > most)
    return most, refused or (f"the stream's {facts.shards} shard(s) over {facts.world_size} rank(s) bound its "
                             f"workers: num_workers x world size <= shards")


def _narrow(knob: str, domain: tuple[Any, ...], allowed: tuple[Any, ...], excluded: dict[str, str]) -> tuple[Any, ...]:
    outside = [v for v in allowed if v not in domain]
    if outside:
        word = "narrowed" if knob == "num_workers" else "left out"
        why = f" ({knob} is {word} here: {excluded[knob]})" if knob in excluded else ""
        raise SpaceError(
            f"--fix {knob}: {', '.join(_show(v, knob) for v in outside)} is outside its domain "
            f"{{{', '.join(_show(v, knob) for v in domain)}}}{why}."
        )
    return tuple(v for v in domain if v in allowed)


def parse_fix(text: str) -> tuple[str, tuple[Any, ...]]:
    """Parse one --fix: ``knob=value``, ``knob=a,b`` (a subset) or ``knob=lo..hi`` (an int range).

    >>> parse_fix("batch_size=128")
    ('batch_size', (128,))
    >>> parse_fix("num_workers=2..4")
    ('num_workers', (2, 3, 4))
    """
    knob, sep, raw = text.partition("=")
    knob = knob.strip()
    if not sep or not raw.strip():
        raise SpaceError(f"--fix must look like knob=value, knob=a,b or knob=lo..hi, but got {text!r}.")
    if knob not in KNOBS:
        raise SpaceError(f"--fix names unknown knob {knob!r}; the knobs are: {', '.join(KNOBS)}.")
    raw = raw.strip()
    if ".." in raw:
        if knob not in ("batch_size", "num_workers", "prefetch_factor"):
            raise SpaceError(f"--fix {knob}: a range lo..hi needs an integer knob, but got {raw!r}.")
        lo, _, hi = raw.partition("..")
        low, high = _parse_value(knob, lo), _parse_value(knob, hi)
        if low > high:
            raise SpaceError(f"--fix {knob}: `lo <= hi` must hold, but got ({low=}, {high=}).")
        values: tuple[Any, ...] = tuple(range(low, high + 1))
        if knob == "batch_size":
            values = tuple(v for v in values if v & (v - 1) == 0) or (low,)
        return knob, values
    return knob, tuple(_parse_value(knob, part.strip()) for part in raw.split(","))


def _parse_value(knob: str, raw: str) -> Any:
    if knob in BOOL_KNOBS:
        table = {"on": True, "true": True, "1": True, "off": False, "false": False, "0": False}
        if raw.lower() not in table:
            raise SpaceError(f"--fix {knob}: expected on/off, but got {raw!r}.")
        return table[raw.lower()]
    if knob == "pad_multiple" and raw.lower() == "off":
        return 0
    if knob == "decode_share":
        try:
            return float(raw.rstrip("%")) / (100 if raw.endswith("%") else 1)
        except ValueError:
            raise SpaceError(f"--fix decode_share: expected a share such as 0.5 or 50%, but got {raw!r}.") from None
    if knob in INT_KNOBS:
        try:
            return int(raw)
        except ValueError:
            raise SpaceError(f"--fix {knob}: expected an integer, but got {raw!r}.") from None
    choices = {"amp": AMP_CHOICES, "placement": PLACEMENT_CHOICES, "decode": DECODE_CHOICES,
               "compile": COMPILE_CHOICES}[knob]
    if raw not in choices:
        raise SpaceError(f"--fix {knob}: expected one of {', '.join(choices)}, but got {raw!r}.")
    return raw
