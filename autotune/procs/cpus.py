"""``--cpus N``: a search on N of this host's cores, for a job that will run on a host with fewer.

A cloud GPU often comes with few cores for it (Colab's A100; 8-GPU nodes with
about 12 cores per GPU), and there the fastest loop is another one: decoding
moves to the device, fewer workers. ``restrict`` pins this process to N cores
with ``os.sched_setaffinity`` before anything starts; every process the search
starts (trial processes, their DataLoader workers, --gpus workers) inherits the
mask, and the CPU share (``autotune.knobs.detect_machine``, the --gpus
split in ``autotune.procs.searchers``) is read from it, so the profile states the
cores it was tuned on. No torch here: it runs before the imports.
"""

from __future__ import annotations

import os

from autotune.errors import AutotuneError


class CpusError(AutotuneError, ValueError):
    """A --cpus value that cannot be used; the message names the value and the rule."""


def allowed() -> list[int]:
    """The cores this process may run on now, in order."""
    return sorted(os.sched_getaffinity(0))


def choose(count: int, cores: list[int]) -> list[int]:
    """The first `count` of `cores`: neighbours share caches, and a host numbers a socket's cores together.

    >>> choose(2, [0, 1, 2, 3])
    [0, 1]
    """
    if not 1 <= count <= len(cores):
        raise CpusError(
            f"--cpus must be in 1..{len(cores)} (the cores this process may run on), but got {count}."
        )
    return cores[:count]


def restrict(count: int) -> list[int]:
    """Pin this process, and so every process it starts, to `count` cores; returns them."""
    chosen = choose(count, allowed())
    os.sched_setaffinity(0, chosen)
    return chosen
