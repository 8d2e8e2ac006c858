"""The loop valued from its parts: a predicted rate per config, and an interference factor learned from the trials.

A loop runs at about the slower of its step on batches already on the device and
its loader alone (the bottleneck-attribution stage of the GPU-bottleneck article
the project began from), where the two overlap: DataLoader
workers, or data kept on the device. Where one process does both in turn (no
workers), at their harmonic sum. Both parts are cheap to measure
(``autotune.trial.parts``), and a step rate serves every config with the same step
knobs (batch size, amp, channels_last, cuda_graph, and any later knob of the
step), a loader rate every config with the same loader knobs. What the parts miss
(a worker that takes a core from the loop's own process, the copy competing with
the step) is learned as one interference factor: the median, over the configs
measured end to end, of measured over predicted. Plumber (MLSys'22) and tf.data's
AUTOTUNE value a pipeline from per-stage rates the same way; DeepSpeed's autotuner
measures only what such a model ranks high.

A predicted rate is labelled so wherever it is stated: the trial's
``predicted_samples_per_s`` attribute, the trial line, the study's ``valuation``
attribute. Every stated rate of a winner comes from an end-to-end measurement.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import TYPE_CHECKING, Any

from autotune.config import LOADER_KNOBS, Config
from autotune.streams.shares import pass_share
from autotune.text import rate
from autotune.trial.oom import OOM

if TYPE_CHECKING:
    from autotune.procs.pool import TrialPool

VALUATION_ATTRIBUTE = "valuation"  # the study's user attribute: Valuation.record()
VALUED = "skipped, valued from its parts"  # how a trial's reason begins when its predicted rate ruled it out
TRUSTED_ERROR = 0.25  # the prediction rules configs out only while its median error on measured ones is within this
MIN_MARGIN = 0.15  # a config predicted within this share of the best measured is measured, however exact the model
# A step part's compile is taken as the whole compile only at more than this many times what it took again in its
# process: ResNet-50 on an H100 took 41.5 s cold and 1.8 s again; a part served by another part's caches, about as
# long as again
WHOLE_COMPILE = 2.0
# The loader's side of a config: what decides how fast batches are made and handed over. Every other knob is the
# step's (batch size, amp, channels_last, cuda_graph, and whatever knob of the step comes later, compile).
# decode_share too: the workers decode the share the device does not (autotune.loop.hybrid_decode).
LOADER_SIDE = (*LOADER_KNOBS, "batch_size", "placement", "decode", "decode_share", "bucketing", "pad_multiple")
# What the step on device-resident batches never sees: how the loader made them. Decoded on the device, normalised
# there or by the workers, a batch reaches the step as the same float tensor of the same layout (the loaders of
# autotune.loop.device_decode and device_normalize run their device work as the loader's, not the step's), so one
# step rate serves every decode path: one compile of ResNet-50 values the compiled step fed by each of them.
STEP_UNSEEN = (*LOADER_KNOBS, "decode", "decode_share")


def step_key(config: Config) -> tuple[tuple[str, Any], ...]:
    """What a step rate depends on: every knob of the step, the batch's size and layout, where the data set is."""
    return tuple((k, v) for k, v in config.as_dict().items() if k not in STEP_UNSEEN)


def loader_key(config: Config) -> tuple[tuple[str, Any], ...]:
    return tuple((k, getattr(config, k)) for k in LOADER_SIDE) + (("channels_last", config.channels_last),)


def combine(config: Config, step: float, loader: float) -> float:
    """The loop's rate from its parts, before interference: overlapped where workers or the device make batches."""
    if config.placement == "stream" and config.num_workers == 0:
        return 1.0 / (1.0 / step + 1.0 / loader)  # one process loads, then steps, in turn
    return min(step, loader)


def seconds_of(parts: dict[str, dict[str, float]]) -> str:
    """Where a part measurement's seconds went, as the plan's line of it says: what a heavy model's part costs.

    >>> seconds_of({"step": {"samples_per_s": 3942.0, "build_s": 0.41, "first_batch_s": 2.1, "warmup_s": 1.9,
    ...                      "warmup_steps": 3, "seconds": 0.9, "compile_s": 0.0}})
    'step 3,942/s (build 0.4 s, first batch 2.1 s, 3 warm-up steps 1.9 s, windows 0.9 s)'
    """
    said = []
    for name, part in parts.items():
        spent = [f"build {part.get('build_s', 0.0):.1f} s"]
        if "first_batch_s" in part:
            spent.append(f"first batch {part['first_batch_s']:.1f} s")
        if part.get("compile_s"):
            spent.append(f"compile {part['compile_s']:.1f} s")
        if "recompile_s" in part:
            spent.append(f"again from the compile cache {part['recompile_s']:.1f} s")
        if "warmup_steps" in part:
            spent.append(f"{int(part['warmup_steps'])} warm-up steps {part.get('warmup_s', 0.0):.1f} s")
        elif "warmup_s" in part:
            spent.append(f"first batches {part['warmup_s']:.1f} s")
        if part.get("backlog_steps"):
            spent.append(f"{int(part['backlog_steps'])} prefetched batches taken")
        spent.append(f"windows {part.get('seconds', 0.0):.1f} s")
        said.append(f"{name} {rate(float(part['samples_per_s']))}/s ({', '.join(spent)})")
    return "; ".join(said)


