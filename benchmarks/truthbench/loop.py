"""The ground truth: a plain PyTorch training loop, timed by hand, with no autotune code in the loop.

A DataLoader, autocast, channels_last and the workload's own optimizer, as a user writes them; ``data`` says what
its workers make. It warms up, skips twice the batches its workers can prefetch, and is timed with the device
synchronised only at the ends.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from autotune.config import Config
from autotune.trial.cputime import cpu_times
from autotune.workloads.decode import translate
from autotune.workloads.locate import data_root

from .data import OnDevice, decoded_ahead, last_stage, worker_data
from .timings import epoch_parts

LONGEST = 3.0  # a hand loop times on to whole epochs' worth unless that takes over this x its seconds (`rows.compared`)
# A stream's warm-up reads on to its first pass end if it comes this soon (through_a_pass_end). A compiled model
# compiles again at that end for its short batches' shapes: webdataset_resnet50's compiled, graphed winner on an
# H100 (a compile of 44 s for its first shape) had not reached that end 120 s after its first batch.
PASS_END_WARM_S = 300.0


def by_hand(workload: Any, config: Config, lr: float, seconds: float, device: torch.device,
            longest: float | None = None) -> dict[str, float]:
    """The ground truth: a plain training loop, timed for at least `seconds` after warm-up and twice the backlog,
    on to whole epochs' worth of batches where that takes at most `longest` seconds in all (by default LONGEST
    times `seconds`; `more_batches`). A stream (an IterableDataset) is read as it comes, its pass the workload's
    `samples_per_epoch`; the time to its first batch is given apart (`first_batch_s`)."""
    longest = LONGEST * seconds if longest is None else longest
    torch.backends.cudnn.benchmark = config.cudnn_benchmark
    torch.manual_seed(0)
    fmt = torch.channels_last if config.channels_last else torch.contiguous_format
    model = workload.build_model().to(device, memory_format=fmt).train()
    optimizer = workload.build_optimizer(model.parameters(), lr)
    if config.compile != "off":  # as a user compiles: the model; its warm-up below compiles it
        model = torch.compile(model, mode=config.compile)
    count = getattr(workload, "count", None) or (lambda batch: len(batch[0]))  # a batch's samples, as it counts them
    dataset = workload.build_dataset(data_root())
    loader, finish, per_epoch = hand_loader(workload, dataset, config, device)
    step, graphed = hand_step(workload, model, optimizer, config, device, finish)
    passes = Passes(loader)
    feed = iter(passes)
    if config.decode == "gpu":
        own = last_stage(dataset).args[0] if passes.stream else dataset.transform
        feed = decoded_ahead(feed, translate(own), device, fmt, finish)
    capacity = config.num_workers * (config.prefetch_factor or 2) if config.num_workers else 0
    taken = 10 + 2 * capacity
    began = time.perf_counter()
    batch = next(feed)
    first_batch_s = time.perf_counter() - began  # the workers' start, a stream's shards opened and its buffer filled
    step(batch)
    for _ in range(taken - 1):  # warm-up (cuDNN autotuning), then twice what the workers can hold ready
        step(next(feed))
    through = passes.stream and per_epoch != ENDLESS and through_a_pass_end(feed, passes, step, 2 * capacity,
                                                                             began + PASS_END_WARM_S)
    sync(device)
    cpu0 = cpu_times()
    start, first = time.perf_counter(), taken  # `first`: the first timed batch's place, counted from the start
    arrived: list[tuple[float, int, int]] = []  # each batch: when the loop had it, its place in its epoch, its size

    def timed_step() -> int:
        batch = next(feed)
        size = count(batch)
        # A stream's pass ends where its workers run out, which its declared pass only estimates.
        place = passes.place if passes.stream else (first + len(arrived)) % per_epoch
        arrived.append((time.perf_counter() - start, place, size))
        step(batch)
        return size

    samples = 0
    while time.perf_counter() - start < seconds:
        samples += timed_step()
    for _ in range(more_batches(time.perf_counter() - start, len(arrived), per_epoch, longest)):
        samples += timed_step()
    sync(device)
    wall = time.perf_counter() - start
    cpu1 = cpu_times()
    # CPU per sample over the timed part: the loop's process (its pinning thread included) and its workers.
    workers_ms = None if cpu0.children_s is None else (cpu1.children_s - cpu0.children_s) / samples * 1e3
    epochs = len(arrived) / per_epoch
    return {"samples_per_s": samples / wall, "seconds": wall, "samples": samples,
            "epochs_worth": epochs if epochs == int(epochs) else None, "first_batch_s": first_batch_s,
            "warmed_through_a_pass_end": through, "graphed": graphed is not None and graphed.graph is not None,
            "main_cpu_ms": (cpu1.main_s - cpu0.main_s) / samples * 1e3, "workers_cpu_ms": workers_ms,
            **epoch_parts(arrived, samples, wall, per_epoch, capacity)}


def hand_step(workload: Any, model: Any, optimizer: Any, config: Config, device: torch.device,
              finish: Any) -> tuple[Any, Graphed | None]:
    """The hand loop's step, as a user writes it: autocast, the loss, backward, the optimizer's step; a cuda_graph
    config's captured whole in a CUDA graph on a GPU (``Graphed``, returned too), the eager one for other shapes."""
    own_loss = getattr(workload, "compute_loss", None)  # a batch not an (input, target) pair: the workload's loss
    criterion = workload.build_loss() if own_loss is None else None
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(config.amp)
    fmt = torch.channels_last if config.channels_last else torch.contiguous_format

    def inputs(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = batch
        x = x.to(device, non_blocking=config.pin_memory)
        if config.device_normalize and config.decode == "cpu":
            x = finish(x)
        return x.contiguous(memory_format=fmt), y.to(device, non_blocking=config.pin_memory)

    def step(batch: Any) -> None:
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            if own_loss is not None:
                loss = own_loss(model, moved(batch, device, config.pin_memory))
            else:
                x, y = inputs(batch)
                loss = criterion(model(x), y)
        # Once a graph is captured, its gradient buffers are zeroed in place: the graph reads and writes them.
        optimizer.zero_grad(set_to_none=graphed is None or graphed.graph is None)
        loss.backward()
        optimizer.step()

    if not (config.cuda_graph and device.type == "cuda" and own_loss is None):
        graphed = None
        return step, graphed
    graphed = Graphed(model, criterion, optimizer, dtype, step)
    return graphed.step_from(inputs), graphed


class Graphed:
    """The step captured whole in a CUDA graph, by hand, as PyTorch's documentation writes it ("whole network
    capture"): static input and target, three eager steps on a side stream, the capture of forward, loss, backward
    and the optimizer's step, then a copy of each batch into the static tensors and a replay. A batch of another
    shape (a pass's short last batches) takes the eager step, its gradients zeroed in place: the graph reads and
    writes those buffers. Under autocast the weight cast cache is off, as the documentation asks of a capture."""

    WARMUP = 3

    def __init__(self, model: Any, criterion: Any, optimizer: Any, dtype: Any, eager: Any) -> None:
        self.model, self.criterion, self.optimizer, self.dtype, self.eager = model, criterion, optimizer, dtype, eager
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static: tuple[torch.Tensor, torch.Tensor] | None = None
        self.warmed = 0

    def _train(self, x: torch.Tensor, y: torch.Tensor) -> None:
        with torch.autocast(x.device.type, dtype=self.dtype, enabled=self.dtype is not None, cache_enabled=False):
            loss = self.criterion(self.model(x), y)
        loss.backward()
        self.optimizer.step()

    def step_from(self, inputs: Any) -> Any:
        def step(batch: Any) -> None:
            x, y = inputs(batch)
            if self.static is not None and (x.shape, y.shape) != (self.static[0].shape, self.static[1].shape):
                return self.eager(batch)
            if self.static is None:
                self.static = (torch.empty_like(x), torch.empty_like(y))
            self.static[0].copy_(x)
            self.static[1].copy_(y)
            if self.warmed < self.WARMUP:
                self.warmed += 1
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    self.optimizer.zero_grad(set_to_none=True)
                    self._train(*self.static)
                torch.cuda.current_stream().wait_stream(side)
                return None
            if self.graph is None:
                self.optimizer.zero_grad(set_to_none=True)
                self.graph = torch.cuda.CUDAGraph()
                # thread_local: the DataLoader's pinning thread calls CUDA while the capture runs.
                with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
                    self._train(*self.static)
            self.graph.replay()
            return None

        return step


def through_a_pass_end(feed: Iterator[Any], passes: Passes, step: Any, after: int, until: float) -> bool:
    """A stream's warm-up read on through its first pass's end, then `after` batches of the next; False where the
    end does not come before the clock reads `until` (the warm-up stops there and the loop is timed as it stands).

    A stream's pass ends with each worker's short last batch, of as many sizes as the workers' shares differ: new
    shapes, each paying cuDNN's benchmark (and a compiled model's recompile) once in a process. A run pays them once,
    in its first pass; each slice, timed in a process of its own, would pay them again in its timed part, as a
    cost of every pass. Hence past the first end before the clock starts.
    """
    started = False  # the warm-up has seen a batch past its pass's first: a place of 0 after it is a new pass
    while time.perf_counter() < until:
        step(next(feed))
        if passes.place == 0 and started:
            for _ in range(after):
                step(next(feed))
            return True
        started = started or passes.place > 0
    return False


def moved(batch: Any, device: torch.device, non_blocking: bool) -> Any:
    """`batch` (a tensor, or a dict, list or tuple of them) on `device`, as a user's loop moves it."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        return {key: moved(value, device, non_blocking) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(moved(value, device, non_blocking) for value in batch)
    return batch


ENDLESS = 10**9  # the batches of a stream's pass where its workload declares none: no epoch's worth is ever reached


def hand_loader(workload: Any, dataset: Any, config: Config, device: torch.device) -> tuple[DataLoader, Any, int]:
    """The hand loop's DataLoader, what the device does to its images after (`finish`), and the batches of a pass.

    A stream has no sampler to shuffle: its order is its own, and its pass is the workload's declared one
    (DEFAULTS' `samples_per_epoch`, else its own `len()`), in batches. A data set kept on the device is read once into
    it and sliced there (``OnDevice``), with no DataLoader."""
    if config.placement == "device":
        if not getattr(workload, "deterministic_transform", False):
            raise ValueError(f"placement = device by hand needs samples that are the same at every read "
                             f"(DETERMINISTIC_TRANSFORM = True), but {workload.path} does not declare it: an "
                             f"augmentation redone on the device each batch is not written in the hand loop")
        resident = OnDevice(dataset, config.batch_size, device)
        return resident, None, len(resident)  # type: ignore[return-value]
    files, collate, finish = worker_data(dataset, config, device)
    if collate is None and getattr(workload, "collate_fn", None) is not None:  # the workload's own, as a user passes it
        collate = workload.collate_fn
        if config.pad_multiple:  # the pad_multiple knob: the keyword a padding collate_fn takes
            collate = functools.partial(collate, pad_to_multiple_of=config.pad_multiple)
    stream = isinstance(dataset, IterableDataset)
    extra = {"persistent_workers": config.persistent_workers, "prefetch_factor": config.prefetch_factor or 2}
    loader = DataLoader(files, batch_size=config.batch_size, shuffle=not stream, num_workers=config.num_workers,
                        pin_memory=config.pin_memory, collate_fn=collate, **(extra if config.num_workers else {}))
    if not stream:
        return loader, finish, len(loader)
    declared = getattr(workload, "defaults", {}).get("samples_per_epoch")
    if not declared:
        try:
            declared = len(dataset)
        except TypeError:
            return loader, finish, ENDLESS
    return loader, finish, max(1, -(-int(declared) // config.batch_size))


class Passes:
    """Epochs, each a fresh pass as a training run makes it; `place`: the last batch's place in its pass."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader, self.place = loader, -1
        self.stream = isinstance(loader.dataset, IterableDataset)

    def __iter__(self) -> Iterator[Any]:
        while True:
            for self.place, batch in enumerate(self.loader):
                yield batch


def more_batches(elapsed: float, timed: int, per_epoch: int, longest: float) -> int:
    """How many batches a hand loop that has timed `timed` in `elapsed` (its seconds are up) times on.

    Up to a whole number of epochs' worth of batches (from its first timed batch's place in its epoch to
    that place an epoch later), so that it crosses as many epoch boundaries as a training run does in as
    many batches; unless that would take it past `longest` seconds in all at its rate so far: then none,
    and it may cross one boundary more or one fewer than a training run would in as many batches. Decided
    once, when its seconds are up: decided again at each batch, it would stop right after a boundary it
    had just paid for. Why, both ways: each slice starts at the same place of an epoch (after the same
    warm-up), so whether a slice stopped on the clock crosses a boundary hangs on the same few batches
    each time, not on the share of them that a training run crosses. On an H200, 15 workers that start
    afresh each epoch paid 1.6-2.1 s at each boundary of a 17 s epoch (call 42), and 10 s slices that
    crossed one boundary in three read 12% above a training run (call 50); 8 workers with a 30 s epoch
    paid 1.4 s at each, which puts 10 s slices that each cross one 9-10% below an epoch's worth (they
    read 15-19% below the one slice that timed an epoch's worth, call 56).
    """
    short = timed % per_epoch
    if timed == 0 or short == 0:
        return 0
    more = per_epoch - short
    return more if elapsed + more * elapsed / timed <= longest else 0


def sync(device: torch.device) -> None:
    """Waits for the device: at the timed part's ends only, never per step (a sync per step would slow the loop)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
