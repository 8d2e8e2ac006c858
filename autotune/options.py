"""What a search is asked to do: plain data, cheap to import, passed to searcher processes as JSON.

The command line builds it before torch is imported, so the processes a search
needs can start while the rest loads.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

DEFAULT_TIME_BUDGET_S = 480.0  # 8 minutes: a heavy model's search ends within 10, a small model's well before


@dataclasses.dataclass(frozen=True)
class SearchOptions:
    trials: int = 40  # finished trials the study should hold, this run's and earlier runs' together
    # Seconds the whole search aims to take: no trial starts once the time left would not cover the parity
    # check and the finalists' rounds (estimated from the trials so far). None: no limit but --trials.
    time_budget_s: float | None = DEFAULT_TIME_BUDGET_S
    fixes: dict[str, tuple[Any, ...]] = dataclasses.field(default_factory=dict)
    storage: str | None = None
    study: str | None = None
    trial_timeout_s: float = 90.0
    lr_rule: str | None = None  # --lr-scaling; None: the rule of the workload's optimizer (config.lr_rule_for)
    finalists: int = 3  # best configs measured again against the baseline
    parity_check: bool = True  # the winner must train like the baseline (autotune.parity.verdict)
    rounds: int = 2  # fresh processes each finalist is measured in
    device_index: int = 0
    cpu_share: int | None = None
    cpus: int | None = None  # --cpus: the search runs on this many of the host's cores (autotune.procs.cpus)
    seed: int = 0  # the sampler's; with a --storage, mixed with the process id so searchers of one study differ
    run_id: str = (
        ""  # under --gpus, one id for the search's processes: the writer takes only its own run's baseline parity run
    )
    baseline_parity_first: bool = (
        False  # this searcher makes the baseline's parity run first (one per --gpus search)
    )
    write_tuned_file: bool = True  # False: a `--gpus` searcher only runs trials; the search that started it writes
    command: str = "autotune search"
    state_dir: Path = Path(".autotune")  # the default SQLite study and trial-process logs


def options_to_json(options: SearchOptions) -> str:
    data = dataclasses.asdict(options)
    data["fixes"] = {k: list(v) for k, v in options.fixes.items()}
    data["state_dir"] = str(options.state_dir)
    return json.dumps(data)


def options_from_json(text: str) -> SearchOptions:
    data = json.loads(text)
    data["fixes"] = {k: tuple(v) for k, v in data["fixes"].items()}
    data["state_dir"] = Path(data["state_dir"])
    return SearchOptions(**data)