def cut_by_clock(why: str | None, shortened: bool) -> bool:
    """A part measurement that timed out within a time the search's clock cut short (``deadline.part_timeout``): it
    says nothing of the config."""
    return shortened and why is not None and why.startswith("timeout")


@dataclasses.dataclass
class Valuation:
    """Every part measured so far, and what the end-to-end trials said of the predictions made from them."""

    steps: dict[tuple[tuple[str, Any], ...], float] = dataclasses.field(default_factory=dict)
    loaders: dict[tuple[tuple[str, Any], ...], float] = dataclasses.field(default_factory=dict)
    ratios: list[float] = dataclasses.field(default_factory=list)  # measured / raw prediction, per measured config
    errors: list[float] = dataclasses.field(default_factory=list)  # predicted / measured - 1, before learning it
    # ("step" or "loader", its key) -> why that part could not be measured: it is not asked for again
    failed: dict[tuple[str, tuple[tuple[str, Any], ...]], str] = dataclasses.field(default_factory=dict)
    # compile mode -> the least seconds a step part's compile took in it (autotune.study.planning.compile_cost)
    compiles: dict[str, float] = dataclasses.field(default_factory=dict)
    # a compiled step's key -> the seconds its compile took again in the part's process: what its trial pays there
    # after its part paid the whole compile (autotune.trial.parts.recompile_s); a fresh process pays more
    recompiles: dict[tuple[tuple[str, Any], ...], float] = dataclasses.field(default_factory=dict)
    valued: int = 0  # configs given a predicted rate
    recalled: int = 0  # part rates measured by an earlier search on this host (autotune.study.planning.remembered)
    # compile mode -> the least seconds a compile took in an earlier search on this GPU model (remembered)
    remembered_compiles: dict[str, float] = dataclasses.field(default_factory=dict)
    ruled_out: int = 0  # of them, not measured end to end because of it
    # A stream's shards per rank: a loader rate, measured within a pass, is kept as its rate over whole passes, which
    # its busiest worker's share of the shards sets (autotune.streams.shares). None: read by index, or unknown.
    shards: int | None = None
    last: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)  # the parts `measure` made last

    def missing(self, config: Config) -> list[str]:
        """The parts of `config` not measured yet."""
        return [name for name, known, key in (("step", self.steps, step_key(config)),
                                               ("loader", self.loaders, loader_key(config))) if key not in known]

    def failure(self, config: Config) -> str | None:
        """Why a part of `config` could not be measured, if one could not."""
        keys = (("step", step_key(config)), ("loader", loader_key(config)))
        return next((self.failed[k] for k in keys if k in self.failed), None)

    def too_large(self, config: Config) -> str | None:
        """The out-of-memory reason of `config`'s step, measured alone on one batch on the device: the whole loop
        cannot fit either, and finds out far later end to end (docs/search.md#memory)."""
        why = self.failed.get(("step", step_key(config)))
        return why if why is not None and why.startswith(OOM) else None

    def measure(self, pool: TrialPool, config: Config, lr: float, timeout_s: float, shortened: bool = False
                ) -> str | None:
        """Measure the parts of `config` not known yet, in a trial process; why one could not be, if so.

        `shortened`: the search's clock cut `timeout_s` short of a trial's; a part that times out then says nothing
        of itself, and is not kept as failed.
        """
        missing = self.missing(config)
        self.last = {}
        if not missing or (why := self.failure(config)) is not None:
            return self.failure(config)
        outcome = pool.parts(config, lr, missing, timeout_s)
        if outcome.state != "complete" or outcome.result is None:
            why = outcome.reason or "failed"
            if not cut_by_clock(why, shortened):
                self.failed[("step", step_key(config)) if "step" in missing else ("loader", loader_key(config))] = why
            return why
        self.add(config, outcome.result)
        return None

    def add(self, config: Config, parts: dict[str, dict[str, float]]) -> None:
        self.last = parts
        if "step" in parts:
            self.steps[step_key(config)] = float(parts["step"]["samples_per_s"])
            took = float(parts["step"].get("compile_s") or 0.0)
            again = parts["step"].get("recompile_s")
            # A compile close to what the same step took again was served by what an earlier part of the same
            # graph left (the graph flipped, the same model traced): not what a run that starts afresh pays.
            if took > 0 and config.compile != "off" and (again is None or took > WHOLE_COMPILE * float(again)):
                self.compiles[config.compile] = min(took, self.compiles.get(config.compile, took))
            if again is not None:
                self.recompiles[step_key(config)] = float(again)
        if "loader" in parts:
            share = pass_share(config.num_workers, self.shards)  # 1 without workers (data kept on the device too)
            self.loaders[loader_key(config)] = float(parts["loader"]["samples_per_s"]) * share

    def raw(self, config: Config) -> float | None:
        step, loader = self.steps.get(step_key(config)), self.loaders.get(loader_key(config))
        if not step or not loader:
            return None
        return combine(config, step, loader)

    def factor(self) -> float:
        """The interference factor: measured over predicted, the median over configs measured end to end; 1 before."""
        return statistics.median(self.ratios) if self.ratios else 1.0

    def predict(self, config: Config) -> float | None:
        raw = self.raw(config)
        return None if raw is None else raw * self.factor()

    def learn(self, config: Config, measured: float) -> float | None:
        """Fold an end-to-end measurement in; the prediction's error on it, made before it was known."""
        raw = self.raw(config)
        if raw is None or measured <= 0:
            return None
        error = raw * self.factor() / measured - 1.0
        self.errors.append(error)
        self.ratios.append(measured / raw)
        return error

    def trusted(self) -> bool:
        """The prediction may rule configs out: its median error on the measured ones is within TRUSTED_ERROR."""
        return bool(self.errors) and statistics.median(abs(e) for e in self.errors) <= TRUSTED_ERROR

    def margin(self, clearly_worse: float) -> float:
        """How far under the best measured a prediction must be to rule its config out: twice the prediction's
        median error on the measured ones, at least MIN_MARGIN, at most what the pruner calls clearly worse."""
        error = statistics.median(abs(e) for e in self.errors) if self.errors else 1.0
        return min(1.0 - clearly_worse, max(MIN_MARGIN, 2.0 * error))

    def why_skip(self, config: Config, best: float | None, clearly_worse: float) -> str | None:
        """Why `config` need not be measured end to end: its predicted rate is clearly under the best measured."""
        predicted = self.predict(config)
        if predicted is None or best is None or not self.trusted():
            return None
        floor = 1.0 - self.margin(clearly_worse)
        if predicted >= floor * best:
            return None
        self.ruled_out += 1
        return (f"{VALUED}: predicted {rate(predicted)}/s (step {rate(self.steps[step_key(config)])}/s, loader "
                f"{rate(self.loaders[loader_key(config)])}/s, x{self.factor():.2f}), under {floor:.0%} of "
                f"the best measured {rate(best)}/s")

    def record(self) -> dict[str, Any]:
        """The study's `valuation` attribute: how much was valued, measured, and how far off the prediction was."""
        return {
            "configs_valued": self.valued,
            "configs_ruled_out": self.ruled_out,
            "configs_measured": len(self.errors),
            "interference_factor": round(self.factor(), 3),
            "median_abs_error": round(statistics.median(abs(e) for e in self.errors), 4) if self.errors else None,
            "errors": [round(e, 4) for e in self.errors],
            "step_rates": len(self.steps),
            "loader_rates": len(self.loaders),
            "parts_recalled": self.recalled,
        }

    def summary(self) -> str:
        made = self.record()
        if not self.errors:
            return (f"valuation: {self.valued} config(s) valued from their parts ({len(self.steps)} step rate(s), "
                    f"{len(self.loaders)} loader rate(s)); none measured end to end to compare with")
        worst = max(self.errors, key=abs)
        return (f"valuation: {self.valued} config(s) valued from their parts ({len(self.steps)} step rate(s) on "
                f"device-resident batches, {len(self.loaders)} loader rate(s) alone), {self.ruled_out} ruled out by "
                f"their predicted rate, {len(self.errors)} measured end to end; interference factor "
                f"{self.factor():.2f} (measured over predicted, median); the prediction's error on the measured ones: "
                f"median {made['median_abs_error']:.0%}, worst {worst:+.0%}")
