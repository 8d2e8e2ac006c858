"""The knob vocabulary every package may import: the knobs, what the machine and the data allow.

The bottom layer: plain names and data, no Optuna, no other autotune package.
``autotune.study.space.domains`` builds a search space from them; trials, the tuned
file and the diagnosis read the same names.
"""

from __future__ import annotations

import dataclasses
import math
import os

from autotune.errors import AutotuneError

KNOBS = (
    "placement",
    "batch_size",
    "num_workers",
    "pin_memory",
    "persistent_workers",
    "prefetch_factor",
    "decode",
    "decode_share",
    "device_normalize",
    "bucketing",
    "pad_multiple",
    "cudnn_benchmark",
    "channels_last",
    "amp",
    "cuda_graph",
    "compile",
)
BOOL_KNOBS = ("pin_memory", "persistent_workers", "device_normalize", "bucketing", "cudnn_benchmark", "channels_last",
              "cuda_graph")
INT_KNOBS = ("batch_size", "num_workers", "prefetch_factor", "pad_multiple")
# Knobs of the DataLoader: a device-resident data set has none (it slices its own batches, in its own order, from
# rows of one shape, so there is nothing to pad or group).
STREAM_KNOBS = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor", "decode", "decode_share",
                "device_normalize", "bucketing", "pad_multiple")
PREFETCH_RANGE = (1, 8)  # batches each worker keeps in flight
BATCH_EXPONENTS = range(-2, 7)  # batch sizes from 1/4x to 64x the workload's own
DEVICE_MEMORY_SHARE = 0.25  # a device-resident data set may take this much of the device's memory
IO_BOUND_WORKERS_PER_CORE = 4  # the most workers per core, however little CPU a sample costs
BUSY_SHARE = 0.5  # a worker whose loading keeps its core at least this busy gets no second worker on the core


class SpaceError(AutotuneError, ValueError):
    """A --fix that names an unknown knob or a value outside its domain."""


@dataclasses.dataclass(frozen=True)
class Machine:
    """What the search may use here."""

    hardware: str  # profile key: the GPU model, or "cpu"
    cuda: bool
    cpu_share: int  # CPU cores this worker may give DataLoader workers
    amp_dtypes: tuple[str, ...]  # autocast dtypes the device supports
    memory_bytes: int  # device memory (CUDA) or host memory (CPU)
    compiler_missing: str = ""  # why torch.compile cannot compile for the device here (compiler_missing); "": it can
    amp_missing: str = ""  # why amp is left out here (a CPU without bf16 instructions: cpu_bf16_missing); "": it is not


@dataclasses.dataclass(frozen=True)
class DataFacts:
    """What the data set allows; measured once in the parent before the study."""

    size: int  # samples
    sample_bytes: int  # bytes of one transformed sample, as its batch holds it
    image_4d: bool  # a batch holds an N x C x H x W floating tensor
    static_shapes: bool  # batches of one size have one signature: a graph can replay them
    deterministic: bool  # the transform gives the same tensor twice
    device_dataset: bool  # the workload gives a deterministic data set + device_augment
    load_cpu_share: float = 1.0  # CPU time over wall time of loading a sample: below 1, a worker waits (on I/O)
    varying: str = ""  # how batches differed in shape or structure, when they did
    unstackable: str = ""  # why a batch's rows cannot be kept as tensors on the device, when they cannot
    load_cpu_s: float = 0.0  # CPU seconds one process spends to make one sample (0: not measured)
    gpu_decode: str = ""  # the device decode path derived from the transform (workloads.decode), in one line
    gpu_decode_refused: str = ""  # why there is none, when the transform was read and could not be translated
    device_normalize: str = ""  # the transform's tail the device can run instead of the workers (workloads.pixels)
    device_normalize_refused: str = ""  # why it cannot, when the transform was read and cannot be cut
    # Why pad_multiple / bucketing are left out ("": offered); trial.facts reads them off the workload.
    pad_refused: str = "the workload's collate_fn was not read"
    bucket_refused: str = "the workload's sample_lengths was not read"
    sample_shapes: str = ""  # each tensor of a sample, as its first batch holds it: "1x28x28 float32, - int64"
    # A stream (an IterableDataset, autotune.streams): its kind, shards and length in one line; "" for a data set
    # read by index. Its `size` is one pass: the workload's samples_per_epoch, else its len(), else 0 (unknown).
    stream: str = ""
    shards: int | None = None  # a stream's shards, where it says how many
    world_size: int = 1  # the processes (torchrun ranks) that will split those shards between them
    # Worker counts that lose or repeat the stream's samples over a pass (autotune.streams.passes), and why.
    stream_refused: tuple[tuple[int, str], ...] = ()
    stream_checked: str = ""  # what the pass check read ("its first 8 of 64 shards, ..."), "" before it ran
    stream_declared: int = 0  # a stream's pass as its workload declares it (samples_per_epoch, else len()); 0: none
    # The stream's own order changes from pass to pass (an unseeded shuffle buffer): every epoch of the workload's own
    # run sees another order, so a worker count's interleaving of the same samples is one more of those.
    stream_reorders: bool = False

    @property
    def workers_set_order(self) -> bool:
        """Whether the worker count sets the order training sees: on a stream whose own order is the same every
        pass, it does; a data set read by index is ordered by its sampler, whatever the workers."""
        return bool(self.stream) and not self.stream_reorders


