"""Parity: is a faster config still the same training as the workload's own?

A config may win only if it trains like the baseline. The search side judges;
the trial side (run inside a trial process, never importing Optuna) records:

- ``verdict``: the families of knobs, their tolerances, and how one run is judged against the baseline's;
- ``check``: ``ParityCheck``, the check over a search's fastest configs;
- ``baseline``: the check's baseline run, made or adopted, and whether it is conclusive;
- ``rates``: the learning rates a new batch size is tried at, and the batches a margin's rejections rule out;
- ``summary``: what a finished check says of itself, and what the tuned file keeps of it;
- ``budget``: how much of the search's time the check may take;
- ``kept``: a check's state as plain data, which a new check of the same search goes on from;
- ``reasons``: the verdicts that need no run, and the words a verdict gives;
- ``numerics``: amp and compile judged by their gradients against the batch-to-batch noise, with no run;
- ``inputs``: the device decode path judged by its images;
- ``run``: a short training run recorded in a trial process (``ParityRun``);
- ``gradients``: the gradients at warmed-up weights, in a trial process;
- ``images``: the host pipeline's and the device decode path's images, in a trial process.

docs/parity.md gives the rule and the measurements its tolerances come from.
"""

from autotune.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ParityCheck": "check",
        "ParityError": "verdict",
        "ParityRunFailed": "verdict",
        "ParityRunOutOfTime": "verdict",
        "ParityVerdict": "verdict",
        "ParityRun": "run",
    },
)
