"""GPU utilisation and memory, sampled through NVML on a thread while a measurement runs.

No torch here: NVML counts the host's GPUs directly (``nvml_index`` maps a CUDA
index to NVML's under CUDA_VISIBLE_DEVICES).
"""

from __future__ import annotations

import os
import statistics
import threading


def nvml_index(cuda_index: int) -> int:
    """NVML counts every GPU on the host; CUDA counts those CUDA_VISIBLE_DEVICES lets it see."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if cuda_index < len(visible) and visible[cuda_index].isdigit():
        return int(visible[cuda_index])
    return cuda_index


class GpuSampler:
    """Samples GPU utilisation and memory through NVML on a thread, while a `with` block runs.

    with GpuSampler(0) as gpu:
        train()
    gpu.mean_util, gpu.share_below(50)
    """

    def __init__(self, index: int = 0, interval_s: float = 0.02) -> None:
        self.index, self.interval_s = index, interval_s
        self.util: list[int] = []
        self.memory_used: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.available = False

    def __enter__(self) -> "GpuSampler":
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(self.index)
            self._pynvml = pynvml
            self.available = True
        except Exception:  # no driver, no GPU: sampling is simply unavailable
            return self
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            rates = self._pynvml.nvmlDeviceGetUtilizationRates(self._handle)
            self.util.append(int(rates.gpu))
            self.memory_used.append(int(self._pynvml.nvmlDeviceGetMemoryInfo(self._handle).used))
            self._stop.wait(self.interval_s)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def mean_util(self) -> float | None:
        return statistics.fmean(self.util) if self.util else None

    def share_below(self, percent: int) -> float | None:
        return sum(u < percent for u in self.util) / len(self.util) if self.util else None
