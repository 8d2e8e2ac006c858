"""The Optuna study: storage, sampler, pruner, seeds, finalists, and the tuned recipe.

Only this module (with ``space``) knows about Optuna. A study lives in an
embedded SQLite file by default, or any Optuna storage URL; running the same
command again resumes it. Heartbeats mark the trials of a search that was killed
as failed, and re-queue their configs, so nothing is lost and nothing waits.
Several workers may share one study (``autotune.sharing`` says how); one of
them measures the finalists and writes the recipe.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import datetime
import logging
import os
import re
import signal
import statistics
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune import parity
from autotune import recipe as recipe_file
from autotune import sharing
from autotune import storage as storage_module
from autotune.storage import _redact
from autotune.config import Config, baseline_config, scaled_lr
from autotune.failures import Finished, Hopeless, blocks, hopeless_values
from autotune.measure import Windows
from autotune.options import SearchOptions
from autotune.space import Machine, Space, SpaceError, build_space, detect_machine
from autotune.trial import STARTUP_TIMEOUT_S, Outcome, TrialPool, close_pools
from autotune.workload import Workload, WorkloadError, load, resolve

PARITY_TIMEOUT_FACTOR = 4  # a parity run trains about an epoch; a trial times a few seconds of it
PARITY_EXTRA_RUNS = 6  # parity runs beyond one per finalist, for the rejected configs among the fastest
BASELINE_TRACE = "parity:baseline-trace"  # study attribute: the baseline's parity run, made by a worker during the trials


class SearchError(RuntimeError):
    """A search that cannot start or finish; the message says why and what to do."""


class ClearlyWorsePruner(optuna.pruners.BasePruner):
    """Stop a trial whose windows so far run below `ratio` of the best complete trial."""

    def __init__(self, ratio: float = 0.5, warmup_windows: int = 2) -> None:
        self.ratio, self.warmup_windows = ratio, warmup_windows

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        if trial.user_attrs.get("role") == "baseline":
            return False  # every speed-up is stated against it, however slow it is
        values = list(trial.intermediate_values.values())
        if len(values) < self.warmup_windows:
            return False
        try:
            best = study.best_value
        except ValueError:  # no complete trial yet
            return False
        return statistics.median(values) < self.ratio * best


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


def open_storage(url: str) -> optuna.storages.RDBStorage:
    """An RDB storage with heartbeats (``autotune.storage``), or a SearchError that says why not."""
    try:
        return storage_module.open_storage(url)
    except sharing.SharingError as exc:
        raise SearchError(str(exc)) from exc


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
        # The device+graph loop at 8x in fp32: on a small model the casts cost more than the tensor cores save
        # (mnist_cnn on an H200: 1.73M samples/s in fp32, 1.52M in bf16), and a study that never tried it may end without it.
        Config(batch_size=bs * 8, placement="device", cuda_graph=True, cudnn_benchmark=True),
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
    mine = sharing.counted(trials)  # an interrupted trial's retry stands for it
    return {name: sum(t.state == s for t in mine) for name, s in states.items()}


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
        try:
            self.facts = Runner(self.workload, torch.device("cpu")).facts()  # builds the data set here, once
        except Exception as exc:  # user code: say where it failed, in one line
            raise WorkloadError(f"workload {self.ref.workload_path}: building or reading its data set failed: {_where(exc, self.ref.workload_path)}") from exc
        self.space = build_space(self.workload.defaults["batch_size"], self.machine, self.facts, options.fixes)
        self.baseline = self.space.normalise(baseline_config(self.workload, self.machine.cuda))
        self.study_name = options.study or default_study_name(self.ref.name, self.machine.hardware, options.fixes)
        self.storage_url = options.storage or f"sqlite:///{(options.state_dir / f'{self.ref.name}.db').resolve()}"
        self.windows = Windows(window_s=0.2 if self.machine.cuda else 0.4)
        self.started = time.monotonic()
        self.started_at = time.time()  # wall clock: compared with other workers' records
        self.storage: optuna.storages.RDBStorage | None = None
        self.study: optuna.Study | None = None
        self.round_devices: list[str] = []  # under `--gpus`: a device per finalist round, side by side
        self.round_pools: list[TrialPool] = []  # the finalist rounds' pools, their fresh children started ahead
        self.baseline_trace: dict[str, Any] | None = None  # made before the study was joined (a --gpus worker)
        self.baseline_pending: Callable[[], bool] | None = None  # under --gpus: the worker making it may still store it
        self.gate: parity.Gate | None = None  # the parity check's, once it has begun
        self.settled = False  # no trial ran anywhere when this worker last looked: the study is done
        self.hopeless: list[Hopeless] = []
        self.base_sampler: optuna.samplers.BaseSampler | None = None

    def join(self, storage: str, study: str) -> None:
        """Work in this study, which another process set up (a worker under `--gpus`)."""
        self.options = dataclasses.replace(self.options, storage=storage, study=study)
        self.storage_url, self.study_name = storage, study

    def lr(self, config: Config) -> float:
        d = self.workload.defaults
        return scaled_lr(float(d["lr"]), d["batch_size"], config.batch_size, self.options.lr_rule, self.workload.lr_max)

    # -- the study ---------------------------------------------------------------------------

    def open_study(self) -> optuna.Study:
        """Open or create the study; under its lock, check the hardware and queue its tickets."""
        optuna.logging.set_verbosity(optuna.logging.ERROR)  # we print our own progress lines
        if self.options.storage is None:
            self.options.state_dir.mkdir(parents=True, exist_ok=True)
        storage = open_storage(self.storage_url)
        seed = self.options.seed
        if self.options.storage is not None:
            # A storage others may share: workers of one study must not draw the same random configs.
            seed = (seed * 1_000_003 + os.getpid()) % 2**31
        sampler = optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=10, multivariate=True, group=True, constant_liar=True,
        )
        self.base_sampler = sampler
        try:
            study = optuna.create_study(
                storage=storage, study_name=self.study_name, direction="maximize",
                sampler=sampler, pruner=ClearlyWorsePruner(), load_if_exists=True,
            )
            with sharing.study_lock(storage, self.study_name):
                self._bind(study)
                seeds = [
                    {"params": self.space.params(c) or {}, "user_attrs": {"role": "baseline" if c == self.baseline else "seed"}}
                    for c in seed_configs(self.workload, self.machine, self.space)
                ]
                sharing.top_up(study, self.options.trials, seeds)
        except (SearchError, SpaceError):
            raise
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SearchError(f"cannot open study {self.study_name!r} in {_redact(self.storage_url)}: {first}") from exc
        self.storage, self.study = storage, study
        return study

    def _bind(self, study: optuna.Study) -> None:
        """Record what the study measures, or refuse a worker that would measure something else."""
        attrs = study.user_attrs
        recorded = attrs.get("hardware")
        if recorded is None:
            study.set_user_attr("hardware", self.machine.hardware)
            study.set_user_attr("recipe", self.ref.name)
            study.set_user_attr("cpu_share", self.machine.cpu_share)
            return
        if recorded != self.machine.hardware:
            raise SearchError(
                f"study {self.study_name!r} measures {recorded!r}, but this worker runs on {self.machine.hardware!r}; "
                f"a study is bound to one hardware model: use another --study for this machine."
            )
        share = attrs.get("cpu_share", self.machine.cpu_share)
        if share > self.machine.cpu_share:
            raise SearchError(
                f"study {self.study_name!r} gives each worker {share} CPU cores, but this worker has "
                f"{self.machine.cpu_share}; every worker must measure with the share the profile will state: "
                f"run fewer workers on this host, or use another --study."
            )
        if share < self.machine.cpu_share:
            # More cores than the study's share: measure with the share, as every other worker does.
            self.echo(f"  cpu share: {share} cores, as study {self.study_name!r} records (this host could give {self.machine.cpu_share})")
            self.machine = dataclasses.replace(self.machine, cpu_share=share)
            self.space = build_space(self.workload.defaults["batch_size"], self.machine, self.facts, self.options.fixes)

    def run_trial(self, study: optuna.Study, trial: optuna.Trial, pool: TrialPool) -> None:
        """Measure the config a ticket holds (or the sampler fills in) and tell the study how it went."""
        assert self.storage is not None
        storage = self.storage
        interval, _ = sharing.heartbeat_settings()
        with sharing.Heartbeat(lambda: storage.record_heartbeat(trial._trial_id), interval):
            try:
                # Stays the reason if this worker dies mid-trial; the heartbeat then fails it.
                trial.set_user_attr("reason", f"{sharing.INTERRUPTED}: its worker {sharing.owner()} stopped during the trial; the config was queued again")
                trial.set_user_attr("worker", sharing.owner())
                config = self.space.suggest(trial)
                lr = self.lr(config)
                trial.set_user_attr("config", config.as_dict())
                trial.set_user_attr("lr", lr)
                twin = self._twin(study, trial.number, config)
                blocked = blocks(config.as_dict(), self.hopeless)
                if twin is not None:  # the sampler proposed a config already measured: reuse its outcome
                    outcome = _outcome_of(twin)
                    trial.set_user_attr("duplicate_of", twin.number)
                elif blocked is not None:  # known not to work: record it, spend no time on it
                    outcome = Outcome("failed", reason=f"skipped: {blocked.short()}")
                else:
                    def on_window(i: int, rate: float) -> bool:
                        trial.report(rate, i)
                        return trial.should_prune()

                    outcome = pool.run(config, lr, self.windows, on_window)
            except KeyboardInterrupt:
                with _sigint_ignored():  # a second Ctrl-C must not cut the hand-back short
                    pool.abort()
                    sharing.requeue(study, storage, trial, f"{sharing.INTERRUPTED}: the search was stopped (SIGINT or SIGTERM); the config was queued again")
                raise
            except Exception as exc:
                with contextlib.suppress(Exception):
                    trial.set_user_attr("reason", f"error in the search process: {type(exc).__name__}: {exc}")
                    study.tell(trial, state=TrialState.FAIL)
                raise
        self._record(trial, outcome)
        trial.set_user_attr("reason", outcome.reason)  # None: nothing went wrong
        self._progress(study, trial.number, config, outcome, twin)
        if outcome.state == "complete":
            assert outcome.result is not None
            study.tell(trial, float(outcome.result["samples_per_s"]))
        else:
            study.tell(trial, state=TrialState.PRUNED if outcome.state == "pruned" else TrialState.FAIL)

    def config_of(self, trial: optuna.trial.FrozenTrial) -> Config:
        """The config a trial measured, in this space's terms."""
        return self.space.normalise(Config.from_dict(trial.user_attrs["config"]))

    def _twin(self, study: optuna.Study, number: int, config: Config) -> optuna.trial.FrozenTrial | None:
        """An earlier trial of the same config: its outcome stands for this one, so no config is measured twice.

        One still running (on another worker) is waited for; if its worker dies, this one measures.
        """
        target = self.space.normalise(config)
        interval, grace = sharing.heartbeat_settings()
        deadline = time.monotonic() + self.options.trial_timeout_s + 2 * grace
        while True:
            same = [
                t for t in sharing.counted(study.get_trials(deepcopy=False))
                if t.number < number and "config" in t.user_attrs and self.config_of(t) == target
            ]
            done = [t for t in same if t.state.is_finished()]
            if done:
                return done[0]
            if not any(t.state == TrialState.RUNNING for t in same) or time.monotonic() > deadline:
                return None
            time.sleep(min(1.0, interval))
            sharing.fail_stale(study)

    def _record(self, trial: optuna.Trial, outcome: Outcome) -> None:
        if outcome.reason:
            trial.set_user_attr("reason", outcome.reason)
        if outcome.result:
            keep = ("samples_per_s", "steady_samples_per_s", "spread", "step_s", "epoch_s", "epoch_overhead_s",
                    "setup_s", "materialize_s", "capture_s", "gpu_util", "peak_memory_bytes")
            trial.set_user_attr("result", {k: outcome.result.get(k) for k in keep})

    def _progress(self, study: optuna.Study, number: int, config: Config, outcome: Outcome,
                  twin: optuna.trial.FrozenTrial | None = None) -> None:
        trials = study.get_trials(deepcopy=False)
        done, total = len(sharing.finished(trials)) + 1, len(sharing.counted(trials))
        head = f"[{done:>3}/{total}] {_elapsed(time.monotonic() - self.started)}"
        if outcome.state == "complete":
            assert outcome.result is not None
            rate = outcome.result["samples_per_s"]
            best = max([rate] + [t.value for t in trials if t.state == TrialState.COMPLETE and t.value])
            what = f"{_fmt_rate(rate):>14} ±{outcome.result['spread']:.1%}" if twin is None else f"{_fmt_rate(rate):>14} = trial {twin.number}"
            tail = f"best {_fmt_rate(best)}"
        elif outcome.state == "pruned":
            rates = outcome.windows
            what = f"pruned at window {len(rates)}: {_fmt_rate(statistics.median(rates)) if rates else '-'}"
            tail = "clearly worse than the best"
        else:
            reason = outcome.reason or "unknown"
            what, tail = f"failed: {reason if len(reason) <= 110 else reason[:107] + '...'}", ""
        if twin is not None and outcome.state != "complete":
            tail = f"(as trial {twin.number}, the same config; not measured again)"
        self.echo(f"{head}  trial {number:<3} {what:<28} {config.describe():<58} {tail}".rstrip())

    def learn_failures(self, study: optuna.Study, _trial: optuna.trial.FrozenTrial | None = None) -> None:
        """After each trial: find values that cannot work, say so once, and stop sampling them."""
        finished = [
            Finished(t.number, t.user_attrs.get("config", {}), t.state in (TrialState.COMPLETE, TrialState.PRUNED), t.user_attrs.get("reason"))
            for t in study.get_trials(deepcopy=False)
            if t.state.is_finished() and "duplicate_of" not in t.user_attrs  # a duplicate's failure is its original's
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
        """Take the study's tickets one by one until none is left or the time budget is spent."""
        assert self.storage is not None
        budget = self.options.time_budget_s
        while budget is None or time.monotonic() - self.started < budget:
            self._check_baseline(study)
            self.learn_failures(study)  # every worker's failures teach every worker
            trial = sharing.take(study, self.storage)
            if trial is None:
                break
            self.run_trial(study, trial, pool)
        self._check_baseline(study)

    def _check_baseline(self, study: optuna.Study) -> None:
        """Stop every worker once the baseline failed: nothing can be compared against a loop that does not run."""
        for t in sharing.counted(study.get_trials(deepcopy=False)):  # an interrupted baseline's retry stands for it
            if t.state == TrialState.FAIL and t.user_attrs.get("role") == "baseline":
                config = Config.from_dict(t.user_attrs["config"]) if "config" in t.user_attrs else self.baseline
                raise SearchError(
                    f"the workload's own settings ({config.describe()}) fail: {t.user_attrs.get('reason')}. "
                    f"Fix the workload first; trial process logs are in {self.options.state_dir / 'logs'}."
                )

    def settle(self, study: optuna.Study, pool: TrialPool) -> None:
        """Wait until no trial runs anywhere, taking tickets that appear late (a dead worker's, queued again)."""
        told = False
        while True:
            self.run_study(study, pool)
            sharing.fail_stale(study)
            others = sharing.running(study)
            if not others:
                self.settled = True
                return
            if not told:
                who = sorted({str(t.user_attrs.get("worker", "?")) for t in others})
                self.echo(f"waiting for {len(others)} trial(s) still running on other workers ({', '.join(who)})")
                told = True
                if self.round_devices and self.options.write_recipe and self.options.parity_check:
                    self.check_ahead(study, pool)  # under --gpus this process writes: its check can begin
                    continue
            time.sleep(0.25)

    # -- finalists and the recipe --------------------------------------------------------------

    def ranked(self, study: optuna.Study) -> dict[Config, int]:
        """Distinct complete configs, fastest first, each with its fastest trial's number; not the baseline."""
        complete = sorted(study.get_trials(states=(TrialState.COMPLETE,)), key=lambda t: t.value or 0.0, reverse=True)
        chosen: dict[Config, int] = {}
        for t in complete:
            config = self.config_of(t)
            if config not in chosen and config != self.baseline:
                chosen[config] = t.number
        return chosen

    def contenders(self, study: optuna.Study) -> dict[Config, int]:
        """The ranked configs whose trial ran faster than the baseline's: a slower one is never recommended."""
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        floor = max((t.value or 0.0 for t in complete if self.config_of(t) == self.baseline), default=0.0)
        values = {t.number: t.value or 0.0 for t in complete}
        return {c: n for c, n in self.ranked(study).items() if values[n] > floor}

    def parity_gate(self, pool: TrialPool, study: optuna.Study, ranked: dict[Config, int], max_batch: int | None = None) -> parity.Gate:
        """The check's gate, made once per search: a check made while the last trials ran leaves its verdicts here.

        `max_batch`: size the runs for it, not for the largest batch in `ranked` (more contenders may come).
        """
        if self.gate is not None:
            return self.gate
        timeout = PARITY_TIMEOUT_FACTOR * self.options.trial_timeout_s

        def trace(config: Config, lr: float, samples: int) -> parity.Trace:
            outcome = pool.trace(config, lr, samples, self.baseline.batch_size, timeout)
            if outcome.state != "complete" or outcome.result is None:
                raise parity.TraceFailed(outcome.reason or "no result")
            return parity.Trace.from_dict(outcome.result)

        stored = self.stored_baseline_trace(study)
        if stored is None and self.baseline_pending is not None:
            stored = self.wait_for_baseline_trace(study)
        # A baseline run made during the trials was sized for the space's largest batch; the check keeps that length.
        gate = parity.Gate(self.baseline, self.lr, trace, list(ranked), self.echo,
                           max_batch=stored.get("max_batch") if stored is not None else max_batch)
        self.echo(f"parity: checking the fastest against the baseline ({self.baseline.describe()}, lr {self.lr(self.baseline):g}, "
                  f"fp32, eager) from the same weights and data order, {gate.samples:,} samples each")
        if stored is not None and stored.get("samples") == gate.samples:
            gate.adopt_baseline(parity.Trace.from_dict(stored["trace"]), f"run by worker {stored['worker']} before its trials")
        self.gate = gate
        return gate

    def stored_baseline_trace(self, study: optuna.Study) -> dict[str, Any] | None:
        """The baseline's parity run a worker of this very search stored in the study, if there is one."""
        stored = self._baseline_record(study)
        if stored is not None and stored.get("config") == self.baseline.as_dict() and stored.get("lr") == self.lr(self.baseline):
            return stored
        return None

    def _baseline_record(self, study: optuna.Study) -> dict[str, Any] | None:
        """What this search's worker stored about the baseline's parity run: the run, or why it failed."""
        stored = study.user_attrs.get(BASELINE_TRACE)
        return stored if self.options.run_id and isinstance(stored, dict) and stored.get("run") == self.options.run_id else None

    def wait_for_baseline_trace(self, study: optuna.Study) -> dict[str, Any] | None:
        """Wait for the baseline's parity run that a `--gpus` worker makes before its trials, while it may still come.

        A few short trials can all end before that worker has joined the study; its run is
        then seconds away, and one made here would take as long. The wait ends once the
        worker has stored its run or why it failed, once it has ended, or after the longest
        its start-up and its run may take.
        """
        assert self.baseline_pending is not None
        deadline = time.monotonic() + STARTUP_TIMEOUT_S + PARITY_TIMEOUT_FACTOR * self.options.trial_timeout_s
        told = False
        while self._baseline_record(study) is None and self.baseline_pending() and time.monotonic() < deadline:
            if not told:
                self.echo("parity: waiting for the baseline's run that a worker makes before its trials")
                told = True
            time.sleep(0.1)
        return self.stored_baseline_trace(study)  # read again: the worker may have stored it as it ended

    def check_ahead(self, study: optuna.Study, pool: TrialPool) -> None:
        """Check the contenders so far while another worker's last trial runs: time this worker would spend idle.

        The check after the trials reuses each verdict and runs only what the last trials
        add; a failure here is said by that check, with its reason.
        """
        contenders = self.contenders(study)
        if contenders:
            want = self.options.finalists
            with contextlib.suppress(parity.ParityError):
                gate = self.parity_gate(pool, study, contenders, max_batch=max(self.space.domains["batch_size"]))
                gate.select(list(contenders), want=want, max_runs=want + PARITY_EXTRA_RUNS)

    def parity_finalists(self, pool: TrialPool, study: optuna.Study, ranked: dict[Config, int]) -> tuple[parity.Gate, list[Config]]:
        """The fastest configs that train like the baseline: the finalists, checked before they are measured again.

        Checked fastest first, so a batch size the check rejects rules out its slower
        variants at no cost, and no round of measuring is spent on a config that cannot
        win. Each verdict is kept in the study, by trial.
        """
        gate = self.parity_gate(pool, study, ranked)
        chosen: list[Config] = []
        try:
            want = self.options.finalists
            chosen = gate.select(list(ranked), want=want, max_runs=want + PARITY_EXTRA_RUNS)
        except parity.ParityError as exc:
            raise SearchError(f"{exc} Run with --no-parity-check to skip the check.") from exc
        finally:
            numbers = self.ranked(study)  # every config checked, ahead too, though it may have left the contenders since
            for config, verdict in gate.verdicts.items():
                # Optuna keeps a finished trial read-only: the verdict is kept on the study, under its trial.
                if config in numbers:
                    study.set_user_attr(f"parity:trial-{numbers[config]}", {**verdict.as_record(), "config": config.describe()})
            self.echo(gate.summary())
        if not chosen:
            raise SearchError(
                f"no config faster than the baseline trains like it: all {len(gate.verdicts)} checked, the fastest first, were rejected "
                f"(the lines above give the numbers). Narrow the search (e.g. --fix batch_size="
                f"{self.baseline.batch_size}), try --lr-scaling, or skip the check with --no-parity-check."
            )
        return gate, chosen

    def make_baseline_trace(self, pool: TrialPool) -> dict[str, Any]:
        """The baseline's parity run, for this search's writer; a record of it, or of why it failed.

        Under `--gpus` one worker makes it before its trials (even before the study is
        set up: it needs none), on its own GPU, while the others take tickets; the writer
        then checks the finalists without making it (`wait_for_baseline_trace`).
        """
        lr = self.lr(self.baseline)
        largest = max(self.space.domains["batch_size"])
        samples, _ = parity.run_length(self.baseline.batch_size, largest)
        outcome = pool.trace(self.baseline, lr, samples, self.baseline.batch_size, PARITY_TIMEOUT_FACTOR * self.options.trial_timeout_s)
        if outcome.state != "complete" or outcome.result is None:
            return {"run": self.options.run_id, "failed": outcome.reason or "no result", "worker": sharing.owner()}
        return {"run": self.options.run_id, "config": self.baseline.as_dict(), "lr": lr, "samples": samples,
                "max_batch": largest, "worker": sharing.owner(), "trace": outcome.result}

    def store_baseline_trace(self, study: optuna.Study, record: dict[str, Any]) -> None:
        """Keep a baseline parity run in the study. Only this search's writer takes it (`run_id`): a study
        resumed later, perhaps over edited workload code, makes its baseline run again."""
        study.set_user_attr(BASELINE_TRACE, record)  # a failure too: the writer waits for one or the other
        if "failed" in record:
            self.echo(f"parity: the baseline's run failed here ({record['failed']}); the writer makes it again")
            return
        self.echo(f"parity: made the baseline's run for the check ({record['samples']:,} samples, "
                  f"{record['trace']['seconds']:.1f} s) before taking trials")

    def remeasure(self, pool: TrialPool, finalists: list[Config]) -> dict[Config, list[dict[str, Any]]]:
        """Each finalist and the baseline, interleaved, in a fresh process per round.

        Under `--gpus` the rounds run side by side, one device each: every device is the
        study's one GPU model, and any difference between them shows in the noise.
        """
        results: dict[Config, list[dict[str, Any]]] = {c: [] for c in [self.baseline, *finalists]}
        order = [self.baseline, *finalists]
        pools = self.round_pools or self.prestart_rounds()
        pool.close()  # the trial processes are done: none tears down while a round measures

        def rounds_on(k: int) -> None:
            for r in range(k, self.options.rounds, len(pools)):
                self._round(pools[k], r, order, results)

        if len(pools) == 1:
            rounds_on(0)
            return results
        executor = concurrent.futures.ThreadPoolExecutor(len(pools))
        futures = [executor.submit(rounds_on, k) for k in range(len(pools))]
        try:
            for future in futures:
                future.result()
        finally:
            if not all(f.done() for f in futures):  # interrupted: stop the rounds still measuring
                for each in pools:
                    each.abort()
            executor.shutdown(wait=True)
        return results

    def new_pool(self, device: str) -> TrialPool:
        return TrialPool(self.ref.workload_path, device, self.machine.cpu_share, self.options.state_dir / "logs", self.options.trial_timeout_s)

    def prestart_rounds(self) -> list[TrialPool]:
        """A pool per round device, each with fresh children for the rounds it runs, started if missing.

        Pools of their own, not the trial pool: that one's standby children replace
        failed trials, and a search with several failures would leave the rounds none.

        On one device it is called once this worker's trials are done: the children start
        while the parity check runs, which takes longer than a start-up. Under --gpus the
        check is short (its baseline run was made during the trials), so it is called as the
        trials begin too: the other devices' round children start beside the first trials
        (a start-up is seconds of one core; a trial's median window shrugs off a hiccup, and
        the rounds, whose numbers are stated, run after every trial), and sit idle till the end.
        """
        if not self.round_pools:
            devices = self.round_devices[: self.options.rounds] or [self.device]
            self.round_pools = [self.new_pool(d) for d in devices]
        # A round runs configs of each plan class in a process of its own (trial.plan_class): on a GPU,
        # one per cudnn.benchmark value the finalists and the baseline may have.
        classes = {self.baseline.cudnn_benchmark, *self.space.domains["cudnn_benchmark"]} if self.machine.cuda else {None}
        for k, each in enumerate(self.round_pools):
            each.prestart(len(classes) * len(range(k, self.options.rounds, len(self.round_pools))))
        return self.round_pools

    def _round(self, pool: TrialPool, r: int, order: list[Config], results: dict[Config, list[dict[str, Any]]]) -> None:
        rotated = order[r % len(order):] + order[: r % len(order)]
        for i, config in enumerate(rotated):
            outcome = pool.run(config, self.lr(config), self.windows, fresh=(i == 0))
            if outcome.state != "complete" or outcome.result is None:
                self.echo(f"  round {r + 1}: {config.describe()} failed: {outcome.reason}")
                continue
            results[config].append(outcome.result)
            self.echo(f"  round {r + 1}: {_fmt_rate(outcome.result['samples_per_s']):>14}  {config.describe()}")

    def profile(self, study: optuna.Study, winner: Config, results: dict[Config, list[dict[str, Any]]],
                parity_record: dict[str, Any] | None = None) -> dict[str, Any]:
        def med(config: Config, key: str) -> float:
            return statistics.median(r[key] for r in results[config])

        def noise(config: Config) -> float:
            return spread_of(results[config], self.autotuned_draws(study, config))

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

    def autotuned_draws(self, study: optuna.Study, config: Config) -> list[float]:
        """The trials' measurements of `config`, if cuDNN autotunes it on a GPU; else none.

        Autotuning chooses its plans afresh in each process (on an H200, mnist_cnn's fast
        loop drew 1.60-1.76M samples/s), so every trial process that measured the config
        is one more draw of what a training run gets, beside the rounds' fresh processes.
        They count in its noise only: the fastest trial is what made the config a finalist,
        so as a measurement of its speed it is biased upwards.
        """
        if not (config.cudnn_benchmark and self.machine.cuda):
            return []
        return measured_values(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), config, self.space.normalise)

    def announce(self) -> None:
        """Say what is tuned where, and fail now on a recipe file we could not update later."""
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
        if self.options.write_recipe:
            recipe_file.check_writable(self.ref.tuned_path)

    def run(self, before_rounds: Callable[[], None] | None = None, pool: TrialPool | None = None) -> SearchResult | None:
        """Take tickets until none is left; then, if no other worker does, measure finalists and write.

        `before_rounds` runs once no trial runs anywhere and the parity check is done,
        before the finalists are timed (under `--gpus`: wait until the worker processes
        have ended; they end while the check runs, which times nothing). `pool` holds trial
        processes started ahead (by the command line, before torch was imported); it is
        used if it measures on this search's device with its CPU share, and closed at
        the end either way. Returns None when this worker wrote no recipe (a worker under
        `--gpus`, or another worker of the study holds the writer's role).
        """
        if self.study is None:
            self.announce()
            self.open_study()
            assert self.study is not None
            trials = self.study.get_trials(deepcopy=False)
            done, total = len(sharing.finished(trials)), len(sharing.counted(trials))
            if done:
                self.echo(f"resuming study {self.study_name!r}: {done} trial(s) already finished, {total - done} to go")
        study, storage = self.study, self.storage
        assert study is not None and storage is not None
        if pool is not None and (pool.recipe_path, pool.device, pool.cpu_share) != (self.ref.workload_path, self.device, self.machine.cpu_share):
            pool.close()  # started on a guess that proved wrong (another device, or the study's own CPU share)
            pool = None
        if pool is None:
            pool = self.new_pool(self.device)
        pool.spare = self.machine.cuda  # on a GPU, a spare saves the ~7 s start-up wait after a failed trial
        try:
            if self.round_devices and self.options.write_recipe:
                self.prestart_rounds()
            if self.options.trace_baseline_first and self.options.parity_check:
                self.store_baseline_trace(study, self.baseline_trace or self.make_baseline_trace(pool))
            self.run_study(study, pool)
            if not self.options.write_recipe:
                return None
            self.prestart_rounds()
            self.settle(study, pool)
            interval, grace = sharing.heartbeat_settings()
            claim, holder = sharing.claim_writer(study, storage, self.started_at, interval, grace)
            if claim is None:
                assert holder is not None
                if holder.get("state") == "done":
                    self.echo(f"study {self.study_name!r} is done; worker {holder['owner']} wrote {holder.get('path')}")
                else:
                    self.echo(f"study {self.study_name!r} is done; worker {holder['owner']} measures the finalists and writes the recipe")
                return None
            try:
                with claim.heartbeat():
                    result = self.write(study, pool, before_rounds)
            except BaseException as exc:
                with contextlib.suppress(Exception):
                    claim.failed(f"{type(exc).__name__}: {exc}")
                raise
            claim.done(str(result.tuned_path))
            return result
        except KeyboardInterrupt:
            # A parity run or a round may be under way: its process is killed, not waited for.
            for each in (pool, *self.round_pools):
                each.abort()
            raise
        finally:
            close_pools([pool, *self.round_pools])

    def write(self, study: optuna.Study, pool: TrialPool, before_rounds: Callable[[], None] | None = None) -> SearchResult:
        """Measure the finalists against the baseline and write the winner's profile."""
        if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            raise SearchError(f"no trial completed in study {self.study_name!r}; the failures above say why.")
        gate: parity.Gate | None = None
        contenders = self.contenders(study)
        if self.options.parity_check and contenders:
            gate, finalists = self.parity_finalists(pool, study, contenders)
        else:
            finalists = list(contenders)[: self.options.finalists]
        if finalists:
            self.echo(f"finalists: measuring {len(finalists)} config(s) against the baseline, {self.options.rounds} round(s), fresh processes")
        else:
            # Nothing beat the workload's own settings: they are the result, at a speed-up of 1.
            self.echo(f"no config ran faster than the baseline; measuring it, {self.options.rounds} round(s), fresh processes")
        if before_rounds is not None:
            before_rounds()
        results = self.remeasure(pool, finalists)
        if not results[self.baseline]:
            raise SearchError("the baseline (the workload's own settings) failed in every round; no speed-up can be stated.")
        measured = [c for c in finalists if results[c]]
        if finalists and not measured:
            raise SearchError("every finalist failed when measured again; see the reasons above.")
        def median(config: Config) -> float:
            return statistics.median(r["samples_per_s"] for r in results[config])

        by_speed = sorted(measured, key=median, reverse=True)
        winner = (by_speed or [self.baseline])[0]
        if winner != self.baseline and median(winner) <= median(self.baseline):
            self.echo(f"finalists: none beat the baseline when measured again ({_fmt_rate(median(winner))} against "
                      f"{_fmt_rate(median(self.baseline))}); the profile keeps the workload's own settings")
            winner = self.baseline
        profile = self.profile(study, winner, results, gate.record(winner) if gate and winner != self.baseline else None)
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
        elif winner == self.baseline:
            self.echo("parity: the winner is the workload's own settings; there is nothing to check")
        else:
            self.echo("parity: not checked (--no-parity-check): the winner may train differently from the baseline")
        return SearchResult(self.ref.tuned_path, self.machine.hardware, profile)


