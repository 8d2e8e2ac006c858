"""The Optuna study: storage, sampler, pruner, seeds, finalists, and the tuned recipe.

Only this module (with ``space``) knows about Optuna. A study lives in an
embedded SQLite file by default, or any Optuna storage URL; running the same
command again resumes it. Heartbeats mark the trials of a search that was killed
as failed, and re-queue their configs, so nothing is lost and nothing waits.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import re
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune import parity
from autotune import recipe as recipe_file
from autotune.config import Config, baseline_config, scaled_lr
from autotune.failures import Finished, Hopeless, blocks, hopeless_values
from autotune.measure import Windows
from autotune.space import Machine, Space, build_space, detect_machine
from autotune.trial import Outcome, TrialPool
from autotune.workload import Workload, load, resolve

HEARTBEAT_S = 5  # a live search touches its running trial this often
GRACE_S = 20  # a running trial not touched for this long belongs to a dead search
PARITY_TIMEOUT_FACTOR = 4  # a parity run trains about an epoch; a trial times a few seconds of it
PARITY_EXTRA_RUNS = 6  # configs beyond the finalists the parity check may run when every finalist fails it


class SearchError(RuntimeError):
    """A search that cannot start or finish; the message says why and what to do."""


class TrialFailed(Exception):
    """Raised inside the objective so Optuna records the trial as FAIL; carries the reason."""


class ClearlyWorsePruner(optuna.pruners.BasePruner):
    """Stop a trial whose windows so far run below `ratio` of the best complete trial."""

    def __init__(self, ratio: float = 0.5, warmup_windows: int = 2) -> None:
        self.ratio, self.warmup_windows = ratio, warmup_windows

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        values = list(trial.intermediate_values.values())
        if len(values) < self.warmup_windows:
            return False
        try:
            best = study.best_value
        except ValueError:  # no complete trial yet
            return False
        return statistics.median(values) < self.ratio * best


@dataclasses.dataclass(frozen=True)
class SearchOptions:
    trials: int = 40  # finished trials the study should hold, this run's and earlier runs' together
    time_budget_s: float | None = None  # stop starting trials after this long
    fixes: dict[str, tuple[Any, ...]] = dataclasses.field(default_factory=dict)
    storage: str | None = None
    study: str | None = None
    trial_timeout_s: float = 90.0
    lr_rule: str = "linear"
    finalists: int = 3  # best configs measured again against the baseline
    parity_check: bool = True  # a finalist must train like the baseline (autotune.parity)
    rounds: int = 2  # fresh processes each finalist is measured in
    device_index: int = 0
    cpu_share: int | None = None
    seed: int = 0
    command: str = "autotune search"
    state_dir: Path = Path(".autotune")  # the default SQLite study and trial-process logs


@dataclasses.dataclass(frozen=True)
class SearchResult:
    tuned_path: Path
    hardware: str
    profile: dict[str, Any]


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def default_study_name(recipe: str, hardware: str, fixes: dict[str, tuple[Any, ...]]) -> str:
    # The fixes are part of the name: a study searches one space, and a narrowed space is another search.
    fixed = "".join(f"+{k}={','.join(str(v) for v in vs)}" for k, vs in sorted(fixes.items()))
    return f"{recipe}@{slug(hardware)}{fixed}"


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """An RDB storage with heartbeats, or a clear error for a URL that cannot be used."""
    try:
        return optuna.storages.RDBStorage(
            url,
            heartbeat_interval=HEARTBEAT_S,
            grace_period=GRACE_S,
            heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=2),
            engine_kwargs={"pool_pre_ping": True},
        )
    except Exception as exc:  # sqlalchemy raises many kinds; the user needs one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SearchError(f"cannot open study storage {_redact(url)}: {first}") from exc


def _redact(url: str) -> str:
    return re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", url)


def seed_configs(workload: Workload, machine: Machine, space: Space) -> list[Config]:
    """The baseline and a few informed configs, queued first so a good config is measured early."""
    bs = workload.defaults["batch_size"]
    workers = min(8, machine.cpu_share)
    amp = "bf16" if "bf16" in machine.amp_dtypes else machine.amp_dtypes[0]
    base = baseline_config(workload, machine.cuda)
    candidates = [
        base,
        # The second seed's advice: bigger batches, 8 pinned persistent workers, cudnn.benchmark.
        Config(batch_size=bs * 8, num_workers=workers, pin_memory=True, persistent_workers=True, prefetch_factor=2, cudnn_benchmark=True),
        # Data on the device and the whole step in one graph: the known-fast small-model loop.
        Config(batch_size=bs, placement="device", cuda_graph=True, cudnn_benchmark=True, amp=amp),
        Config(batch_size=bs * 8, placement="device", cuda_graph=True, cudnn_benchmark=True, amp=amp),
        # Every loader and loop knob on, for workloads whose data must stream.
        Config(batch_size=bs * 4, num_workers=machine.cpu_share, pin_memory=True, persistent_workers=True, prefetch_factor=4,
               cudnn_benchmark=True, channels_last=True, amp=amp, cuda_graph=True),
        Config(batch_size=bs * 2, placement="device", cuda_graph=True, amp="fp16"),
    ]
    seeds: list[Config] = []
    for config in candidates:
        clipped = space.clip(config)
        if space.params(clipped) is not None and clipped not in seeds:
            seeds.append(clipped)
    return seeds


def _count(trials: list[optuna.trial.FrozenTrial]) -> dict[str, int]:
    states = {"complete": TrialState.COMPLETE, "failed": TrialState.FAIL, "pruned": TrialState.PRUNED}
    return {name: sum(t.state == s for t in trials) for name, s in states.items()}


def _fmt_rate(rate: float) -> str:
    return f"{rate:,.0f}/s"


def _elapsed(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


class Search:
    """One `autotune search`: builds the space, runs the study, measures finalists, writes the recipe."""

    def __init__(self, recipe: str, options: SearchOptions, echo: Callable[[str], None] = print) -> None:
        self.options, self.echo = options, echo
        self.ref = resolve(recipe)
        self.workload = load(self.ref)
        self.machine = detect_machine(options.device_index, options.cpu_share)
        import torch

        from autotune.runner import Runner

        self.device = f"cuda:{options.device_index}" if self.machine.cuda else "cpu"
        self.facts = Runner(self.workload, torch.device("cpu")).facts()  # builds the data set here, once
        self.space = build_space(self.workload.defaults["batch_size"], self.machine, self.facts, options.fixes)
        self.baseline = self.space.normalise(baseline_config(self.workload, self.machine.cuda))
        self.study_name = options.study or default_study_name(self.ref.name, self.machine.hardware, options.fixes)
        self.storage_url = options.storage or f"sqlite:///{(options.state_dir / f'{self.ref.name}.db').resolve()}"
        self.windows = Windows(window_s=0.2 if self.machine.cuda else 0.4)
        self.started = time.monotonic()
        self.hopeless: list[Hopeless] = []
        self.base_sampler: optuna.samplers.BaseSampler | None = None

    def lr(self, config: Config) -> float:
        d = self.workload.defaults
        return scaled_lr(float(d["lr"]), d["batch_size"], config.batch_size, self.options.lr_rule, self.workload.lr_max)

    # -- the study ---------------------------------------------------------------------------

    def open_study(self) -> optuna.Study:
        optuna.logging.set_verbosity(optuna.logging.ERROR)  # we print our own progress lines
        if self.options.storage is None:
            self.options.state_dir.mkdir(parents=True, exist_ok=True)
        storage = open_storage(self.storage_url)
        sampler = optuna.samplers.TPESampler(
            seed=self.options.seed, n_startup_trials=10, multivariate=True, group=True, constant_liar=True
        )
        self.base_sampler = sampler
        try:
            study = optuna.create_study(
                storage=storage, study_name=self.study_name, direction="maximize",
                sampler=sampler, pruner=ClearlyWorsePruner(), load_if_exists=True,
            )
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SearchError(f"cannot open study {self.study_name!r} in {_redact(self.storage_url)}: {first}") from exc
        recorded = study.user_attrs.get("hardware")
        if recorded is None:
            study.set_user_attr("hardware", self.machine.hardware)
            study.set_user_attr("recipe", self.ref.name)
            study.set_user_attr("cpu_share", self.machine.cpu_share)
        elif recorded != self.machine.hardware:
            raise SearchError(
                f"study {self.study_name!r} measures {recorded!r}, but this worker runs on {self.machine.hardware!r}; "
                f"a study is bound to one hardware model: use another --study for this machine."
            )
        if not study.trials:
            for config in seed_configs(self.workload, self.machine, self.space):
                role = "baseline" if config == self.baseline else "seed"
                study.enqueue_trial(self.space.params(config) or {}, user_attrs={"role": role}, skip_if_exists=True)
        return study

    def objective(self, pool: TrialPool, study: optuna.Study) -> Callable[[optuna.Trial], float]:
        def run(trial: optuna.Trial) -> float:
            config = self.space.suggest(trial)
            lr = self.lr(config)
            trial.set_user_attr("config", config.as_dict())
            trial.set_user_attr("lr", lr)
            twin = self._measured(study, config)
            if twin is not None:  # the sampler proposed a config already measured: reuse its number
                assert twin.value is not None
                trial.set_user_attr("duplicate_of", twin.number)
                trial.set_user_attr("result", twin.user_attrs.get("result"))
                self._progress(study, trial.number, config, Outcome("complete", result={"samples_per_s": twin.value, "spread": 0.0}), twin=twin.number)
                return twin.value
            blocked = blocks(config.as_dict(), self.hopeless)
            if blocked is not None:  # known not to work: record it, spend no time on it
                outcome = Outcome("failed", reason=f"skipped: {blocked.short()}")
                self._record(trial, outcome)
                self._progress(study, trial.number, config, outcome)
                raise TrialFailed(outcome.reason)

            def on_window(i: int, rate: float) -> bool:
                trial.report(rate, i)
                return trial.should_prune()

            outcome = pool.run(config, lr, self.windows, on_window)
            self._record(trial, outcome)
            self._progress(study, trial.number, config, outcome)
            if outcome.state == "failed" and trial.user_attrs.get("role") == "baseline":
                # Nothing can be compared against a loop that does not run; stop before wasting the budget.
                raise SearchError(
                    f"the workload's own settings ({config.describe()}) fail: {outcome.reason}. "
                    f"Fix the workload first; trial process logs are in {self.options.state_dir / 'logs'}."
                )
            if outcome.state == "failed":
                raise TrialFailed(outcome.reason)
            if outcome.state == "pruned":
                raise optuna.TrialPruned()
            assert outcome.result is not None
            return float(outcome.result["samples_per_s"])

        return run

    def _measured(self, study: optuna.Study, config: Config) -> optuna.trial.FrozenTrial | None:
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if "duplicate_of" not in t.user_attrs and self.space.normalise(Config.from_dict(t.user_attrs["config"])) == config:
                return t
        return None

    def _record(self, trial: optuna.Trial, outcome: Outcome) -> None:
        if outcome.reason:
            trial.set_user_attr("reason", outcome.reason)
        if outcome.result:
            keep = ("samples_per_s", "steady_samples_per_s", "spread", "step_s", "epoch_s", "epoch_overhead_s",
                    "setup_s", "materialize_s", "capture_s", "gpu_util", "peak_memory_bytes")
            trial.set_user_attr("result", {k: outcome.result.get(k) for k in keep})

    def _progress(self, study: optuna.Study, number: int, config: Config, outcome: Outcome, twin: int | None = None) -> None:
        done = sum(t.state.is_finished() for t in study.get_trials(deepcopy=False)) + 1
        head = f"[{done:>3}/{self.options.trials}] {_elapsed(time.monotonic() - self.started)}"
        if outcome.state == "complete":
            assert outcome.result is not None
            rate = outcome.result["samples_per_s"]
            best = max([rate] + [t.value for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.value])
            what = f"{_fmt_rate(rate):>14} ±{outcome.result['spread']:.1%}" if twin is None else f"{_fmt_rate(rate):>14} = trial {twin}"
            tail = f"best {_fmt_rate(best)}"
        elif outcome.state == "pruned":
            rates = outcome.windows
            what = f"pruned at window {len(rates)}: {_fmt_rate(statistics.median(rates)) if rates else '-'}"
            tail = "clearly worse than the best"
        else:
            reason = outcome.reason or "unknown"
            what, tail = f"failed: {reason if len(reason) <= 110 else reason[:107] + '...'}", ""
        self.echo(f"{head}  trial {number:<3} {what:<28} {config.describe():<58} {tail}".rstrip())

    def learn_failures(self, study: optuna.Study, _trial: optuna.trial.FrozenTrial | None = None) -> None:
        """After each trial: find values that cannot work, say so once, and stop sampling them."""
        finished = [
            Finished(t.number, t.user_attrs.get("config", {}), t.state in (TrialState.COMPLETE, TrialState.PRUNED), t.user_attrs.get("reason"))
            for t in study.get_trials(deepcopy=False)
            if t.state.is_finished()
        ]
        found = hopeless_values(finished)
        known = {(h.knob, repr(h.value)) for h in self.hopeless}
        for h in found:
            if (h.knob, repr(h.value)) not in known:
                self.echo(f"  not trying again: {h.describe()}")
        self.hopeless = found
        fixed: dict[str, Any] = {}
        for knob in {h.knob for h in found}:
            domain = self.space.domains[knob]
            left = [v for v in domain if blocks({knob: v}, found) is None]
            if len(domain) > 1 and len(left) == 1:
                fixed[knob] = left[0]  # the sampler stops proposing the value at all
        if fixed and self.base_sampler is not None:
            study.sampler = optuna.samplers.PartialFixedSampler(fixed, self.base_sampler)

    def run_study(self, study: optuna.Study, pool: TrialPool) -> None:
        finished = sum(t.state.is_finished() for t in study.trials)
        remaining = max(0, self.options.trials - finished)
        if finished:
            self.echo(f"resuming study {self.study_name!r}: {finished} trial(s) already finished, {remaining} to go")
        self.learn_failures(study)
        if remaining:
            study.optimize(
                self.objective(pool, study), n_trials=remaining, timeout=self.options.time_budget_s,
                catch=(TrialFailed,), gc_after_trial=False, callbacks=[self.learn_failures],
            )

    # -- finalists and the recipe --------------------------------------------------------------

    def ranked(self, study: optuna.Study) -> dict[Config, int]:
        """Distinct complete configs, fastest first, each with its fastest trial's number; not the baseline."""
        complete = sorted(study.get_trials(states=(TrialState.COMPLETE,)), key=lambda t: t.value or 0.0, reverse=True)
        chosen: dict[Config, int] = {}
        for t in complete:
            config = self.space.normalise(Config.from_dict(t.user_attrs["config"]))
            if config not in chosen and config != self.baseline:
                chosen[config] = t.number
        return chosen

    def finalists(self, study: optuna.Study) -> list[Config]:
        return list(self.ranked(study))[: self.options.finalists]

    def parity_winner(self, pool: TrialPool, study: optuna.Study, ranked: dict[Config, int], by_speed: list[Config],
                      results: dict[Config, list[dict[str, Any]]]) -> tuple[parity.Gate, Config]:
        """The fastest finalist that trains like the baseline; failing all, the fastest config after them that does.

        Checked in that order, so the check usually costs the baseline's run and one
        more. A winner from beyond the finalists is measured again like them (into
        `results`). Each verdict is kept in the study, by trial.
        """
        timeout = PARITY_TIMEOUT_FACTOR * self.options.trial_timeout_s

        def trace(config: Config, lr: float, samples: int) -> parity.Trace:
            outcome = pool.trace(config, lr, samples, self.baseline.batch_size, timeout)
            if outcome.state != "complete" or outcome.result is None:
                raise parity.TraceFailed(outcome.reason or "no result")
            return parity.Trace.from_dict(outcome.result)

        gate = parity.Gate(self.baseline, self.lr, trace, list(ranked), self.echo)
        self.echo(f"parity: checking the fastest against the baseline ({self.baseline.describe()}, lr {self.lr(self.baseline):g}, "
                  f"fp32, eager) from the same weights and data order, {gate.samples:,} samples each")
        try:
            chosen = gate.select(by_speed, want=1, max_runs=len(by_speed))
            if not chosen:
                rest = [c for c in ranked if c not in gate.verdicts]
                chosen = gate.select(rest, want=1, max_runs=PARITY_EXTRA_RUNS)
                if chosen:
                    self.echo(f"finalists: no finalist trains like the baseline; measuring {chosen[0].describe()} again instead")
                    more = self.remeasure(pool, chosen)
                    results[chosen[0]] = more[chosen[0]]
                    results[self.baseline] += more[self.baseline]
        except parity.ParityError as exc:
            raise SearchError(f"{exc} Run with --no-parity-check to skip the check.") from exc
        finally:
            for config, verdict in gate.verdicts.items():
                # Optuna keeps a finished trial read-only: the verdict is kept on the study, under its trial.
                study.set_user_attr(f"parity:trial-{ranked[config]}", {**verdict.as_record(), "config": config.describe()})
            self.echo(gate.summary())
        if not chosen or not results[chosen[0]]:
            raise SearchError(
                f"no config faster than the baseline trains like it: all {len(gate.verdicts)} checked were rejected "
                f"(the lines above give the numbers). Narrow the search (e.g. --fix batch_size="
                f"{self.baseline.batch_size}), try --lr-scaling, or skip the check with --no-parity-check."
            )
        return gate, chosen[0]

    def remeasure(self, pool: TrialPool, finalists: list[Config]) -> dict[Config, list[dict[str, Any]]]:
        """Each finalist and the baseline, interleaved, in a fresh process per round."""
        results: dict[Config, list[dict[str, Any]]] = {c: [] for c in [self.baseline, *finalists]}
        order = [self.baseline, *finalists]
        for r in range(self.options.rounds):
            rotated = order[r % len(order):] + order[: r % len(order)]
            for i, config in enumerate(rotated):
                outcome = pool.run(config, self.lr(config), self.windows, fresh=(i == 0))
                if outcome.state != "complete" or outcome.result is None:
                    self.echo(f"  round {r + 1}: {config.describe()} failed: {outcome.reason}")
                    continue
                results[config].append(outcome.result)
                self.echo(f"  round {r + 1}: {_fmt_rate(outcome.result['samples_per_s']):>14}  {config.describe()}")
        return results

    def profile(self, study: optuna.Study, winner: Config, results: dict[Config, list[dict[str, Any]]],
                parity_record: dict[str, Any] | None = None) -> dict[str, Any]:
        def med(config: Config, key: str) -> float:
            return statistics.median(r[key] for r in results[config])

        def noise(config: Config) -> float:
            rates = [r["samples_per_s"] for r in results[config]]
            within = statistics.median(r["spread"] for r in results[config])
            across = (max(rates) - min(rates)) / statistics.median(rates) if len(rates) > 1 else 0.0
            return max(within, across)

        def run_s(config: Config) -> float:
            epochs = self.workload.defaults["epochs"]
            return med(config, "setup_s") + med(config, "materialize_s") + epochs * med(config, "epoch_s")

        counts = _count(study.trials)
        rate, base = med(winner, "samples_per_s"), med(self.baseline, "samples_per_s")
        return {
            "command": self.options.command,
            "created": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
            "samples_per_s": round(rate, 1),
            "steady_samples_per_s": round(med(winner, "steady_samples_per_s"), 1),
            "baseline_samples_per_s": round(base, 1),
            "speedup": round(rate / base, 2),
            "spread": round(noise(winner), 4),
            "baseline_spread": round(noise(self.baseline), 4),
            "step_s": med(winner, "step_s"),
            "epoch_s": round(med(winner, "epoch_s"), 4),
            "setup_s": round(med(winner, "setup_s") + med(winner, "materialize_s"), 3),
            "run_s": round(run_s(winner), 2),
            "baseline_run_s": round(run_s(self.baseline), 2),
            "search_s": round(time.monotonic() - self.started, 1),
            "trials_complete": counts["complete"],
            "trials_failed": counts["failed"],
            "trials_pruned": counts["pruned"],
            "cpu_share": self.machine.cpu_share,
            "lr": self.lr(winner),
            "lr_rule": self.options.lr_rule,
            "study": self.study_name,
            "knobs": recipe_file.config_to_knobs(winner),
            "excluded": dict(self.space.excluded),
            "versions": versions(),
            "parity": parity_record or {"checked": False},
        }

    def run(self) -> SearchResult:
        self.echo(
            f"autotune: tuning {self.ref.name!r} on {self.machine.hardware} "
            f"({self.machine.cpu_share} CPU cores), study {self.study_name!r} in {_redact(self.storage_url)}"
        )
        for line in self.space.describe():
            self.echo(f"  {line}")
        for knob, why in self.space.excluded.items():
            self.echo(f"  {knob}: left out ({why})")
        if self.ref.tuned_path.exists():
            recipe_file.read(self.ref.tuned_path)  # a broken file fails now, not after the search
        study = self.open_study()
        pool = TrialPool(self.ref.workload_path, self.device, self.machine.cpu_share,
                         self.options.state_dir / "logs", self.options.trial_timeout_s)
        try:
            self.run_study(study, pool)
            ranked = self.ranked(study)
            if not ranked:
                raise SearchError(f"no trial completed in study {self.study_name!r}; the failures above say why.")
            finalists = list(ranked)[: self.options.finalists]
            self.echo(f"finalists: measuring {len(finalists)} config(s) against the baseline, {self.options.rounds} round(s), fresh processes")
            results = self.remeasure(pool, finalists)
            if not results[self.baseline]:
                raise SearchError("the baseline (the workload's own settings) failed in every round; no speed-up can be stated.")
            measured = [c for c in finalists if results[c]]
            if not measured:
                raise SearchError("every finalist failed when measured again; see the reasons above.")
            by_speed = sorted(measured, key=lambda c: statistics.median(r["samples_per_s"] for r in results[c]), reverse=True)
            gate = None
            winner = by_speed[0]
            if self.options.parity_check:
                gate, winner = self.parity_winner(pool, study, ranked, by_speed, results)
        finally:
            pool.close()
        profile = self.profile(study, winner, results, gate.record(winner) if gate else None)
        recipe_file.write_profile(self.ref.tuned_path, self.ref.name, self.machine.hardware, profile)
        self.echo(
            f"wrote {self.ref.tuned_path}: {winner.describe()}: {_fmt_rate(profile['samples_per_s'])}, "
            f"{profile['speedup']}x the baseline's {_fmt_rate(profile['baseline_samples_per_s'])} "
            f"(noise ±{profile['spread']:.1%}), search {profile['search_s']:.0f} s"
        )
        check = profile["parity"]
        if check.get("checked"):
            self.echo(f"parity: the winner trains like the baseline (deviation {check['deviation']:+.1%}, probe "
                      f"{check['probe_deviation']:+.1%}, tolerance ±{check['tolerance']:.0%}) at lr {check['lr']:g}; "
                      f"the check took {check['check_s']:.0f} s")
        else:
            self.echo("parity: not checked (--no-parity-check): the winner may train differently from the baseline")
        return SearchResult(self.ref.tuned_path, self.machine.hardware, profile)


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


def search(recipe: str, options: SearchOptions = SearchOptions(), echo: Callable[[str], None] = print) -> SearchResult:
    """Run or resume the study for `recipe` and write its tuned recipe.

    >>> search("mnist_cnn", SearchOptions(trials=8))  # doctest: +SKIP
    """
    logging.getLogger("optuna").setLevel(logging.ERROR)
    # Heartbeats and grouped TPE are marked experimental; they are what we rely on, on purpose.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return Search(recipe, options, echo).run()
