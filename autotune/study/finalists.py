"""A search's third step: the finalists, checked for parity and measured again against the baseline.

The contenders are the configs whose trial ran faster than the baseline's,
shortest declared run first (the workload's `epochs`, one-time costs included).
The parity check (``autotune.parity.check``) takes the
first few that train like the baseline; those and the baseline are then
measured again, interleaved, in fresh processes (``rounds``): the numbers a
profile states are these, never a single trial's.
"""

from __future__ import annotations

from optuna.trial import TrialState

from autotune.config import Config
from autotune.parity.check import ParityCheck
from autotune.parity.verdict import ParityError
from autotune.study import answer
from autotune.study.checks.parity import PARITY_EXTRA_RUNS, new_parity_check
from autotune.study.context import SearchError, Setup
from autotune.study.pools import SearchPools, Team
from autotune.study.ranking import contenders, ranked, with_rate_leader


def choose(
    setup: Setup, pools: SearchPools, team: Team, check: ParityCheck | None
) -> tuple[list[Config], ParityCheck | None]:
    """The configs to measure again: the fastest contenders that train like the baseline (unchecked: the fastest).

    An empty list when nothing faster may win: the baseline is then the answer, and the study keeps why
    (``autotune.study.answer``). Raises ``SearchError`` when no trial completed, not even the baseline's.
    """
    if not setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        raise SearchError(answer.why_nothing_ran(setup.study, setup.options.time_budget_s, setup.elapsed(),
                                                 setup.study_name))
    answer.keep(setup.study, None)
    found = contenders(setup)
    if not (setup.options.parity_check and found):
        return with_rate_leader(setup, found, list(found)[: setup.options.finalists]), None
    check = check or new_parity_check(setup, pools.trials, list(found), team)
    chosen: list[Config] = []
    stopped = False
    try:
        want = setup.options.finalists
        chosen = check.select(list(found), want=want, max_runs=want + PARITY_EXTRA_RUNS)
        chosen = with_rate_leader(setup, found, chosen, check)
    except ParityError as exc:
        answer.keep(setup.study, answer.check_failed(str(exc)))
    except KeyboardInterrupt:
        stopped = True  # a check cut short has no cost worth stating ("0 config(s) checked ... took 7.4 s")
        raise
    finally:
        numbers = ranked(setup)  # every config checked, early too, though it may have left the contenders since
        for config, verdict in check.verdicts.items():
            # Optuna keeps a finished trial read-only: the verdict is kept on the study, under its trial.
            if config in numbers:
                setup.study.set_user_attr(
                    f"parity:trial-{numbers[config]}", {**verdict.as_record(), "config": config.describe()}
                )
        if not stopped:
            setup.echo(check.summary())
    if not chosen and answer.kept(setup.study) is None:
        checked = len(check.verdicts)
        if check.conclusive is False:
            reason = answer.inconclusive(checked, check.why_inconclusive())
        elif check.verdicts and not any(v.conclusive for v in check.verdicts.values()):
            reason = answer.unjudged(checked)  # not one rejected by its numbers: the clock left them unjudged
        else:
            reason = answer.all_rejected(checked, str(setup.baseline.batch_size))
        answer.keep(setup.study, reason)
    return chosen, check


