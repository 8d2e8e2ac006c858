"""The search's plan: a grid of configs valued from their parts, and the best of them measured end to end next.

A trial of a heavy model costs most of a minute end to end (process, build, warm-up,
the prefetched backlog, windows over epoch boundaries), so a search of its budget
measures a handful of configs and the seeds decide
(docs/search.md#the-plan-and-valuation). Its parts cost seconds
(``autotune.trial.parts``), and one step rate serves every config with the same
step knobs, one loader rate every config with the same loader knobs. So,
once the baseline has run, the plan crosses each seed's step with a few step
variants (the graph, compile, amp flipped) and its loader with a few loader variants
(the workers at the seed's count, half the cores and all of them; two prefetch
depths), measures the parts those configs need until its share of the budget is
spent, and values every config of the grid, and every other config a measured step
and a measured loader that agree make (``autotune.study.planning.valuation``). The
fastest by prediction are queued to be measured end to end next; the others are
recorded in the study as valued, not measured, each with its predicted rate, so the
report, a dashboard and a resumed search see every config the search considered.
This is DeepSpeed's autotuner's way: a model ranks the space, measurement decides
among what it ranks high.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.trial import TrialState

from autotune.config import Config
from autotune.procs.pool import TrialPool
from autotune.study import standing
from autotune.study.clock import patience
from autotune.study.clock.deadline import part_timeout
from autotune.study.context import Setup
from autotune.study.planning import compile_cost
from autotune.study.planning.valuation import VALUED, Valuation, loader_key, seconds_of, step_key
from autotune.study.shared import sharing, tickets
from autotune.study.shared.tickets import VALUED_ROLE
from autotune.study.space.domains import Space
from autotune.study.space.seeds import seed_configs
from autotune.text import rate

PLAN_ATTRIBUTE = "plan"  # the study's user attribute: what the plan valued and queued; present once it was made
PLAN_SHARE = 0.25  # of the time budget, the most the plan's parts may take: the rest is for measuring
PLAN_S_WITHOUT_BUDGET = 120.0  # the plan's limit when the search has no time budget
PLAN_MIN_TRIALS = 16  # a search asked for fewer trials (--trials) makes no plan: its queue would take them all
PLAN_TRIALS = 8.0  # and no longer than this many of the baseline's end-to-end trial took
PLAN_MIN_S = 20.0  # but never less than this
MEASURE_AT_MOST = 8  # configs the plan queues to be measured end to end
WITHIN = 0.7  # and only those predicted at least this share of the fastest prediction (or the best measured)
SAY_PART_S = 1.0  # a part measurement that took this long gets a line of its own: where its seconds went


@dataclasses.dataclass
class Plan:
    """What the plan did: the grid it valued, what it queued, what its parts cost."""

    valued: list[tuple[Config, float]] = dataclasses.field(default_factory=list)  # (config, predicted), fastest first
    queued: list[Config] = dataclasses.field(default_factory=list)
    parts_s: float = 0.0
    cut_short: bool = False  # its share of the budget ran out before every group's parts were measured
    yielded_s: float = 0.0  # of its share, what it left to the compiled config predicted fastest (`yields_to`)

    def record(self) -> dict[str, Any]:
        return {"valued": len(self.valued), "queued": len(self.queued), "parts_s": round(self.parts_s, 1),
                "cut_short": self.cut_short, "yielded_s": round(self.yielded_s, 1)}


def step_variants(seed: Config, space: Space) -> list[dict[str, Any]]:
    """The seed's step, and the step with one of its knobs that move the step most flipped: the graph, compile, amp."""
    variants: list[dict[str, Any]] = [{}]
    if len(space.domains["cuda_graph"]) > 1:
        variants.append({"cuda_graph": not seed.cuda_graph})
    if "default" in space.domains["compile"]:
        variants.append({"compile": "off" if seed.compile != "off" else "default"})
    amps = space.domains["amp"]
    other = "off" if seed.amp != "off" else next((a for a in ("bf16", "fp16") if a in amps), "off")
    if other != seed.amp and other in amps:
        variants.append({"amp": other})
    return variants


