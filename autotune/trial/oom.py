"""What an ``oom`` reason says: how much the config asked for, and how much was free.

torch's allocator words its error as "CUDA out of memory. Tried to allocate 2.00 GiB.
GPU 0 has a total capacity of 79.15 GiB of which 1.20 GiB is free. Process 4242 has
60.00 GiB memory in use. Including non-PyTorch memory, this process has 18.00 GiB
memory in use. Of the allocated memory 16.50 GiB is allocated by PyTorch, ...". The
reason keeps those numbers as torch printed them: the allocation that failed, what
the trial already held, what was free of the total, and which other processes held
memory (an oom beside another process is not the config's own; ``autotune.procs.pool``
measures such a trial again alone). Where the text has no free memory, the device's
is read at failure. No torch import at module level: the search process reads
``free_before`` through NVML without touching CUDA.
"""

from __future__ import annotations

import re
import time
from typing import Any

OOM = "oom"  # how every out-of-memory reason starts
_SIZE = r"([\d.]+ (?:bytes|KiB|MiB|GiB|TiB|PiB))"
_ASKED = re.compile(rf"Tried to allocate {_SIZE}")
_FREE = re.compile(rf"total capacity of {_SIZE} of which {_SIZE} is free")
_HELD = re.compile(rf"this process has {_SIZE} memory in use")
_OTHER = re.compile(rf"Process (\d+) has {_SIZE} memory in use")


def is_oom(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def oom_reason(text: str, free_now: tuple[int, int] | None = None) -> str:
    """`oom: ...` with the numbers `text` (torch's message) holds; `free_now` (free, total bytes) where it has none.

    >>> oom_reason("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB "
    ...            "of which 1.20 GiB is free. Process 4242 has 60.00 GiB memory in use. Including non-PyTorch "
    ...            "memory, this process has 18.00 GiB memory in use.").split("; ")  # doctest: +NORMALIZE_WHITESPACE
    ['oom: asked for 2.00 GiB more, holding 18.00 GiB', '1.20 GiB of 79.15 GiB free',
     'other processes held 60.00 GiB (pid 4242)']
    """
    parts: list[str] = []
    asked, held = _ASKED.search(text), _HELD.search(text)
    if asked:
        parts.append(f"asked for {asked.group(1)}" + (f" more, holding {held.group(1)}" if held else ""))
    free = _FREE.search(text)
    if free:
        parts.append(f"{free.group(2)} of {free.group(1)} free")
    elif free_now is not None:
        parts.append(f"{size(free_now[0])} of {size(free_now[1])} free")
    others = _OTHER.findall(text)
    if others:
        pids = ", ".join(pid for pid, _ in others)
        shown = " + ".join(held for _, held in others)
        # torch names its own process "this process" only when NVML's pids are this namespace's; in a
        # container they are the host's, and the list may hold the trial's own process too.
        whose = "other processes" if held else "processes on the GPU"
        parts.append(f"{whose} held {shown} (pid {pids})")
    return f"{OOM}: {'; '.join(parts)}" if parts else OOM


def free_at_failure() -> tuple[int, int] | None:
    """(free, total) bytes of the current CUDA device, in a process that uses it; None elsewhere."""
    import torch

    if not torch.cuda.is_initialized():
        return None
    try:
        free, total = torch.cuda.mem_get_info()
    except Exception:  # a context broken by the failure: the reason goes without the number
        return None
    return int(free), int(total)


def free_before(device: str) -> int | None:
    """Bytes free on `device` ("cuda:N") now, read through NVML (no CUDA context); None on a CPU or without NVML."""
    if not device.startswith("cuda"):
        return None
    from autotune.trial.gpu import nvml_index

    index = int(device.partition(":")[2] or 0)
    try:
        import pynvml

        pynvml.nvmlInit()
        info: Any = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(nvml_index(index)))
    except Exception:  # no driver or no NVML here: the reason goes without the number
        return None
    return int(info.free)


# After a trial process on a GPU is killed, the next one waits until the memory free before the killed one
# began is free again, less a CUDA context's worth (another process of this search may have started one
# meanwhile), for at most RELEASE_WAIT_S. The driver frees a context's memory after its process has gone; a trial
# started before that finds the device still full (docs/measuring.md, "Faults").
RELEASE_SLACK = 2 * 2**30
RELEASE_WAIT_S = 30.0


def wait_for_release(device: str, free_then: int, timeout_s: float = RELEASE_WAIT_S) -> bool:
    """Wait until `device` has `free_then` bytes free again, less RELEASE_SLACK; False at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        free = free_before(device)
        if free is None or free >= free_then - RELEASE_SLACK:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def size(n: float) -> str:
    """Bytes as torch's allocator prints them.

    >>> size(512), size(3 * 2**20), size(1.5 * 2**30)
    ('512 bytes', '3.00 MiB', '1.50 GiB')
    """
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n > scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} bytes"
