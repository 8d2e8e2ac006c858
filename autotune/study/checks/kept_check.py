"""The search's parity check, kept in the study as its verdicts are reached: the same command after a stop takes it up.

A search stopped during its finalist rounds (SIGTERM from a scheduler, Ctrl-C)
and run again has no trial left to run, and made its check afresh: other runs,
other verdicts, another winner (docs/search.md#the-parity-check-inside-the-search).
Here the check's state is stored in the study each time it reaches a verdict,
and the rerun's check, in its family gate or for its finalists, goes on from it:
a verdict once reached stands, and no config is judged twice.

The state is keyed by what it was judged from: the baseline and its learning rate,
the rule for a new batch size, the largest batch the runs were sized for, the time
budget the check's share comes from, and the workload's digest
(``autotune.study.failed.content``); a rerun with any of them changed checks afresh. Once
the tuned file is written it is dropped, as the end is (``autotune.study.ending``):
a later run of the same command checks afresh.
"""

from __future__ import annotations

from typing import Any

from autotune.parity import kept
from autotune.parity.check import ParityCheck
from autotune.study.context import Setup
from autotune.study.failed import content

ATTRIBUTE = "parity:check"  # the study's user attribute holding the check's state and its key


def key(setup: Setup) -> dict[str, Any]:
    """What the check's verdicts were judged from: one changed, they no longer stand."""
    return {
        "baseline": setup.baseline.as_dict(),
        "lr": setup.lr(setup.baseline),
        "lr_rule": setup.lr_rule.name,
        "max_batch": max(setup.space.domains["batch_size"]),
        "time_budget_s": setup.options.time_budget_s,
        "workload": setup.study.user_attrs.get(content.ATTRIBUTE),
    }


def keep_as_it_goes(setup: Setup, check: ParityCheck) -> None:
    """Store `check`'s state in the study now and after each verdict it reaches.

    Only the searcher that writes the tuned file keeps its check: under ``--gpus`` every searcher judges the
    families it measures, and the writer's check is the one the finalists are chosen by.
    """
    if not setup.options.write_tuned_file:
        return

    def save(made: ParityCheck) -> None:
        setup.study.set_user_attr(ATTRIBUTE, {"key": key(setup), "state": kept.state(made)})

    check.on_verdict = save


def _stored(setup: Setup) -> dict[str, Any] | None:
    stored = setup.study.user_attrs.get(ATTRIBUTE)
    return stored if isinstance(stored, dict) and stored.get("key") == key(setup) else None


def stands(setup: Setup) -> bool:
    """An earlier run of this search kept a check that still stands for it."""
    return _stored(setup) is not None


def take_up(setup: Setup, check: ParityCheck) -> bool:
    """Make the new `check` go on from the one an earlier run of this search stored, if it still stands; say so."""
    stored = _stored(setup)
    if stored is None or not kept.take_up(check, stored["state"]):
        return False
    setup.echo(
        f"parity: taking up the check an earlier run of this search made ({len(check.verdicts)} verdict(s), "
        f"{check.samples:,} samples a run): a config it judged is not judged again"
    )
    return True


def clear(setup: Setup) -> None:
    """The tuned file is written: the next run of the same command checks afresh."""
    if setup.study.user_attrs.get(ATTRIBUTE):
        setup.study.set_user_attr(ATTRIBUTE, None)
