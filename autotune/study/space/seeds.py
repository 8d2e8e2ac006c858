"""The configs a study measures first: the baseline and a few informed guesses.

The sampler learns nothing from an empty study; queued first, these put a good
config in the study early, and the baseline (the workload's own settings)
first of all, since every speed-up is stated against it. Their order is the
order in which they pay off most often (docs/search.md#seeds).
"""

from __future__ import annotations

from typing import Any

from autotune.config import Config
from autotune.knobs import Machine
from autotune.study.space.domains import Space
from autotune.workloads import Workload
from autotune.workloads.settings import baseline_config


def seed_configs(workload: Workload, machine: Machine, space: Space) -> list[Config]:
    """The baseline and a few informed configs, queued first so a good config is measured early."""
    bs = workload.defaults["batch_size"]
    amp = "bf16" if "bf16" in machine.amp_dtypes else next(iter(machine.amp_dtypes), "off")
    on_device = _on_device(space, bs, amp)
    candidates = [
        baseline_config(workload, machine.cuda),
        *_few_shapes(space, bs, amp, min(8, machine.cpu_share)),
        *on_device,
        *_streamed(machine, space, bs, amp, compiled=_compiled(machine, space, bs, amp, bool(on_device))),
    ]
    seeds: list[Config] = []
    for config in candidates:
        clipped = space.clip(config)
        if space.params(clipped) is not None and clipped not in seeds:
            seeds.append(clipped)
    return seeds


def _all_cores(machine: Machine) -> dict[str, Any]:
    """Pinned persistent workers on every core but one: the loop's own process needs a core too."""
    return dict(num_workers=max(1, machine.cpu_share - 1), pin_memory=True, persistent_workers=True, prefetch_factor=4)


def _few_shapes(space: Space, bs: int, amp: str, workers: int) -> list[Config]:
    """Text of spread lengths grouped by length and padded to a multiple of 64: little padding and few shapes, so
    per-shape costs are paid a few times only. Where these knobs apply, padding is the largest waste."""
    if "bucketing" in space.excluded and "pad_multiple" in space.excluded:
        return []
    return [
        Config(batch_size=bs * k, num_workers=workers, pin_memory=True, persistent_workers=True,
               prefetch_factor=4, cudnn_benchmark=True, amp=precision, bucketing=True, pad_multiple=64)
        for k in (1, 8)
        for precision in (amp, "off")
    ]


def _on_device(space: Space, bs: int, amp: str) -> list[Config]:
    """Data on the device and the whole step in one graph: the known-fast loop wherever the data set fits there.

    The 8x batch in fp32 as well: on a small model the casts can cost more than the tensor cores save. Where the data
    set cannot be kept on the device, none: clipped to a stream, they would be 0-worker loops.
    """
    if "device" not in space.domains["placement"]:
        return []
    return [
        Config(batch_size=bs, placement="device", cuda_graph=True, cudnn_benchmark=True, amp=amp),
        Config(batch_size=bs * 8, placement="device", cuda_graph=True, cudnn_benchmark=True, amp=amp),
        Config(batch_size=bs * 8, placement="device", cuda_graph=True, cudnn_benchmark=True),
        Config(batch_size=bs * 2, placement="device", cuda_graph=True, amp="fp16"),
    ]


def _compiled(machine: Machine, space: Space, bs: int, amp: str, on_device: bool) -> list[Config]:
    """The compiled step, captured whole in the graph, where the space may compile: fed from the device, by uint8
    images from the workers, and by the cores and the device decoding together where the device can."""
    if "default" not in space.domains["compile"]:
        return []
    cores = _all_cores(machine)
    compiled = [
        Config(batch_size=bs, **cores, cudnn_benchmark=True, channels_last=True, amp=amp, device_normalize=True,
               cuda_graph=True, compile="default"),
    ]
    if on_device:  # clipped to a stream, the device-resident one would be a 0-worker loop
        compiled.insert(0, Config(batch_size=bs, placement="device", cuda_graph=True, cudnn_benchmark=True, amp=amp,
                                  compile="default"))
    if "gpu" in space.domains["decode"]:
        compiled.append(Config(batch_size=bs, **cores, cudnn_benchmark=True, channels_last=True, amp=amp,
                               decode="gpu", decode_share=0.5, cuda_graph=True, compile="default"))
    return compiled


def _streamed(machine: Machine, space: Space, bs: int, amp: str, compiled: list[Config]) -> list[Config]:
    """Loops fed by DataLoader workers: the workload's own batch first (it needs no parity run of its batch size, so
    it stands when every larger batch fails the check), the compiled step after the first two of them (their rates
    give the pruner something to judge a compiling trial by), larger batches last."""
    cores = _all_cores(machine)
    return [
        # Every loader and loop knob on; the workers hand over uint8 images, then JPEGs decoded on the device.
        Config(batch_size=bs, **cores, cudnn_benchmark=True, channels_last=True, amp=amp, device_normalize=True),
        Config(batch_size=bs, **cores, cudnn_benchmark=True, channels_last=True, amp=amp, decode="gpu"),
        *compiled,
        # The baseline's arithmetic with every knob that keeps it: the winner when the parity check cannot tell.
        Config(batch_size=bs, **cores, cudnn_benchmark=True, channels_last=True, cuda_graph=True),
        # The same with JPEGs decoded on the device, once the inputs check shows the images match the host's.
        Config(batch_size=bs, **cores, cudnn_benchmark=True, channels_last=True, cuda_graph=True, decode="gpu"),
        # Half of each batch decoded by the workers, half on the device (autotune.loop.hybrid_decode).
        Config(batch_size=bs, **cores, cudnn_benchmark=True, channels_last=True, amp=amp, decode="gpu",
               decode_share=0.5),
        # The advice of the article on GPU bottlenecks the project began from (its parameter-sensitivity stage):
        # bigger batches, 8 pinned persistent workers, cudnn.benchmark.
        Config(batch_size=bs * 8, num_workers=min(8, machine.cpu_share), pin_memory=True, persistent_workers=True,
               prefetch_factor=2, cudnn_benchmark=True),
        # Every loader and loop knob on, for workloads whose data must stream.
        Config(batch_size=bs * 4, **cores, cudnn_benchmark=True, channels_last=True, amp=amp, cuda_graph=True),
    ]
