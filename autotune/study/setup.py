"""A search's first step: the workload, the machine, the space, and the study they are measured in.

``prepare`` needs no study: it loads the workload, reads what its data set
allows, and builds the space. A ``--gpus`` searcher prepares while the search
that started it sets the study up. ``open_study`` then opens or creates the
study, and under its lock checks that it measures this hardware and records its
target and seeds (``autotune.study.shared.tickets`` queues them as they are taken). The
result is a frozen ``Setup``: state lives in the study, not on an object others
patch.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Callable
from typing import Any

import optuna

from autotune.knobs import SpaceError, detect_machine, max_workers
from autotune.options import SearchOptions
from autotune.streams.facts import describe as describe_stream
from autotune.streams.facts import with_pass_check
from autotune.study import identity
from autotune.study.context import Prepared, SearchError, Setup, where_raised
from autotune.study.failed import content
from autotune.study.identity import Identity, identity_of
from autotune.study.shared import sharing, storage_errors, tickets
from autotune.study.shared.storage import open_storage, redact
from autotune.study.space.domains import build_space
from autotune.study.space.pruner import ClearlyWorsePruner
from autotune.study.space.seeds import seed_configs
from autotune.trial.timing import Windows
from autotune.tuned import file as tuned_file
from autotune.workloads import WorkloadError, load, resolve
from autotune.workloads.decode import verdict as decode_verdict
from autotune.workloads.locate import replaced_builtin
from autotune.workloads.pixels import verdict as pixels_verdict
from autotune.workloads.settings import baseline_config, workload_lr_rule
from autotune.workloads.stream_jpegs import verdict as stream_decode_verdict

DEFAULT_WINDOW_S = 0.2  # seconds of work a timing window aims for


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def default_study_name(recipe: str, hardware: str, fixes: dict[str, tuple[Any, ...]], cpus: int | None = None) -> str:
    # The fixes are part of the name: a study searches one space, and a narrowed space is another search.
    # So is --cpus: a study records its CPU share, and a search on fewer cores measures another host.
    fixed = "".join(f"+{k}={','.join(str(v) for v in vs)}" for k, vs in sorted(fixes.items()))
    restricted = f"+cpus={cpus}" if cpus is not None else ""
    return f"{recipe}@{slug(hardware)}{fixed}{restricted}"


def prepare(recipe: str, options: SearchOptions, echo: Callable[[str], None] = print) -> Prepared:
    """Load the workload, read its data set's facts here (building it once), and build the space."""
    started, started_at = time.monotonic(), time.time()
    ref = resolve(recipe)
    if options.write_tuned_file:  # before the workload's code runs and any study exists: a file it could not write
        tuned_file.check_writable(ref.tuned_path)
    workload = load(ref)
    machine = detect_machine(options.device_index, options.cpu_share)
    import torch

    from autotune.trial.runner import Runner

    try:
        runner = Runner(workload, torch.device("cpu"))
        facts = runner.facts()
        collate = getattr(workload, "collate_fn", None)
        # The device decode path, read off the data set's own transform (workloads.decode), or a stream's augmentation
        # in a copy of the stream that decodes no image (workloads.stream_jpegs), or why there is none.
        judge = stream_decode_verdict if facts.stream else decode_verdict
        derived, refused = judge(runner.dataset, collate)
        # And the tail (ToTensor, Normalize) the device can run instead of the workers (workloads.pixels).
        tail, tail_refused = pixels_verdict(runner.dataset, collate)
        facts = dataclasses.replace(facts, gpu_decode=derived, gpu_decode_refused=refused, device_normalize=tail,
                                    device_normalize_refused=tail_refused)
        if facts.stream:  # which worker counts keep the stream's samples, before any trial (autotune.streams.passes)
            most = max_workers(machine.cpu_share, facts.load_cpu_share)
            facts = with_pass_check(runner.dataset, workload, facts, most, pass_check_budget(options),
                                    options.fixes.get("num_workers"))
    except WorkloadError:
        raise
    except Exception as exc:  # user code: say where it failed, in one line
        raise WorkloadError(
            f"workload {ref.workload_path}: building or reading its data set failed: "
            f"{where_raised(exc, ref.workload_path)}"
        ) from exc
    try:
        lr_rule = workload_lr_rule(workload, options.lr_rule)
    except Exception as exc:
        raise WorkloadError(
            f"workload {ref.workload_path}: building its optimizer, to choose the learning-rate rule, failed: "
            f"{where_raised(exc, ref.workload_path)}; --lr-scaling linear|sqrt|none skips this"
        ) from exc
    space = build_space(workload.defaults["batch_size"], machine, facts, options.fixes)
    return Prepared(
        options=options,
        ref=ref,
        workload=workload,
        machine=machine,
        facts=facts,
        space=space,
        baseline=space.normalise(baseline_config(workload, machine.cuda)),
        device=f"cuda:{options.device_index}" if machine.cuda else "cpu",
        study_name=options.study or default_study_name(ref.name, machine.hardware, options.fixes, options.cpus),
        storage_url=options.storage or f"sqlite:///{(options.state_dir / f'{ref.name}.db').resolve()}",
        windows=Windows(window_s=window_seconds()),
        lr_rule=lr_rule,
        echo=echo,
        started=started,
        started_at=started_at,
        identity=identity_of(ref.workload_path, workload.defaults, facts.size, facts.sample_shapes),
    )