def max_workers(cpu_share: int, load_cpu_share: float) -> int:
    """The most DataLoader workers worth trying: the cores, or more when a worker mostly waits.

    A worker that keeps a core busy gains nothing from a second on the same core; one that
    spends most of a sample waiting (a network file system, an object store) leaves the core
    to others. So the range follows the measured CPU use: cores / share, at most 4x the cores.

    >>> max_workers(16, 1.0), max_workers(16, 0.25), max_workers(2, 0.01)
    (16, 64, 8)
    """
    if load_cpu_share >= BUSY_SHARE:
        return cpu_share
    return min(math.ceil(cpu_share / max(load_cpu_share, 1e-9)), IO_BOUND_WORKERS_PER_CORE * cpu_share)


def detect_machine(device_index: int = 0, cpu_share: int | None = None) -> Machine:
    import torch

    cores = cpu_share or len(os.sched_getaffinity(0))
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device_index >= max(count, 1):
        have = f"{count} CUDA device(s) (0..{count - 1})" if count else "no CUDA device"
        raise SpaceError(f"--device {device_index} does not exist: this machine has {have}; tuning on another "
                         f"device than the one asked for would write a profile for the wrong hardware.")
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(device_index)
        dtypes = ("bf16", "fp16") if torch.cuda.is_bf16_supported() else ("fp16",)
        return Machine(props.name, True, cores, dtypes, props.total_memory, compiler_missing())
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    # CPU autocast runs bf16; fp16 autocast on a CPU is slower than fp32 nearly everywhere.
    missing = cpu_bf16_missing()
    return Machine("cpu", False, cores, () if missing else ("bf16",), memory, amp_missing=missing)


def cpu_bf16_missing() -> str:
    """Why bf16 autocast is left out on this CPU; "" where it has the instructions oneDNN runs bf16 with.

    Without them bf16 is emulated, many times slower than fp32, and a search spends its time on bf16 seeds
    (docs/workloads.md, "The knobs"). ``AUTOTUNE_CPU_BF16=1`` offers it whatever this finds (a CPU torch cannot
    read), ``=0`` leaves it out.
    """
    import torch

    forced = os.environ.get("AUTOTUNE_CPU_BF16")
    if forced is not None:
        if forced not in ("0", "1"):
            raise SpaceError(f"AUTOTUNE_CPU_BF16 must be 1 (offer bf16 on this CPU) or 0 (leave it out), but got "
                             f"{forced!r}.")
        return "" if forced == "1" else "left out by AUTOTUNE_CPU_BF16=0"
    try:
        supported = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a build without oneDNN: cannot tell, so the trials measure it
        return ""
    if supported:
        return ""
    return (f"this CPU has no bf16 instructions (AVX-512 or AMX; torch reads its vector instructions as "
            f"{torch.backends.cpu.get_cpu_capability()}): bf16 would be emulated, far slower than fp32; "
            f"AUTOTUNE_CPU_BF16=1 offers it anyway")


def compiler_missing() -> str:
    """Why compile is left out of the space on this CUDA machine; "" where Inductor can compile for it.

    Inductor writes a CUDA step's kernels in Triton: without the ``triton`` package (a CUDA wheel of torch
    brings it; a build from source may not) every compile would fail, and the search would learn so trial by trial.
    """
    import torch
    from torch.utils._triton import has_triton

    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile"
    if not has_triton():
        return "Inductor needs the triton package to compile for a CUDA device, and it is not installed"
    return ""
