"""Configs that cannot win, known before they run: the loader's ceiling against the best so far.

A streaming config cannot train faster than its DataLoader makes samples. Each
sample costs the loader a measured amount of CPU time (``DataFacts.load_cpu_s``:
read, decode, transform, in one process, warm), and its workers share the cores
the search may use, so ``min(workers, cores) / load_cpu_s`` bounds its rate from
above, however fast the step. A config whose bound is below what the pruner calls
clearly worse (``ClearlyWorsePruner.ratio`` of the best so far) is not run. This
is how Plumber (MLSys'22) and tf.data's autotuner model an input pipeline, cut to
the one stage that autotune can cost cheaply and exactly.

The bound is checked against every streaming trial that does run: one that runs
faster than its bound by more than the measurement's noise shows the model wrong
for this workload, and nothing is skipped by prediction after that.
"""

from __future__ import annotations

import dataclasses

from autotune.config import Config
from autotune.text import rate

PREDICTED = "skipped by prediction"  # how a trial's reason begins when its config was not run
MARGIN = 1.25  # a trial may beat its ceiling by this much (noise, a warmer cache) before the model is called wrong


@dataclasses.dataclass
class LoaderModel:
    """The loader's ceiling per config, and what the trials that ran said about it."""

    load_cpu_s: float  # CPU seconds one process spends to make one sample
    cores: int  # the cores the search's DataLoader workers share
    clearly_worse: float  # skip below this share of the best so far (the pruner's ratio)
    wrong: str = ""  # why the model no longer skips anything, once a trial beat its ceiling
    checked: int = 0  # streaming trials that ran and were compared with their ceiling
    highest: float = 0.0  # the highest measured/ceiling ratio among them
    skipped: int = 0

    def ceiling(self, config: Config) -> float | None:
        """Samples/s the loader can make at most under `config`; None where no DataLoader decodes the data."""
        # The measured cost is the whole pipeline's: a loader that leaves part of it to the device costs less.
        if self.load_cpu_s <= 0 or config.placement == "device" or config.decode == "gpu" or config.device_normalize:
            return None
        return min(max(config.num_workers, 1), self.cores) / self.load_cpu_s

    def why_skip(self, config: Config, best: float | None) -> str | None:
        """Why `config` cannot win against `best`, or None when it may (or the model was found wrong)."""
        bound = self.ceiling(config)
        if self.wrong or bound is None or best is None or bound >= self.clearly_worse * best:
            return None
        self.skipped += 1
        workers = max(config.num_workers, 1)
        return (
            f"{PREDICTED}: its loader makes at most {rate(bound)}/s ({min(workers, self.cores)} "
            f"core(s) x {1 / self.load_cpu_s:,.0f} samples/s each), under {self.clearly_worse:.0%} of the best "
            f"{rate(best)}/s"
        )

    def check(self, config: Config, measured: float) -> str | None:
        """Compare a trial that ran with its ceiling; a line to say when it shows the model wrong."""
        bound = self.ceiling(config)
        if bound is None or self.wrong:
            return None
        self.checked += 1
        self.highest = max(self.highest, measured / bound)
        if measured <= MARGIN * bound:
            return None
        self.wrong = (
            f"{config.describe()} ran {rate(measured)}/s, above its predicted loader ceiling of {rate(bound)}/s"
        )
        return f"  prediction: {self.wrong}; no config is skipped by prediction from now on"

    def summary(self) -> str:
        if self.wrong:
            return f"prediction: found wrong ({self.wrong}); {self.skipped} config(s) had been skipped by it"
        return (
            f"prediction: {self.skipped} config(s) skipped by their loader ceiling; {self.checked} streaming "
            f"trial(s) ran at most {self.highest:.0%} of theirs"
        )