def loader_variants(seed: Config, space: Space, cores: int) -> list[dict[str, Any]]:
    """The seed's loader, and its workers at half the cores and at all of them, each at the seed's prefetch depth
    and at 2."""
    if seed.placement != "stream" or seed.num_workers == 0:
        return [{}]
    workers = space.domains["num_workers"]
    counts = dict.fromkeys(min(max(n, workers[0]), workers[-1]) for n in (seed.num_workers, max(1, cores // 2), cores))
    prefetch = space.domains["prefetch_factor"]
    depths = dict.fromkeys(min(max(d, prefetch[0]), prefetch[-1]) for d in (seed.prefetch_factor or 2, 2))
    return [{"num_workers": n, "prefetch_factor": d} for n in counts for d in depths]


def grid(setup: Setup) -> list[list[Config]]:
    """The configs the plan values, in groups that share a batch, its layout and where it is decoded: within a
    group, every step variant meets every loader variant, so a group of s steps and l loaders costs s + l parts
    and values s x l configs. The groups follow the seeds' order, the baseline's left out (it ran)."""
    space, cores = setup.space, setup.machine.cpu_share
    groups: list[list[Config]] = []
    seen: set[Config] = set()
    for seed in seed_configs(setup.workload, setup.machine, space):
        if seed == setup.baseline:
            continue
        group = []
        for step in step_variants(seed, space):
            for loader in loader_variants(seed, space, cores):
                config = space.clip(dataclasses.replace(seed, **step, **loader))
                if config not in seen and config != setup.baseline and space.params(config) is not None:
                    seen.add(config)
                    group.append(config)
        if group:
            groups.append(group)
    return groups


def combinations(space: Space, valuation: Valuation) -> list[Config]:
    """Every config that a measured step rate and a measured loader rate make together: the two agree on what they
    share (the batch, its layout, where it is decoded), and the config is in the space. The grid's groups follow
    the seeds; a step of one group and a loader of another that agree are a config the parts value as well, at no
    further cost."""
    made: list[Config] = []
    for step in valuation.steps:
        for loader in valuation.loaders:
            knobs = dict(step)
            if any(knobs.get(k, v) != v for k, v in loader):
                continue
            knobs.update(loader)
            try:
                config = space.normalise(Config(**knobs))
            except TypeError:  # a key from an older autotune's study: not a whole config
                continue
            if space.params(config) is not None and step_key(config) == step and loader_key(config) == loader:
                made.append(config)
    return made


def distributions(space: Space, params: dict[str, Any]) -> dict[str, BaseDistribution]:
    """The distributions `Space.suggest` asks `params` from: a trial recorded without suggesting holds the same."""
    made: dict[str, BaseDistribution] = {}
    for knob in params:
        domain = space.domains[knob]
        made[knob] = (IntDistribution(domain[0], domain[-1]) if knob in ("num_workers", "prefetch_factor")
                      else CategoricalDistribution(domain))
    return made


def time_limit(setup: Setup) -> float:
    """Seconds the plan's parts may take: as long as PLAN_TRIALS end-to-end trials took (the baseline's), within
    PLAN_SHARE of the budget. A small model's trial takes seconds, and so must its plan, where a heavy model's trial
    takes most of a minute (docs/search.md#the-plan-and-valuation)."""
    budget = setup.options.time_budget_s
    share = PLAN_SHARE * budget if budget is not None else PLAN_S_WITHOUT_BUDGET
    complete = setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    took = [float(t.user_attrs["duration_s"]) for t in complete
            if t.user_attrs.get("role") == "baseline" and "duration_s" in t.user_attrs]
    return min(share, max(PLAN_MIN_S, PLAN_TRIALS * took[0])) if took else share


def bound(config: Config, valuation: Valuation) -> float:
    """The most `config` can run at, from its parts measured so far: the slower of them, or no bound before either is
    (a loop runs at about the slower of its parts; ``valuation.combine``)."""
    known = [rates[key] for rates, key in ((valuation.steps, step_key(config)), (valuation.loaders, loader_key(config)))
             if key in rates]
    return min(known) if known else float("inf")


def order(groups: list[list[Config]], valuation: Valuation) -> Iterator[Config]:
    """The grid's configs in the order their parts are measured, each skipped when a part of it already measured is
    no faster than the best prediction so far: whatever its other part, it cannot win (branch and bound).

    First each group's seed, in the seeds' order: one config per batch, decode path and step the seeds thought
    worth trying, so the plan sees each feed and each step before it varies any. Then the other configs of each
    group, the group of the fastest prediction first. Read lazily: each skip weighs the parts measured until then.

    Where the workers' loader runs slower than the eager step fed by the device's decode, the compiled step fed by
    the workers is never compiled, and the one fed by the device is. Worker counts and prefetch depths measured
    first would fill the plan's time before any compile (docs/search.md#the-plan-and-valuation).
    """

    def fastest(configs: list[Config]) -> float:
        return max((r for c in configs if (r := valuation.raw(c)) is not None), default=0.0)

    def candidates() -> Iterator[Config]:
        yield from (group[0] for group in groups)
        for group in sorted(groups, key=lambda g: -fastest(g)):  # sorted once the seeds are measured
            yield from group[1:]

    best = 0.0  # the fastest prediction: it moves only when the caller measures, after a yield
    for config in candidates():
        if valuation.missing(config) and bound(config, valuation) > best:
            yield config
            best = fastest([c for g in groups for c in g])


def make(setup: Setup, pool: TrialPool, valuation: Valuation) -> Plan | None:
    """Value the grid from its parts, queue the fastest to measure next, record the rest; None if made before, or
    if the search asked for fewer than PLAN_MIN_TRIALS trials."""
    if PLAN_ATTRIBUTE in setup.study.user_attrs or setup.options.trials < PLAN_MIN_TRIALS:
        return None  # a resumed search's plan was made (its queue is tickets or trials by now); or too few trials
    plan = Plan()
    limit = time_limit(setup)
    began = time.monotonic()
    groups = grid(setup)
    recalled = f"; {valuation.recalled} part rate(s) known from earlier searches here" if valuation.recalled else ""
    setup.echo(f"plan: valuing {sum(len(g) for g in groups)} config(s) in {len(groups)} group(s) from their step and "
               f"loader rates measured apart (at most {limit:.0f} s{recalled})")
    for config in order(groups, valuation):
        if time.monotonic() - began > limit:
            plan.cut_short = True
            break
        if compile_cost.why_skip(setup, config, valuation) is not None:
            continue  # a compile of this model took longer than the best whole run: no compiled step can win it
        # A part that fails is not asked for again: a step out of memory fails its configs' trials at once (the loop
        # cannot fit where its step alone did not), another failure leaves them to be measured end to end.
        asks, asked = valuation.missing(config) and valuation.failure(config) is None, time.monotonic()
        timeout = part_timeout(setup, limit - (asked - began))
        why = valuation.measure(pool, config, setup.lr(config), *timeout)
        took = time.monotonic() - asked
        if asks and (why is not None or took >= SAY_PART_S):  # a heavy model's plan is minutes of parts: say each
            setup.echo(f"plan: {took:.1f} s, {config.describe()}: {why or seconds_of(valuation.last)}")
        rest = limit - (time.monotonic() - began)
        if yields_to(setup, groups, valuation, rest) is not None:
            plan.yielded_s = rest
            break
    plan.parts_s = time.monotonic() - began
    measured = {setup.config_of(t) for t in setup.study.get_trials(deepcopy=False) if "config" in t.user_attrs}
    for config in dict.fromkeys([*(c for g in groups for c in g), *combinations(setup.space, valuation)]):
        if config == setup.baseline:
            continue
        predicted = valuation.predict(config)
        if predicted is not None:
            plan.valued.append((config, predicted))
    valuation.valued += len(plan.valued)
    plan.valued.sort(key=lambda cp: -cp[1])
    # Against the fastest prediction, or the best measured where that is faster: a config predicted far under what
    # already ran cannot win, however it ranks in the grid.
    top = max(plan.valued[0][1] if plan.valued else 0.0, standing.best_rate(setup.study) or 0.0)
    fastest = [c for c, p in plan.valued if p >= WITHIN * top and c not in measured][:MEASURE_AT_MOST]
    plan.queued = batches_first(fastest)
    _queue(setup, plan)
    _record_rest(setup, plan, valuation, measured)
    setup.study.set_user_attr(PLAN_ATTRIBUTE, plan.record())
    setup.echo(summary(plan, valuation))
    return plan


def yields_to(setup: Setup, groups: list[list[Config]], valuation: Valuation, rest_s: float) -> Config | None:
    """The compiled config of the grid predicted fastest, where the budget can measure it now (its compile twice over,
    ``compile_cost.need_s``) and could not once the plan had spent the `rest_s` seconds left of its share: the plan
    ends for it. None where the fastest prediction compiles nothing, fits either way, or fits neither way.

    On an H100, webdataset_resnet50's compiled config, predicted fastest in its plan, was skipped 3:19 into 8 minutes:
    its compile could not pay with 105 s left, once the plan's 124 s had gone to loader variants that ranked lower.
    """
    if rest_s <= 0 or "off" not in setup.space.domains["compile"]:
        return None  # the plan ends now anyway; or every config compiles (--fix compile=...), and none is skipped
    measured = {setup.config_of(t) for t in setup.study.get_trials(deepcopy=False) if "config" in t.user_attrs}
    predicted = [(p, c) for g in groups for c in g
                 if c not in measured and c != setup.baseline and (p := valuation.predict(c)) is not None]
    if not predicted:
        return None
    fastest, top = max(predicted, key=lambda pc: pc[0])
    if fastest < WITHIN * (standing.best_rate(setup.study) or 0.0):
        return None  # the plan would not queue it: far under what ran already
    needed = compile_cost.need_s(setup, top, valuation) if top.compile != "off" else None
    if needed is None:
        return None
    left = compile_cost.left_s(setup)
    return top if needed[0] <= left < needed[0] + rest_s else None


def summary(plan: Plan, valuation: Valuation) -> str:
    cut = "; its share of the budget ran out first" if plan.cut_short else ""
    if plan.yielded_s:
        cut = (f"; it ended {plan.yielded_s:.0f} s before its share ran out, so that the fastest prediction, a "
               f"compiled config, can still be measured")
    if not plan.queued:
        return f"plan: {len(plan.valued)} config(s) valued in {plan.parts_s:.0f} s{cut}; none queued"
    predicted = [p for c, p in plan.valued if c in plan.queued]
    return (f"plan: {len(plan.valued)} config(s) valued in {plan.parts_s:.0f} s ({len(valuation.steps)} step and "
            f"{len(valuation.loaders)} loader rate(s)){cut}; measuring the {len(plan.queued)} predicted fastest end to "
            f"end next (predicted {rate(predicted[0])}/s down to {rate(predicted[-1])}/s, x{valuation.factor():.2f} "
            f"interference)")


def batches_first(configs: list[Config]) -> list[Config]:
    """`configs` (fastest predicted first) with each batch size's first config ahead of the rest: a search cut short
    has measured every batch size the plan ranked high, where most speed-ups are, before the knobs that gain a few
    percent at a batch size measured already (docs/search.md#the-plan-and-valuation).

    >>> [c.batch_size for c in batches_first([Config(1024), Config(1024, amp="bf16"), Config(128), Config(1024, 2)])]
    [1024, 128, 1024, 1024]
    """
    firsts: dict[int, Config] = {}
    for config in configs:
        firsts.setdefault(config.batch_size, config)
    return [*firsts.values(), *(c for c in configs if c not in firsts.values())]


def _queue(setup: Setup, plan: Plan) -> None:
    predicted = dict(plan.valued)
    seeds = []
    for config in plan.queued:
        params = setup.space.params(config)
        assert params is not None
        seeds.append({"params": params, "user_attrs": {"role": "seed", "planned": round(predicted[config], 1)}})
    if seeds:
        with sharing.study_lock(setup.storage, setup.study_name):
            tickets.insert_next(setup.study, seeds)


def _record_rest(setup: Setup, plan: Plan, valuation: Valuation, measured: set[Config]) -> None:
    """Record each valued config neither queued nor measured already as a trial of its own, pruned, with its
    predicted rate and why."""
    queued = set(plan.queued) | measured
    made = []
    for rank, (config, predicted) in enumerate(plan.valued, 1):
        if config in queued:
            continue
        params = setup.space.params(config)
        assert params is not None
        reason = (f"{VALUED}: predicted {rate(predicted)}/s (step {rate(valuation.steps[step_key(config)])}/s, "
                  f"loader {rate(valuation.loaders[loader_key(config)])}/s, x{valuation.factor():.2f}), "
                  f"ranked {rank} of {len(plan.valued)}; the plan measures the {len(plan.queued)} fastest")
        made.append(optuna.trial.create_trial(
            state=TrialState.PRUNED, params=params, distributions=distributions(setup.space, params),
            user_attrs={"role": VALUED_ROLE, "config": config.as_dict(), "lr": setup.lr(config),
                        "predicted_samples_per_s": round(predicted, 1), "reason": reason,
                        "searcher": sharing.owner()}))
    if made:
        setup.study.add_trials(made)
    valuation.ruled_out += len(made)  # not measured end to end for their predicted rate


def measure_predicted_faster(setup: Setup) -> bool:
    """Queue next the config the plan predicted fastest above the best measured that no trial tried, and say so;
    False where there is none (``autotune.study.clock.patience.predicted_faster``)."""
    found = patience.predicted_faster(setup.study.get_trials(deepcopy=False), setup.config_of,
                                      standing.rejected_families(setup.study))
    if found is None:
        return False
    config = setup.config_of(found)
    params = setup.space.params(config)
    if params is None:
        return False
    predicted = float(found.user_attrs["predicted_samples_per_s"])
    with sharing.study_lock(setup.storage, setup.study_name):
        tickets.insert_next(setup.study, [{"params": params, "user_attrs": {
            "role": "seed", "planned": round(predicted, 1), "predicted_of": found.number}}])
    setup.echo(f"search: the plan predicted {config.describe()} at {rate(predicted)}/s, faster than any measured; "
               f"measuring it before the trials end")
    return True
