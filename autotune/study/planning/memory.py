"""Configs that would run out of device memory, known from the ones that did.

A config needs at least the memory of one that failed ``oom`` when it holds at
least as much on the device: a batch as large, a precision as wide (fp32 holds
twice what bf16 and fp16 hold), a CUDA graph if the other had one (its private
pool), JPEGs decoded on the device if the other decoded them on the host, the
data set on the device if the other streamed it, batches grouped by length and
padding to a multiple if the other's were. Memory layout and cuDNN's
algorithm choice move the need by a workspace, so they must match unless the
batch is at least twice the failed one. Loader knobs hold host memory only.
An oom reason is the config's own (``autotune.procs.pool`` measures a trial that
failed beside another autotune process once more alone), so such a config cannot
fit, and running it costs a trial: a large batch fills its first batch before it
fails (docs/search.md#memory).
"""

from __future__ import annotations

from collections.abc import Iterable

from autotune.config import Config
from autotune.study.planning.predict import PREDICTED
from autotune.trial.oom import OOM

RAN_OUT = "which ran out of device memory"  # how a memory skip's reason ends
_WIDTH = {"off": 2, "bf16": 1, "fp16": 1}  # bytes per activation, relative


def holds_at_least(config: Config, failed: Config) -> bool:
    """`config` holds at least what `failed` held on the device (so it cannot fit where that one did not)."""
    if config.batch_size < failed.batch_size or _WIDTH.get(config.amp, 2) < _WIDTH.get(failed.amp, 2):
        return False
    if failed.cuda_graph and not config.cuda_graph:
        return False
    if failed.decode == "gpu" and config.decode != "gpu":
        return False
    if failed.device_normalize and not config.device_normalize:  # its uint8 copy of each batch, besides the floats
        return False
    # Bucketing's longest batch is batch_size samples of the longest lengths, as long as any random batch's; padding
    # to a multiple pads at least as far as padding to any of its divisors. The other way round may hold less.
    if failed.bucketing and not config.bucketing:
        return False
    if failed.pad_multiple and (not config.pad_multiple or config.pad_multiple % failed.pad_multiple):
        return False
    if failed.placement == "device" and config.placement != "device":
        return False
    same_kernels = (config.channels_last, config.cudnn_benchmark) == (failed.channels_last, failed.cudnn_benchmark)
    return same_kernels or config.batch_size >= 2 * failed.batch_size


def why_skip(config: Config, failures: Iterable[tuple[int, Config, str]]) -> str | None:
    """Why `config` cannot fit, from the trials that ran out of memory: (number, config, reason); None if it may."""
    for number, failed, reason in failures:
        if reason.startswith(OOM) and holds_at_least(config, failed):
            return f"{PREDICTED}: it holds at least what trial {number} ({failed.describe()}) held, {RAN_OUT}"
    return None


def summary(reasons: Iterable[str]) -> str | None:
    """One line for the configs skipped as too large, from every trial's reason; None when there were none."""
    skipped = sum(1 for reason in reasons if reason.startswith(PREDICTED) and reason.endswith(RAN_OUT))
    if not skipped:
        return None
    return f"memory: {skipped} config(s) skipped, each holding at least what a config that ran out of memory held"
