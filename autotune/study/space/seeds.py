"""The configs a study measures first: the baseline and a few informed guesses.

The sampler learns nothing from an empty study; queued first, these put a good
config in the study early, and the baseline (the workload's own settings)
first of all, since every speed-up is stated against it.
"""

from __future__ import annotations

from autotune.config import Config
from autotune.knobs import Machine
from autotune.study.space.domains import Space
from autotune.workloads import Workload
from autotune.workloads.settings import baseline_config


def seed_configs(workload: Workload, machine: Machine, space: Space) -> list[Config]:
    """The baseline and a few informed configs, queued first so a good config is measured early."""
    bs = workload.defaults["batch_size"]
    workers = min(8, machine.cpu_share)
    amp = "bf16" if "bf16" in machine.amp_dtypes else next(iter(machine.amp_dtypes), "off")
    base = baseline_config(workload, machine.cuda)
    few_shapes: list[Config] = []
    if "bucketing" not in space.excluded or "pad_multiple" not in space.excluded:
        # Text of spread lengths: a random batch of 256 is mostly padding (81% for text_transformer) and nearly
        # every batch a new shape. Grouped by length and padded to a multiple of 64, a batch pads little and
        # takes one of few shapes, so per-shape costs (cuDNN attention plans in bf16) are paid a few times only.
        # Measured right after the baseline: where these knobs apply, padding is the largest waste.
        few_shapes = [
            Config(batch_size=bs * k, num_workers=workers, pin_memory=True, persistent_workers=True,
                   prefetch_factor=4, cudnn_benchmark=True, amp=precision, bucketing=True, pad_multiple=64)
            for k in (1, 8)
            for precision in (amp, "off")
        ]
    # A worker on every core but one: the loop's own process (its Python loop, the pinning thread, taking in the
    # workers' batches) needs a core too. By hand on H200 hosts with 16 cores, ResNet-50 on JPEGs in bf16 ran
    # 3,609/s and 3,006/s with 15 workers where 16 ran 3,578/s and 2,729/s (lab/results/h200_one_gpu).
    all_cores = dict(num_workers=max(1, machine.cpu_share - 1), pin_memory=True, persistent_workers=True,
                     prefetch_factor=4)
    # Data on the device and the whole step in one graph: the known-fast loop wherever the data set fits there,
    # measured first. On an H200, cifar10_resnet18 at batch 128 ran 58,872/s so, 32,015/s at best streaming; when
    # these came after the streaming seeds, a 150 s search ran out of time before the fp32 and fp16 ones, and its
    # bf16 one failed the parity check. The 8x batch in fp32 as well: on a small model the casts cost more than
    # the tensor cores save (mnist_cnn on an H200: 1.73M samples/s in fp32, 1.52M in bf16). Where the data set
    # cannot be kept on the device, none: clipped to a stream, they would be 0-worker loops.
    on_device = [
        Config(batch_size=bs, placement="device", cuda_graph=True, cudnn_benchmark=True, amp=amp),
        Config(batch_size=bs * 8, placement="device", cuda_graph=True, cudnn_benchmark=True, amp=amp),
        Config(batch_size=bs * 8, placement="device", cuda_graph=True, cudnn_benchmark=True),
        Config(batch_size=bs * 2, placement="device", cuda_graph=True, amp="fp16"),
    ] if "device" in space.domains["placement"] else []
    # The compiled step, captured whole in the graph (autotune.loop.compiled), where the space may compile: on an
    # H200, ResNet-50 at batch 256 in bf16 trained 6,700/s compiled against 4,735/s in a graph on batches already on
    # the device (issue 43), so a streamed loop that keeps up with it is the one to find: fed by uint8 images, and by
    # both the cores and the device decoding where the device can. Queued after the first streamed seeds, whose rates
    # give the pruner something to judge a compiling trial by, and before the larger batches: in an 8-minute search of
    # ResNet-50, seeds at the end may never run.
    compiled = [
        Config(batch_size=bs, placement="device", cuda_graph=True, cudnn_benchmark=True, amp=amp, compile="default"),
        Config(batch_size=bs, **all_cores, cudnn_benchmark=True, channels_last=True, amp=amp, device_normalize=True,
               cuda_graph=True, compile="default"),
    ] if "default" in space.domains["compile"] else []
    if compiled and not on_device:
        compiled.pop(0)  # clipped to a stream, the device-resident one would be a 0-worker loop, as on_device's would
    if compiled and "gpu" in space.domains["decode"]:
        compiled.append(Config(batch_size=bs, **all_cores, cudnn_benchmark=True, channels_last=True, amp=amp,
                               decode="gpu", decode_share=0.5, cuda_graph=True, compile="default"))
    candidates = [
        base,
        *few_shapes,
        *on_device,
        # Every loader and loop knob on at the workload's own batch size: it fits wherever the workload's own
        # settings fit, and needs no parity run of its batch size, so it still stands when every larger batch
        # fails the check. The workers hand over uint8 images where the space has that knob (a quarter of the
        # bytes, and no float arithmetic on the CPU); then the same with JPEGs decoded on the device (on an H200
        # with 5 cores, 3.5x the host-decoded config by hand). Measured before any larger batch: ResNet-50's
        # seeds at batch 2048 (out of memory) and 1024 (over the trial's time limit) took 164 s of an 8-minute
        # search on an H200 when they came first.
        Config(batch_size=bs, **all_cores, cudnn_benchmark=True, channels_last=True, amp=amp, device_normalize=True),
        Config(batch_size=bs, **all_cores, cudnn_benchmark=True, channels_last=True, amp=amp, decode="gpu"),
        *compiled,
        # The baseline's arithmetic with every knob that keeps it: the winner when the parity check cannot tell
        # (a heavy model learns too little in the check's share of the search to judge a batch size by, or amp
        # when its gradients do not pass the numerics check), and it needs no parity run.
        Config(batch_size=bs, **all_cores, cudnn_benchmark=True, channels_last=True, cuda_graph=True),
        # The same with JPEGs decoded on the device: it passes such a check too once the inputs check has shown
        # that the device path's images match the host pipeline's (autotune.parity.inputs).
        Config(batch_size=bs, **all_cores, cudnn_benchmark=True, channels_last=True, cuda_graph=True, decode="gpu"),
        # Half of each batch decoded by the workers, half on the device: both the cores and the device make images,
        # where either alone falls behind a fast step (autotune.loop.hybrid_decode).
        Config(batch_size=bs, **all_cores, cudnn_benchmark=True, channels_last=True, amp=amp, decode="gpu",
               decode_share=0.5),
        # The second seed's advice: bigger batches, 8 pinned persistent workers, cudnn.benchmark.
        Config(
            batch_size=bs * 8,
            num_workers=workers,
            pin_memory=True,
            persistent_workers=True,
            prefetch_factor=2,
            cudnn_benchmark=True,
        ),
        # Every loader and loop knob on, for workloads whose data must stream.
        Config(batch_size=bs * 4, **all_cores, cudnn_benchmark=True, channels_last=True, amp=amp, cuda_graph=True),
    ]
    seeds: list[Config] = []
    for config in candidates:
        clipped = space.clip(config)
        if space.params(clipped) is not None and clipped not in seeds:
            seeds.append(clipped)
    return seeds
