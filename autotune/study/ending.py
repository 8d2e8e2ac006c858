"""The search's end, kept until its tuned file is written: a rerun after a failed write measures nothing again.

The parity verdicts and the finalists' rounds are the most expensive minutes of a
heavy model's search (docs/search.md#the-finalists-rounds). When only the write of
the tuned file failed (a full disk, a folder made read-only), the same command again
finds them here and writes the file from them, running no trial
(``autotune.study.run``). They are kept on the study, keyed by what they were
measured from (the finished trials and the options that shape the search and its
end); a trial finished since, or other options, make them stale: the end is then
measured afresh, from every trial. Once the file is written they are dropped, so a
later rerun checks and measures afresh.
"""

from __future__ import annotations

from typing import Any

from autotune.config import Config
from autotune.study.context import Setup
from autotune.study.ranking import Results

ATTRIBUTE = "end:unwritten"  # the study's user attribute holding an end whose tuned file was not written
KEPT_RESULT_KEYS = (
    "samples_per_s", "steady_samples_per_s", "spread", "step_s", "epoch_s", "setup_s", "materialize_s",
    "tokens_per_sample", "padding", "time_limited", "reliable", "first_batch_s",
)


class StoredCheck:
    """A finished parity check as the profile reads it: whether it was conclusive, and each measured config's record.

    Duck-types the two things ``autotune.study.profile.write`` asks of a ``ParityCheck``.
    """

    def __init__(self, conclusive: bool | None, records: dict[Config, dict[str, Any]]) -> None:
        self.conclusive, self.records = conclusive, records

    def record(self, config: Config) -> dict[str, Any]:
        return dict(self.records[config])


Ended = tuple[list[Config], Results, StoredCheck | None]  # the chosen configs, their rounds, the check's records


def key(setup: Setup) -> dict[str, Any]:
    """What an end was measured from: a trial finished since, or other options, make it stale.

    Every finished trial counts, not only the complete ones: a rerun whose trials all failed or stopped early still
    measured them, and its trial-time parity verdicts may differ; an end that ignored them would not be this run's.
    The target and the budget count too: a rerun that asks for more search must get it, not the stored end.
    """
    finished = [t for t in setup.study.get_trials(deepcopy=False) if t.state.is_finished()]
    options = setup.options
    return {
        "finished": sorted(t.number for t in finished),
        "trials": options.trials,
        "time_budget_s": options.time_budget_s,
        "lr_rule": options.lr_rule,
        "baseline": setup.baseline.as_dict(),
        "finalists": options.finalists,
        "rounds": options.rounds,
        "parity_check": options.parity_check,
    }


def save(setup: Setup, chosen: list[Config], results: Results, check: Any) -> None:
    """Keep the end before the tuned file is written: the chosen configs, their rounds and the check's records."""
    measured = list(dict.fromkeys([setup.baseline, *chosen]))
    records = {}
    if check is not None:
        for config in measured:
            try:
                records[config] = check.record(config)
            except KeyError:  # the check never judged it (a rate leader measured unchecked): no record to keep
                continue
    setup.study.set_user_attr(ATTRIBUTE, {
        "key": key(setup),
        "chosen": [c.as_dict() for c in chosen],
        "results": [[c.as_dict(), [{k: r.get(k) for k in KEPT_RESULT_KEYS} for r in results[c]]] for c in results],
        "check": None if check is None else {
            "conclusive": check.conclusive,
            "records": [[c.as_dict(), r] for c, r in records.items()],
        },
    })


def load(setup: Setup) -> Ended | None:
    """The end a run measured but could not write, if it still stands for this study and these options."""
    stored = setup.study.user_attrs.get(ATTRIBUTE)
    if not stored or stored.get("key") != key(setup):
        return None
    chosen = [Config.from_dict(c) for c in stored["chosen"]]
    results: Results = {Config.from_dict(c): list(rs) for c, rs in stored["results"]}
    check = stored["check"]
    if check is None:
        return chosen, results, None
    records = {Config.from_dict(c): r for c, r in check["records"]}
    return chosen, results, StoredCheck(check["conclusive"], records)


def clear(setup: Setup) -> None:
    """The tuned file is written: the next run of the same command checks and measures afresh."""
    if setup.study.user_attrs.get(ATTRIBUTE):
        setup.study.set_user_attr(ATTRIBUTE, None)
