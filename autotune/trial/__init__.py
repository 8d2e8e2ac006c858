"""What runs inside a trial process: build a config's loop, measure it, or make a parity run.

- ``timing``: timing windows over the real loop, and its one-time costs;
- ``feed``: the batches a measurement takes, and what the loader had ready for each;
- ``gpu``: GPU utilisation and memory sampled through NVML;
- ``runner``: one config built and measured in this process (``Runner``);
- ``parity_run``: a short training run recorded for the parity check;
- ``serve``: the request loop of a trial process.

No Optuna here: the search (``autotune.study``) talks to trial processes through
``autotune.procs``.
"""

from autotune.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Measurement": "timing",
        "Windows": "timing",
        "measure": "timing",
        "GpuSampler": "gpu",
        "Runner": "runner",
        "classify_failure": "runner",
        "ParityRun": "parity_run",
    },
)
