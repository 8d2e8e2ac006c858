"""A search's last step: the winner of the rounds, and its profile for the tuned file.

Every number a profile states comes from the rounds, where the winner and the
baseline were measured interleaved in the same run; the noise stated is the
larger of the windows' spread and the spread across processes.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from autotune.config import Config
from autotune.parity.check import ParityCheck
from autotune.study import answer
from autotune.study.clock.spent import Spent
from autotune.study.context import SearchError, Setup
from autotune.study.ranking import Results, learning_rate, run_s, stream_refusal
from autotune.study.shared import sharing, tickets
from autotune.text import rate
from autotune.tuned import file as tuned_file
from autotune.tuned import replaced


@dataclasses.dataclass(frozen=True)
class SearchResult:
    tuned_path: Path
    hardware: str
    profile: dict[str, Any]


NOISY = 0.25  # a noise past which a stated speed-up is a guess, as on a busy host (docs/search.md#the-finalists-rounds)


def winner(setup: Setup, finalists: list[Config], results: Results) -> Config:
    """The finalist whose declared run (the workload's `epochs`, one-time costs included) is shortest in the rounds,
    or the baseline when none beat it there; says so when steady samples/s would have picked another."""
    if not results[setup.baseline]:
        raise SearchError(
            "the baseline (the workload's own settings) failed in every round; no speed-up can be stated."
        )
    measured = [c for c in finalists if results[c]]
    if finalists and not measured:
        raise SearchError("every finalist failed when measured again; see the reasons above.")

    def median(config: Config) -> float:
        return statistics.median(r["samples_per_s"] for r in results[config])

    best = min(measured, key=lambda c: run_s(setup, results, c), default=setup.baseline)
    repeats = stream_refusal(setup, setup.baseline)
    if repeats is not None:  # the workload's own settings lose or repeat its stream's samples: they cannot win
        said_repeats(setup, best, repeats)
    elif best != setup.baseline and run_s(setup, results, best) >= run_s(setup, results, setup.baseline):
        run = (f"the declared run {run_s(setup, results, best):.1f} s against "
               f"{run_s(setup, results, setup.baseline):.1f} s" if setup.facts.size else UNKNOWN_RUN)
        setup.echo(
            f"finalists: none beat the baseline when measured again ({rate(median(best))}/s against "
            f"{rate(median(setup.baseline))}/s; {run}); the profile keeps the workload's own settings"
        )
        best = setup.baseline
    steady = steady_choice(setup, best, results)
    if steady is not None:
        epochs = setup.workload.defaults["epochs"]
        setup.echo(
            f"finalists: {best.describe()} finishes the declared run ({epochs} epoch(s) of {setup.facts.size:,} "
            f"samples) first: {run_s(setup, results, best):.1f} s at {rate(median(best))}/s; steady samples/s would "
            f"pick {steady['config']}: {rate(steady['samples_per_s'])}/s, but {steady['run_s']:.1f} s with "
            f"{steady['setup_s']:.1f} s of one-time costs"
        )
    return best


def said_repeats(setup: Setup, best: Config, reason: str) -> None:
    """Say that the baseline cannot be the answer, its workers losing or repeating its stream's samples (`reason`),
    and what is: the fastest config that keeps them, or, where none was measured, the baseline with a warning."""
    own = f"the workload's own settings ({setup.baseline.describe()})"
    if best != setup.baseline:
        setup.echo(f"finalists: {own} cannot be the answer: {reason}; the answer is the fastest config that keeps "
                   f"the stream's samples")
    else:
        setup.echo(f"warning: {own} are the answer, as no other config was measured, but {reason}: tuned_loader "
                   f"with them reads the stream so too; fix the stream, then search again")


def rests_on_one(setup: Setup, best: Config, results: Results) -> str | None:
    """Why the winner's rate rests on a single round where more were asked; None where it rests on two or more, is
    the baseline, or `--rounds 1` asked for one. One process is one draw of a host whose rates move between
    processes (docs/search.md#the-finalists-rounds)."""
    if best == setup.baseline or len(results[best]) >= 2 or setup.options.rounds < 2:
        return None
    failed = getattr(results, "failed", {}).get(best, 0)
    if failed or setup.options.time_budget_s is None:  # without a budget every round runs: one failed
        return "its other round failed (see above)"
    return f"the time budget ({setup.options.time_budget_s:.0f} s) left no time for a second"


def steady_choice(setup: Setup, best: Config, results: Results) -> dict[str, Any] | None:
    """What steady samples/s alone would have picked among the configs measured in the rounds, if not `best`.

    The profile states it beside the winner: its rate, its declared run and the one-time costs that lost it.
    """
    measured = [c for c in results if results[c] and stream_refusal(setup, c) is None]  # a config that may win
    if not setup.facts.size:  # a stream of unknown pass: its configs are ranked by steady samples/s already
        return None

    def median(config: Config, key: str) -> float:
        return statistics.median(r.get(key) or 0.0 for r in results[config])

    leader = max(measured, key=lambda c: median(c, "samples_per_s"), default=best)
    if leader == best or median(leader, "samples_per_s") <= median(best, "samples_per_s"):
        return None
    return {
        "config": leader.describe(),
        "samples_per_s": round(median(leader, "samples_per_s"), 1),
        "run_s": round(run_s(setup, results, leader), 2),
        "setup_s": round(median(leader, "setup_s") + median(leader, "materialize_s"), 3),
    }


def write(setup: Setup, best: Config, results: Results, check: ParityCheck | Any | None,
          spent: Spent | None = None) -> SearchResult:
    """Write the winner's profile into the tuned file, and say what it states.

    `check`: the parity check, or the one a run that could not write kept (``autotune.study.ending.StoredCheck``).
    `spent`: where the search's time went; the profile keeps it and the last line says it.
    """
    # The baseline needs no check, but a check that could not judge is stated whatever wins, and so is why the
    # workload's own settings are the answer when faster configs ran but none may win.
    kept = answer.kept(setup.study) if best == setup.baseline else None
    record = None
    if check is not None and (best != setup.baseline or check.conclusive is False or kept is not None):
        record = check.record(best)
        if kept is not None:
            record = answer.parity_record(record, kept, conclusive=check.conclusive)
    made = profile(setup, best, results, record)
    if spent is not None:
        made["budget"] = spent.record()
    # The profile this one replaces, kept whole first: a narrower or noisier search must not lose a better answer.
    old = replaced.keep(setup.ref.tuned_path, setup.ref.name, setup.machine.hardware,
                        setup.options.state_dir / "replaced")
    tuned_file.write_profile(setup.ref.tuned_path, setup.ref.name, setup.machine.hardware, made)
    # A speed-up is a ratio of two measurements: the baseline's noise is the stated one's as much as the winner's.
    base_noise = f", the baseline's ±{made['baseline_spread']:.1%}" if best != setup.baseline else ""
    first = f", first batch {made['first_batch_s']:.2f} s" if "first_batch_s" in made else ""
    alone = rests_on_one(setup, best, results)
    setup.echo(
        f"wrote {setup.ref.tuned_path}: {best.describe()}: {rate(made['samples_per_s'])}/s, "
        f"{made['speedup']}x the baseline's {rate(made['baseline_samples_per_s'])}/s "
        f"(noise ±{made['spread']:.1%}{base_noise}{first}), search {made['search_s']:.0f} s"
        + (f"; it rests on one round: {alone}" if alone else "")
    )
    if not setup.facts.size:
        setup.echo(f"stream: {UNKNOWN_RUN}; the winner was ranked by its steady samples/s. Declare "
                   f"samples_per_epoch in DEFAULTS to rank configs by the whole declared run")
    noisier = setup.baseline if made["baseline_spread"] >= made["spread"] else best
    said = noise_said("the baseline's" if noisier == setup.baseline else "the winner's",
                      max(made["spread"], made["baseline_spread"]),
                      [r["samples_per_s"] for r in results[noisier]] + list(autotuned_draws(setup, noisier)))
    if said is not None:
        setup.echo(said)
    if old is not None:
        setup.echo(replaced.said(*old, made))
    if "tokens_per_s" in made:
        padding = f"; {made['padding']:.0%} of its token positions are padding" if "padding" in made else ""
        setup.echo(
            f"tokens: {rate(made['tokens_per_s'])}/s real tokens against the baseline's "
            f"{rate(made['baseline_tokens_per_s'])}/s{padding}"
        )
    parity = made["parity"]
    if kept is not None:
        setup.echo(f"parity: kept the workload's own settings (1.0x is the answer): {kept}")
    elif parity.get("conclusive") is False:  # the check could not tell: the winner passed on keeping its math
        setup.echo(f"parity: inconclusive; the winner passed on its math alone: {parity.get('reason')}")
    elif parity.get("checked") and "deviation" not in parity:
        setup.echo(f"parity: the winner trains like the baseline: {parity.get('reason')}")
    elif parity.get("checked"):
        setup.echo(
            f"parity: the winner trains like the baseline (deviation {parity['deviation']:+.1%}, probe "
            f"{parity['probe_deviation']:+.1%}, tolerance ±{parity['tolerance']:.0%}) at lr {parity['lr']:g}; "
            f"the check took {parity['check_s']:.0f} s"
        )
    elif best == setup.baseline:
        setup.echo("parity: the winner is the workload's own settings; there is nothing to check")
    else:
        setup.echo("parity: not checked (--no-parity-check): the winner may train differently from the baseline")
    if spent is not None:
        setup.echo(spent.line())
    return SearchResult(setup.ref.tuned_path, setup.machine.hardware, made)


def profile(
    setup: Setup, best: Config, results: Results, parity_record: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The profile's every key (``autotune.tuned.schema``), from the rounds' measurements."""

    def med(config: Config, key: str) -> float:
        return statistics.median(r[key] for r in results[config])

    def noise(config: Config) -> float:
        return spread_of(results[config], autotuned_draws(setup, config))

    counts = _count(setup.study.trials)
    steady = steady_choice(setup, best, results)
    value, base = med(best, "samples_per_s"), med(setup.baseline, "samples_per_s")
    return {
        "command": setup.options.command,
        "created": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        "samples_per_s": round(value, 1),
        "steady_samples_per_s": round(med(best, "steady_samples_per_s"), 1),
        "baseline_samples_per_s": round(base, 1),
        "speedup": round(value / base, 2),
        "spread": round(noise(best), 4),
        "baseline_spread": round(noise(setup.baseline), 4),
        "step_s": med(best, "step_s"),
        "setup_s": round(med(best, "setup_s") + med(best, "materialize_s"), 3),
        **declared_run(setup, best, results),
        **first_batch(results[best]),
        **({"steady_choice": steady} if steady is not None else {}),  # what samples/s alone would have picked
        **tokens(results, best, setup.baseline),
        "search_s": round(setup.elapsed(), 1),
        "trials_complete": counts["complete"],
        "trials_failed": counts["failed"],
        "trials_pruned": counts["pruned"],
        "trials_interrupted": counts["interrupted"],
        "cpu_share": setup.machine.cpu_share,
        **learning_rate(setup, best, parity_record),  # lr, lr_rule, lr_reason: the rate parity passed, and why
        "study": setup.study_name,
        "knobs": tuned_file.config_to_knobs(best),
        "excluded": dict(setup.space.excluded),
        "versions": versions(),
        "parity": parity_record or {"checked": False},
    }


UNKNOWN_RUN = "the declared run is unknown: the stream declares no pass (samples_per_epoch)"


def declared_run(setup: Setup, best: Config, results: Results) -> dict[str, Any]:
    """The profile's epoch and declared run (the winner's and the baseline's), and its epochs; none for a stream
    whose pass is unknown, whose every epoch would be a made-up length (ranked by its steady rate instead)."""
    if not setup.facts.size:
        return {}
    return {
        "epoch_s": round(statistics.median(r["epoch_s"] for r in results[best]), 4),
        "run_s": round(run_s(setup, results, best), 2),
        "baseline_run_s": round(run_s(setup, results, setup.baseline), 2),
        "run_epochs": setup.workload.defaults["epochs"],  # the declared run that run_s times and that chose the winner
    }


def first_batch(rounds: list[dict[str, Any]]) -> dict[str, float]:
    """A stream's time to its first batch (shards opened, a shuffle buffer filled), the median over the rounds; it
    is part of `setup_s`. Nothing for a data set read by index."""
    seconds = [r["first_batch_s"] for r in rounds if r.get("first_batch_s") is not None]
    return {"first_batch_s": round(statistics.median(seconds), 3)} if seconds else {}


def tokens(results: Results, best: Config, baseline: Config) -> dict[str, float]:
    """Tokens/s of the winner and the baseline, and the winner's padding, where the workload counts tokens.

    Padding is the price of a larger batch of varying lengths: a config judged on
    samples alone may pad more, so the profile states real tokens beside samples.
    """
    if any(r.get("tokens_per_sample") is None for c in (best, baseline) for r in results[c]):
        return {}

    def per_s(config: Config) -> float:
        return statistics.median(r["samples_per_s"] * r["tokens_per_sample"] for r in results[config])

    made = {"tokens_per_s": round(per_s(best), 1), "baseline_tokens_per_s": round(per_s(baseline), 1)}
    paddings = [r["padding"] for r in results[best] if r.get("padding") is not None]
    if paddings:
        made["padding"] = round(statistics.median(paddings), 4)
    return made


def autotuned_draws(setup: Setup, config: Config) -> list[float]:
    """The trials' measurements of `config`, if cuDNN autotunes it on a GPU; else none.

    Autotuning chooses its plans afresh in each process, and a config's rate moves with
    them (docs/measuring.md, on the noise stated), so every trial process that measured
    the config is one more draw of what a training run gets, beside the rounds' fresh processes.
    They count in its noise only: the fastest trial is what made the config a finalist,
    so as a measurement of its speed it is biased upwards.
    """
    if not (config.cudnn_benchmark and setup.machine.cuda):
        return []
    return measured_values(
        setup.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), config, setup.space.normalise
    )


def _count(trials: list[FrozenTrial]) -> dict[str, int]:
    """The trials taken, by how they ended; one an interrupt stopped (its searcher stopped or died) is no failure of
    its config: counted as interrupted."""
    # An interrupted trial's retry stands for it; a config the plan valued without measuring is no trial taken.
    mine = tickets.started(trials)

    def interrupted(t: FrozenTrial) -> bool:
        return t.state == TrialState.FAIL and str(t.user_attrs.get("reason", "")).startswith(sharing.INTERRUPTED)

    return {
        "complete": sum(t.state == TrialState.COMPLETE for t in mine),
        "failed": sum(t.state == TrialState.FAIL and not interrupted(t) for t in mine),
        "pruned": sum(t.state == TrialState.PRUNED for t in mine),
        "interrupted": sum(interrupted(t) for t in mine),
    }


def measured_values(
    trials: Sequence[FrozenTrial], config: Config, normalise: Callable[[Config], Config]
) -> list[float]:
    """The values of the complete trials that measured `config` themselves (not a duplicate reusing another's)."""
    return [
        float(t.value)
        for t in trials
        if t.state == TrialState.COMPLETE
        and t.value is not None
        and "duplicate_of" not in t.user_attrs
        and "config" in t.user_attrs
        and normalise(Config.from_dict(t.user_attrs["config"])) == config
    ]


def noise_said(whose: str, spread: float, rates: Sequence[float]) -> str | None:
    """What a noise past NOISY says of a speed-up: a guess where the processes that measured it (`rates`) disagree;
    where they agree, a rate that moves within a run, which the rate over whole passes is not
    (docs/search.md#the-finalists-rounds)."""
    if spread <= NOISY:
        return None
    across = (max(rates) - min(rates)) / statistics.median(rates) if len(rates) > 1 else math.inf
    if across <= NOISY:
        return (f"note: {whose} rate moves by ±{spread:.0%} within a run (its windows: a stream's feed within its "
                f"pass, a loader's bursts), while its {len(rates)} processes agree within ±{across:.0%}; the stated "
                f"rate is over whole passes")
    return (f"warning: {whose} measurements disagree by ±{spread:.0%}: a host busy with other work reads so, and so "
            f"does a loop whose rate moves as it runs (a stream's feed within its pass); the speed-up may be off by as "
            f"much; search again on a quieter host, or with more --rounds")


def spread_of(rounds: list[dict[str, Any]], draws: Sequence[float] = ()) -> float:
    """A config's noise: the larger of its rounds' median within-run spread and the spread of every
    measurement across processes (its rounds' fresh ones, and `draws`: its trial processes' own)."""
    rates = [r["samples_per_s"] for r in rounds] + list(draws)
    within = statistics.median(r["spread"] for r in rounds)
    across = (max(rates) - min(rates)) / statistics.median(rates) if len(rates) > 1 else 0.0
    return max(within, across)


def versions() -> dict[str, str]:
    import torch

    found = {"torch": torch.__version__, "python": sys.version.split()[0]}
    if torch.version.cuda:
        found["cuda"] = torch.version.cuda
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        found["driver"] = driver.decode() if isinstance(driver, bytes) else driver
    except Exception:  # no NVIDIA driver here: a CPU profile has none to record
        pass
    return found
