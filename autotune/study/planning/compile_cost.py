"""When compiling cannot pay: a compiled config is not measured once a compile of the model took longer than the
best config's whole declared run.

The search ranks configs by the time they take to finish the workload's declared run, one-time costs included
(``autotune.study.ranking.declared_run_s``), and a compile is one of them: where the whole run is seconds long, no
compiled step can win it, and its trials only spend the budget compiling (docs/search.md#compile-cost). A compile's
cost is known once one step of the model has compiled, in a trial or in a step part (``autotune.trial.parts``); a
mode that does more (max-autotune benchmarks kernel choices on top of what default mode compiles) costs at least as
much. Where the run is long, nothing is skipped.
"""

from __future__ import annotations

from optuna.trial import TrialState

from autotune.config import COMPILE_CHOICES, Config
from autotune.study.clock.deadline import reserve_s, shortest_run, trial_s
from autotune.study.clock.round_cost import whole_compile_s
from autotune.study.context import Setup
from autotune.study.planning.valuation import Valuation, step_key

CANNOT_PAY = "skipped, its compile cannot pay"  # how a trial's reason begins when it was not run for this


def least_compile_s(setup: Setup, valuation: Valuation | None, mode: str) -> tuple[float, str] | None:
    """The least a compile in `mode` can cost this model, and where that was measured: the least any compile in
    `mode` or a cheaper mode took, in a complete trial or a step part. None before any did."""
    cheaper = COMPILE_CHOICES[1 : COMPILE_CHOICES.index(mode) + 1]  # "off" is no compile
    seen: list[tuple[float, str]] = []
    for t in setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        took = whole_compile_s(t)  # not the fraction a trial paid compiling again where its step part compiled
        theirs = setup.config_of(t).compile if took and "config" in t.user_attrs else None
        if theirs in cheaper:
            seen.append((took, f"trial {t.number}, compile={theirs}"))
    if valuation is not None:
        seen += [(took, f"a step part, compile={m}") for m, took in valuation.compiles.items() if m in cheaper]
        seen += [(took, f"an earlier search on this GPU model, compile={m}")
                 for m, took in valuation.remembered_compiles.items() if m in cheaper]
    return min(seen, default=None)


def why_skip(setup: Setup, config: Config, valuation: Valuation | None) -> str | None:
    """Why `config` cannot finish the declared run first (its compile alone takes longer than the best run so far), or
    cannot be measured in what is left of the budget (``why_no_time``); None where it may (it compiles nothing, no
    compile was measured yet, or no trial is complete), and wherever the space has no uncompiled config to prefer."""
    if config.compile == "off" or "off" not in setup.space.domains["compile"]:
        return None  # compiles nothing; or the user pinned compile on (--fix compile=...): the best compiled is wanted
    return _outlasts_the_run(setup, config, valuation) or why_no_time(setup, config, valuation)


def _outlasts_the_run(setup: Setup, config: Config, valuation: Valuation | None) -> str | None:
    known, shortest = least_compile_s(setup, valuation, config.compile), shortest_run(setup)
    if known is None or shortest is None:
        return None
    (compile_s, where), (best, run_s) = known, shortest
    if compile_s <= run_s:
        return None
    epochs = setup.workload.defaults["epochs"]
    return (f"{CANNOT_PAY}: compiling this model's step took {compile_s:.1f} s ({where}), longer than the best "
            f"config's whole declared run ({epochs} epoch(s) in {run_s:.1f} s, trial {best.number})")


def why_no_time(setup: Setup, config: Config, valuation: Valuation | None) -> str | None:
    """Why compiled `config` is not measured now: what it needs (``need_s``) is more than the budget has left before
    the end's reserve (the parity check, the final rounds); None where it fits, before any compile was timed, or
    without a budget.

    A compile that takes most of a short budget leaves it no batch size measured (docs/search.md#compile-cost).
    """
    needed = need_s(setup, config, valuation)
    if needed is None or setup.options.time_budget_s is None:
        return None
    need, said = needed
    left = left_s(setup)
    if need <= left:
        return None
    return (f"{CANNOT_PAY}: {said}; the budget has {max(0.0, left):.0f} s left before the parity check and the final "
            f"rounds")


def need_s(setup: Setup, config: Config, valuation: Valuation | None) -> tuple[float, str] | None:
    """Seconds compiled `config` takes to be measured, in its trial and again in a final round should it win, each a
    compile and a measurement (the median trial's), and how that is said; None before any compile was timed.

    The compile is the least timed in its mode or a cheaper one, this search's or one an earlier search on this GPU
    model remembered (``autotune.study.planning.remembered``). Where its own step part compiled it, its trial (in
    that process) compiles again at what the part timed a second compile to cost, from the compile cache. A final
    round's fresh process pays the whole compile, a bound: the cache serves it too, but what that saves a process
    that starts afresh no part measured (on an H100, ResNet-50: 41.5 s cold, 16.2 s in a fresh process from the
    cache, 1.8 s again in the process that compiled it).
    """
    known = least_compile_s(setup, valuation, config.compile)
    measured = trial_s(setup) if known is not None else None
    if known is None or measured is None:
        return None
    compile_s, where = known
    trial_compile = compile_s
    again = valuation.recompiles.get(step_key(config)) if valuation is not None else None
    if again is not None:
        trial_compile = again
        where = f"{where}; {again:.0f} s again in the process its step part compiled it in"
    need = trial_compile + compile_s + 2 * measured
    return need, (f"its compile ({compile_s:.0f} s, {where}) and a measurement ({measured:.0f} s), in its trial and "
                  f"again in a final round, need {need:.0f} s")


def left_s(setup: Setup) -> float:
    """Seconds the budget has left before the end's reserve (the parity check, the final rounds); inf without one."""
    budget = setup.options.time_budget_s
    return float("inf") if budget is None else budget - setup.elapsed() - reserve_s(setup)