PASS_CHECK_SHARE = 0.1  # the stream pass check may take this share of the search's time budget


def pass_check_budget(options: SearchOptions) -> float | None:
    """Seconds the stream pass check may take: a share of the time budget; None without a budget."""
    return None if options.time_budget_s is None else PASS_CHECK_SHARE * options.time_budget_s


def window_seconds() -> float:
    """How long a trial's timing windows aim to be: AUTOTUNE_WINDOW_S, else 0.2 s.

    Windows must agree before a trial ends, so a noisy loop is measured longer whatever this says:
    shorter windows are noisier and agree later, not sooner.
    """
    raw = os.environ.get("AUTOTUNE_WINDOW_S", str(DEFAULT_WINDOW_S))
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 60:
        raise SearchError(f"AUTOTUNE_WINDOW_S must be a number of seconds in (0, 60], but got {raw!r}.")
    return value


def announce(p: Prepared) -> None:
    """Say what is tuned where, and fail now on a tuned file that could not be read later."""
    p.echo(
        f"autotune: tuning {p.ref.name!r} on {p.machine.hardware} ({p.machine.cpu_share} CPU cores), "
        f"study {p.study_name!r} in {redact(p.storage_url)}"
    )
    replaces = replaced_builtin(p.ref)
    if replaces is not None:
        p.echo(f"  recipe: {replaces}")
    for line in p.space.describe():
        p.echo(f"  {line}")
    for knob, why in p.space.excluded.items():
        p.echo(f"  {knob}: left out ({why})")
    for line in describe_stream(p.facts, max_workers(p.machine.cpu_share, p.facts.load_cpu_share)):
        p.echo(f"  {line}")
    if "decode" not in p.space.excluded:
        p.echo(f"  decode gpu: {p.facts.gpu_decode}")
    if "device_normalize" not in p.space.excluded:
        p.echo(f"  device_normalize: {p.facts.device_normalize}")
    if len(p.space.domains["batch_size"]) > 1 or p.space.domains["batch_size"][0] != p.baseline.batch_size:
        p.echo(f"  learning rate for a new batch size: {p.lr_rule.why}")
    if p.ref.tuned_path.exists():
        tuned_file.read(p.ref.tuned_path, p.ref.name)  # a broken file, or another recipe's, fails now


def open_study(p: Prepared, storage_url: str | None = None, study_name: str | None = None) -> Setup:
    """Open or create the study (another process's, when named); under its lock, bind it and record its target."""
    if storage_url is not None and study_name is not None:  # a --gpus searcher joins the study its search set up
        p = dataclasses.replace(
            p,
            options=dataclasses.replace(p.options, storage=storage_url, study=study_name),
            storage_url=storage_url,
            study_name=study_name,
        )
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # we print our own progress lines
    if p.options.storage is None:
        p.options.state_dir.mkdir(parents=True, exist_ok=True)
    try:
        storage = open_storage(p.storage_url)
    except sharing.SharingError as exc:
        raise SearchError(str(exc)) from exc
    seed = p.options.seed
    if p.options.storage is not None:
        # A storage others may share: searchers of one study must not draw the same random configs.
        seed = (seed * 1_000_003 + os.getpid()) % 2**31
    sampler = optuna.samplers.TPESampler(
        seed=seed, n_startup_trials=10, multivariate=True, group=True, constant_liar=True
    )
    try:
        p = _for_this_workload(p, storage)
        study = optuna.create_study(
            storage=storage,
            study_name=p.study_name,
            direction="maximize",
            sampler=sampler,
            pruner=ClearlyWorsePruner(),
            load_if_exists=True,
        )
        with sharing.study_lock(storage, p.study_name):
            p = _bind(p, study)
            _record_identity(p, study)
            content.measure_again_if_changed(study, p.ref.workload_path, p.echo)  # stale failures are measured again
            seeds = [
                {"params": p.space.params(c) or {}, "user_attrs": {"role": "baseline" if c == p.baseline else "seed"}}
                for c in seed_configs(p.workload, p.machine, p.space)
            ]
            tickets.record(study, p.options.trials, seeds)  # queued one by one as workers take them
    except (SearchError, SpaceError):
        raise
    except Exception as exc:
        failure = storage_errors.explain(exc, p.storage_url, p.study_name)
        if failure is not None:
            raise failure from exc
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SearchError(f"cannot open study {p.study_name!r} in {redact(p.storage_url)}: {first}") from exc
    return Setup(**{f.name: getattr(p, f.name) for f in dataclasses.fields(Prepared)}, study=study, storage=storage)


