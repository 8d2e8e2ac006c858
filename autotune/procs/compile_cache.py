"""Where a search's trial processes keep what ``torch.compile`` made: a folder in the search's own state directory.

Inductor caches its compiled graphs (the FX graph cache) and AOTAutograd's forward and
backward (the autograd cache) on disk, keyed by the graph, its input shapes and the
compiler's settings, in ``TORCHINDUCTOR_CACHE_DIR``. A trial process of the same workload at
the same shapes then loads the kernels instead of compiling them again: only the first
trial of a shape pays the whole compile. One folder per workload, so it can be removed with
the search's other state; a ``TORCHINDUCTOR_CACHE_DIR`` the user set wins. No torch here:
the trial processes' environment is made before any of them imports it.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR_VAR = "TORCHINDUCTOR_CACHE_DIR"
FOLDER = "compile_cache"


def cache_dir(state_dir: Path, workload_path: Path) -> Path:
    """The compile cache of `workload_path`'s searches in `state_dir`.

    >>> cache_dir(Path("/s/.autotune"), Path("recipes/mnist_cnn.py")).as_posix()
    '/s/.autotune/compile_cache/mnist_cnn'
    """
    return (state_dir / FOLDER / workload_path.stem).absolute()


def environment(state_dir: Path, workload_path: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (this process's environment) with the workload's compile cache, unless one is set already."""
    env = dict(os.environ if base is None else base)
    env.setdefault(CACHE_DIR_VAR, str(cache_dir(state_dir, workload_path)))
    return env
