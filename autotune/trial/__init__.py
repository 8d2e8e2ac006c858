"""What runs inside a trial process: build a config's loop and measure it, or serve a parity request.

- ``facts``: what the data set allows, read once (``DataFacts``);
- ``runner``: one config built and measured in this process (``Runner``);
- ``timing``: timing windows over the real loop, and its one-time costs;
- ``steady``: a measurement's steady windows, until they agree, and the epoch boundaries among them;
- ``window``: one window's steps, clock and CPU time;
- ``feed``: the batches a measurement takes, and what the loader had ready for each;
- ``backlog``: the batches the workers prefetched, which no window may time;
- ``cputime``: CPU time of this process and its DataLoader workers;
- ``gpu``: GPU utilisation and memory sampled through NVML;
- ``capture``: why a CUDA graph could not be captured;
- ``oom``: out-of-memory failures and what fits;
- ``probe``: one feed of the step measured alone (synthetic batches on the device, the loader alone, the loop);
- ``parts``: a config's step and loader measured apart, for the search's valuation
  (``autotune.study.planning.valuation``);
- ``serve``: the request loop of a trial process (the parity requests run ``autotune.parity``'s trial side).

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
    },
)