def _for_this_workload(p: Prepared, storage: optuna.storages.BaseStorage) -> Prepared:
    """The study this workload's numbers belong to: the default one, or, once the workload changed since that one
    measured it, one beside it named with the new workload's digest. A study the user named is resumed as named."""
    if p.options.study is not None:
        return p
    studies = {s.study_name: s for s in storage.get_all_studies()}
    base = studies.get(p.study_name)
    recorded = base.user_attrs.get(identity.ATTRIBUTE) if base is not None else None
    if recorded is None or Identity(**recorded).digest == p.identity.digest:
        return p  # a new study, one that measured this workload, or one made before identities were kept
    beside = f"{p.study_name}~{p.identity.digest}"
    changes = "; ".join(p.identity.changes_from(recorded))
    if beside in studies:
        p.echo(f"the workload changed since study {p.study_name!r} measured it ({changes}); resuming study "
               f"{beside!r}, which measured it as it is now")
    else:
        p.echo(f"the workload changed since study {p.study_name!r} measured it ({changes}); starting study "
               f"{beside!r} beside it (the old one is kept: --study {p.study_name!r} resumes it)")
    return dataclasses.replace(p, study_name=beside)


def _record_identity(p: Prepared, study: optuna.Study) -> None:
    """Keep the workload's identity on the study; a study the user named and that measured another says so."""
    recorded = study.user_attrs.get(identity.ATTRIBUTE)
    if recorded is not None and Identity(**recorded).digest != p.identity.digest:
        changes = "; ".join(p.identity.changes_from(recorded))
        p.echo(f"  the workload changed since study {p.study_name!r} measured it ({changes}); resuming it as "
               f"--study names it: its measurements were made on the workload as it was")
    if recorded is None or recorded != p.identity.as_record():
        study.set_user_attr(identity.ATTRIBUTE, p.identity.as_record())


def _bind(p: Prepared, study: optuna.Study) -> Prepared:
    """Record what the study measures, or refuse a searcher that would measure something else."""
    attrs = study.user_attrs
    recorded = attrs.get("hardware")
    if recorded is None:
        study.set_user_attr("hardware", p.machine.hardware)
        study.set_user_attr("recipe", p.ref.name)
        study.set_user_attr("cpu_share", p.machine.cpu_share)
        return p
    if recorded != p.machine.hardware:
        raise SearchError(
            f"study {p.study_name!r} measures {recorded!r}, but this searcher runs on {p.machine.hardware!r}; "
            f"a study is bound to one hardware model: use another --study for this machine."
        )
    share = attrs.get("cpu_share", p.machine.cpu_share)
    if share > p.machine.cpu_share:
        raise SearchError(
            f"study {p.study_name!r} gives each searcher {share} CPU cores, but this searcher has "
            f"{p.machine.cpu_share}; every searcher must measure with the share the profile will state: "
            f"run fewer searchers on this host, or use another --study."
        )
    if share == p.machine.cpu_share:
        return p
    # More cores than the study's share: measure with the share, as every other worker does.
    p.echo(
        f"  cpu share: {share} cores, as study {p.study_name!r} records (this host could give {p.machine.cpu_share})"
    )
    machine = dataclasses.replace(p.machine, cpu_share=share)
    space = build_space(p.workload.defaults["batch_size"], machine, p.facts, p.options.fixes)
    return dataclasses.replace(p, machine=machine, space=space)


