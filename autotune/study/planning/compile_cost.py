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
from autotune.study.context import Setup
from autotune.study.planning.valuation import Valuation, step_key

CANNOT_PAY = "skipped, its compile cannot pay"  # how a trial's reason begins when it was not run for this


def least_compile_s(setup: Setup, valuation: Valuation | None, mode: str) -> tuple[float, str] | None:
    """The least a compile in `mode` can cost this model, and where that was measured: the least any compile in
    `mode` or a cheaper mode took, in a complete trial or a step part. None before any did."""
    cheaper = COMPILE_CHOICES[1 : COMPILE_CHOICES.index(mode) + 1]  # "off" is no compile
    seen: list[tuple[float, str]] = []
    for t in setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        took = (t.user_attrs.get("result") or {}).get("compile_s")
        mode = setup.config_of(t).compile if took and "config" in t.user_attrs else None
        if mode in cheaper:
            seen.append((float(took), f"trial {t.number}, compile={mode}"))
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
    """Why compiled `config` is not measured now: its compile and a measurement, in its trial and again in a final
    round should it win, take longer than the budget has left before the end's reserve (the parity check, the final
    rounds). The compile is the least timed in its mode or a cheaper one, this search's or one an earlier search on
    this GPU model remembered (``autotune.study.planning.remembered``); None before any was timed, or without a budget.
    Where its own step part compiled it, its trial and its round compile again from the compile cache, at what the
    part timed that to cost; else its round does, after its trial's whole compile.

    A compile that takes most of a short budget leaves it no batch size measured (docs/search.md#compile-cost).
    """
    known = least_compile_s(setup, valuation, config.compile)
    measured = trial_s(setup) if known is not None else None
    budget = setup.options.time_budget_s if measured is not None else None
    if budget is None or known is None or measured is None:
        return None
    compile_s, where = known
    trial_compile, round_compile = compile_s, compile_s
    warm = valuation.recompiles if valuation is not None else {}
    if step_key(config) in warm:  # its step part compiled it: its trial and its round find it in the cache
        trial_compile = round_compile = warm[step_key(config)]
        where = f"{where}; {trial_compile:.0f} s again from the compile cache, as its step part measured"
    elif warm:  # its trial pays the whole compile of its shapes, and leaves them in the cache for its round
        round_compile = min(compile_s, *warm.values())
    left = budget - setup.elapsed() - reserve_s(setup)
    need = trial_compile + round_compile + 2 * measured
    if need <= left:
        return None
    return (f"{CANNOT_PAY}: its compile ({compile_s:.0f} s, {where}) and a measurement ({measured:.0f} s), in its "
            f"trial and again in a final round, need {need:.0f} s; the budget has {max(0.0, left):.0f} s left before "
            f"the parity check and the final rounds")
