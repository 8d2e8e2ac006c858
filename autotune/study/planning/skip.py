"""Why a config need not be measured end to end: memory, its loader's ceiling, or its rate predicted from its parts.

A trial that is not run says why in its reason, and Optuna keeps it (pruned or
failed) like any other: ``autotune.study.trials`` asks these before it measures.
"""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from autotune.config import Config
from autotune.procs.pool import TrialPool
from autotune.procs.trial_process import Outcome
from autotune.study import standing
from autotune.study.clock.deadline import OUT_OF_TIME, part_timeout
from autotune.study.context import Setup
from autotune.study.planning import memory
from autotune.study.planning.predict import LoaderModel
from autotune.study.planning.valuation import VALUATION_ATTRIBUTE, Valuation, cut_by_clock


def predicted(setup: Setup, trial: optuna.Trial, config: Config, loader: LoaderModel | None) -> str | None:
    """Why `config` cannot win (it holds at least what a config that ran out of memory held, or its loader's ceiling
    is below the best so far); None to measure it."""
    if trial.user_attrs.get("role") == "baseline":  # every speed-up is stated against it
        return None
    failed = setup.study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
    oom = [(t.number, setup.config_of(t), str(t.user_attrs.get("reason") or "")) for t in failed
           if "config" in t.user_attrs]
    why = memory.why_skip(config, oom)
    if why is not None or loader is None:
        return why
    return loader.why_skip(config, standing.best_rate(setup.study))


def valued(setup: Setup, trial: optuna.Trial, config: Config, lr: float, pool: TrialPool,
           valuation: Valuation) -> Outcome | None:
    """Value `config` from its parts (measuring those not known yet); the outcome that spares measuring it end to end,
    if one does: pruned for its predicted rate, or failed for memory its step alone could not have.

    Its predicted rate is kept on the trial, labelled as predicted. The baseline always runs: every speed-up is
    stated against it. A seed runs unless the prediction, trusted by then (``Valuation.trusted``), puts it clearly
    under the best measured: the plan's queued configs (``autotune.study.planning.plan``) are seeds too, and they
    come first.
    """
    timeout_s, shortened = part_timeout(setup)
    why = valuation.measure(pool, config, lr, timeout_s, shortened)
    if cut_by_clock(why, shortened):
        # The search's clock, not the config, ended it: measured whole now, it would run past the budget.
        return Outcome("pruned", reason=f"{OUT_OF_TIME}: the search's time ran out while its parts were measured "
                                        f"({why})")
    if why is not None:
        trial.set_user_attr("parts_failed", why)
        # Its step alone did not fit: the whole loop cannot. Any other failure: it is measured end to end, as before.
        too_large = valuation.too_large(config)
        return None if too_large is None else Outcome("failed", reason=too_large)
    predicted = valuation.predict(config)
    if predicted is None:
        return None
    valuation.valued += 1
    trial.set_user_attr("predicted_samples_per_s", round(predicted, 1))
    if trial.user_attrs.get("role") == "baseline":  # every speed-up is stated against it
        return None
    skip = valuation.why_skip(config, standing.best_rate(setup.study), getattr(setup.study.pruner, "ratio", 0.5))
    setup.study.set_user_attr(VALUATION_ATTRIBUTE, valuation.record())
    return None if skip is None else Outcome("pruned", reason=skip)
