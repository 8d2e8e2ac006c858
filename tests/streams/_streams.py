"""Streams the tests read: plain IterableDatasets that shard well or badly, and real shard files on disk.

The tar shards are written by webdataset's TarWriter (``tests/fixtures/tiny_shards.py``), the parquet files by
pyarrow; both are read back through the real libraries.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch.utils.data import IterableDataset, get_worker_info

FIXTURES = Path(__file__).parents[1] / "fixtures"


def fixture(name: str) -> ModuleType:
    """tests/fixtures/NAME.py, imported under its own name (a workload file, read as a module)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, FIXTURES / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def write_parquet(folder: Path, files: int, rows: int) -> list[str]:
    """`files` parquet files of `rows` rows each (text and label), written by pyarrow; their paths in order."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in range(files):
        path = folder / f"part-{f:04d}.parquet"
        table = pa.table({"text": [f"file {f} row {r}" for r in range(rows)], "label": [r % 2 for r in range(rows)]})
        pq.write_table(table, path)
        paths.append(str(path))
    return paths


class Shards(IterableDataset):
    """`shards` shards of `per_shard` samples (a tensor and its number); each worker reads the shards `split` gives
    it. The split is what the tests vary: a right one, none, a wrong one."""

    def __init__(self, shards: int = 8, per_shard: int = 64, split: str = "by_worker") -> None:
        self.num_shards, self.per_shard, self.split = shards, per_shard, split

    def _mine(self) -> range:
        info = get_worker_info()
        if info is None or self.split == "none":  # "none": every worker reads every shard
            return range(self.num_shards)
        if self.split == "skips":  # a wrong stride: some shards go to no worker
            return range(info.id, self.num_shards, info.num_workers + 1)
        return range(info.id, self.num_shards, info.num_workers)

    def __iter__(self):
        for shard in self._mine():
            for i in range(shard * self.per_shard, (shard + 1) * self.per_shard):
                yield torch.full((4,), float(i)), i


class FailsInWorker(Shards):
    """A stream that worker 1 cannot read: one process (and worker 0) reads every shard."""

    def __iter__(self):
        info = get_worker_info()
        for sample in super().__iter__():
            if info is not None and info.id == 1:
                raise ValueError("worker 1 cannot open its shard")
            yield sample


def autotune(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m autotune ARGS` in `project`, as a user runs it, with `env` added (the stream switches)."""
    from _procs import child_env

    return subprocess.run([sys.executable, "-m", "autotune", *args], cwd=project, env=child_env(**env),
                          capture_output=True, text=True, timeout=600)


# A search as short as a search can be: two trials, one finalist, one round; windows of 50 ms.
QUICK = ("--trials", "2", "--fix", "amp=off", "--finalists", "1", "--rounds", "1", "--no-parity-check")
QUICK_ENV = {"AUTOTUNE_WINDOW_S": "0.05", "OMP_NUM_THREADS": "1"}