def measured_values(trials: Sequence[optuna.trial.FrozenTrial], config: Config, normalise: Callable[[Config], Config]) -> list[float]:
    """The values of the complete trials that measured `config` themselves (not a duplicate reusing another's)."""
    return [float(t.value) for t in trials
            if t.state == TrialState.COMPLETE and t.value is not None and "duplicate_of" not in t.user_attrs
            and "config" in t.user_attrs and normalise(Config.from_dict(t.user_attrs["config"])) == config]


def spread_of(rounds: list[dict[str, Any]], draws: Sequence[float] = ()) -> float:
    """A config's noise: the larger of its rounds' median within-run spread and the spread of every
    measurement across processes (its rounds' fresh ones, and `draws`: its trial processes' own)."""
    rates = [r["samples_per_s"] for r in rounds] + list(draws)
    within = statistics.median(r["spread"] for r in rounds)
    across = (max(rates) - min(rates)) / statistics.median(rates) if len(rates) > 1 else 0.0
    return max(within, across)


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: signals are not ours to change
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _outcome_of(trial: optuna.trial.FrozenTrial) -> Outcome:
    """A finished trial's outcome, as if measured now."""
    state = {TrialState.COMPLETE: "complete", TrialState.PRUNED: "pruned"}.get(trial.state, "failed")
    return Outcome(state, result=trial.user_attrs.get("result"), reason=trial.user_attrs.get("reason"),
                   windows=tuple(trial.intermediate_values.values()))


def _where(exc: BaseException, path: Path) -> str:
    """`Type: message (file, line N)`, at the innermost line of the workload file that raised."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == Path(path)]
    first = (str(exc).strip().splitlines() or [""])[0]
    at = f" ({path}, line {frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {first}{at}"


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


def search(recipe: str, options: SearchOptions = SearchOptions(), echo: Callable[[str], None] = print,
           pool: TrialPool | None = None) -> SearchResult | None:
    """Run or resume the study for `recipe` and write its tuned recipe.

    Returns None when another worker of the same study writes the recipe. `pool`:
    trial processes started ahead (see `Search.run`); closed here whatever happens.

    >>> search("mnist_cnn", SearchOptions(trials=8))  # doctest: +SKIP
    """
    search_warnings_off()
    try:
        return Search(recipe, options, echo).run(pool=pool)
    finally:
        if pool is not None:
            pool.close()  # a no-op if the search took it; else its unused processes go, leaving no file


def search_warnings_off() -> None:
    logging.getLogger("optuna").setLevel(logging.ERROR)
    # Heartbeats and grouped TPE are marked experimental; they are what we rely on, on purpose.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
