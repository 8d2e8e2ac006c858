"""The tuned file's schema: every key a profile may hold, its type and its range.

``validate`` lists every problem at once, as messages that name the key and the
rule; reading and writing a tuned file both go through it. No torch here:
checking a file is cheap.
"""

from __future__ import annotations

import math
from typing import Any

from autotune.config import AMP_CHOICES, COMPILE_CHOICES, DECODE_CHOICES, LR_RULES, PLACEMENT_CHOICES

PARITY_FAMILIES = ("loader", "numerics", "batch_size")  # autotune.parity.verdict.TOLERANCES' keys
SCHEMA_VERSION = 1

_NUMBER = (int, float)
# Every key a profile may hold, with its type; `None` in a tuple means the key may be absent.
PROFILE_KEYS: dict[str, tuple[type, ...]] = {
    "command": (str,),
    "created": (str,),
    "samples_per_s": _NUMBER,
    "steady_samples_per_s": _NUMBER,  # epoch boundaries excluded; samples_per_s includes them
    "baseline_samples_per_s": _NUMBER,
    "speedup": _NUMBER,
    "spread": _NUMBER,
    "baseline_spread": _NUMBER,
    "step_s": _NUMBER,
    "epoch_s": _NUMBER,
    "setup_s": _NUMBER,
    "first_batch_s": _NUMBER,  # a stream's time to its first batch (shards opened, a shuffle buffer filled)
    "run_s": _NUMBER,
    "baseline_run_s": _NUMBER,
    "run_epochs": (int,),  # the declared run: run_s times these epochs, and the shortest run_s chose the winner
    "steady_choice": (dict,),  # what steady samples/s alone would have picked instead, with its numbers
    "tokens_per_s": _NUMBER,  # with the workload's tokens_in: real tokens, padding not counted
    "baseline_tokens_per_s": _NUMBER,
    "padding": _NUMBER,  # the share of the winner's token positions that were padding
    "search_s": _NUMBER,
    "trials_complete": (int,),
    "trials_failed": (int,),
    "trials_pruned": (int,),
    "trials_interrupted": (int,),  # stopped by an interrupt (their searcher stopped or died), not by their config
    "cpu_share": (int,),
    "lr": _NUMBER,
    "lr_rule": (str,),  # the rule `lr` came from: the optimizer's, --lr-scaling's, or a gentler one parity passed
    "lr_reason": (str,),  # why that rule
    "study": (str,),
    "knobs": (dict,),
    "excluded": (dict,),
    "versions": (dict,),
    "parity": (dict,),
    "budget": (dict,),  # where the search's time went, in seconds (autotune.study.clock.spent); absent before it was
}
REQUIRED_PROFILE_KEYS = ("samples_per_s", "baseline_samples_per_s", "speedup", "knobs", "versions")
KNOB_TYPES: dict[str, tuple[type, ...]] = {
    "batch_size": (int,),
    "num_workers": (int,),
    "pin_memory": (bool,),
    "persistent_workers": (bool,),
    "prefetch_factor": (int,),  # absent: DataLoader's own
    "cudnn_benchmark": (bool,),
    "channels_last": (bool,),
    "amp": (str,),
    "cuda_graph": (bool,),
    "placement": (str,),
    "decode": (str,),  # absent: cpu (files written before the knob existed)
    "decode_share": _NUMBER,  # decode = gpu: the share of each batch decoded on the device; absent: all of it
    "device_normalize": (bool,),  # absent: off (files written before the knob existed)
    "bucketing": (bool,),  # absent: off (files written before the knob existed)
    "pad_multiple": (int,),  # 0: off; absent: off (files written before the knob existed)
    "compile": (str,),  # absent: off (files written before the knob existed)
}
# A profile may lack these.
OPTIONAL_KNOBS = ("prefetch_factor", "decode", "decode_share", "device_normalize", "bucketing", "pad_multiple",
                  "compile")
MAX_PAD_MULTIPLE = 4096  # token positions; a larger multiple pads every batch to one absurd length


def _check_type(where: str, value: Any, types: tuple[type, ...], problems: list[str]) -> bool:
    if isinstance(value, bool) and bool not in types:
        ok = False
    else:
        ok = isinstance(value, types)
    if not ok:
        names = "number" if set(types) == set(_NUMBER) else " or ".join(t.__name__ for t in types)
        problems.append(f"{where} must be {names}, but got {value!r}")
    return ok


def validate(data: dict[str, Any], source: str = "recipe") -> list[str]:
    """Every problem in a parsed tuned file, as messages that name the key and the rule."""
    problems: list[str] = []
    schema = data.get("schema")
    if schema != SCHEMA_VERSION:
        problems.append(f"schema must be {SCHEMA_VERSION}, but got {schema!r} (a file from another autotune version?)")
    if "recipe" in data and not isinstance(data["recipe"], str):
        problems.append(f"recipe must be a string (the recipe's name), but got {data['recipe']!r}")
    for key in data:
        if key not in ("schema", "recipe", "profiles"):
            problems.append(f"unknown top-level key {key!r}; known: schema, recipe, profiles")
    profiles = data.get("profiles", {})
    if not isinstance(profiles, dict):
        return problems + [f"profiles must be a table, but got {profiles!r}"]
    for hardware, profile in profiles.items():
        at = f"profiles.{hardware!r}"
        if not isinstance(profile, dict):
            problems.append(f"{at} must be a table, but got {profile!r}")
            continue
        for key in REQUIRED_PROFILE_KEYS:
            if key not in profile:
                problems.append(f"{at} lacks {key!r}")
        for key, value in profile.items():
            if key not in PROFILE_KEYS:
                problems.append(f"{at} has unknown key {key!r}")
                continue
            if _check_type(f"{at}.{key}", value, PROFILE_KEYS[key], problems):
                problems += _check_range(f"{at}.{key}", key, value)
        if profile.get("lr_rule") is not None and profile["lr_rule"] not in LR_RULES:
            problems.append(f"{at}.lr_rule must be one of {', '.join(LR_RULES)}, but got {profile['lr_rule']!r}")
        knobs = profile.get("knobs")
        if isinstance(knobs, dict):
            problems += _validate_knobs(f"{at}.knobs", knobs)
        if isinstance(profile.get("parity"), dict):
            problems += validate_parity(f"{at}.parity", profile["parity"])
            problems += _inconclusive_math(at, profile)
        if isinstance(profile.get("steady_choice"), dict):
            problems += validate_steady_choice(f"{at}.steady_choice", profile)
        if isinstance(profile.get("budget"), dict):
            problems += validate_budget(f"{at}.budget", profile["budget"])
    return problems


# The `budget` table: seconds the search spent by part, its whole wall time, and its --time-budget with what was left.
BUDGET_KEYS = ("budget_s", "setup_s", "plan_s", "trials_s", "parity_s", "rounds_s", "other_s", "total_s", "unused_s")


def validate_budget(at: str, record: dict[str, Any]) -> list[str]:
    """Every problem in a profile's `budget` table: known keys, each a number of seconds, none negative."""
    problems: list[str] = []
    for key, value in record.items():
        if key not in BUDGET_KEYS:
            problems.append(f"{at} has unknown key {key!r}; known: {', '.join(BUDGET_KEYS)}")
        elif _check_type(f"{at}.{key}", value, _NUMBER, problems):
            problems += _check_range(f"{at}.{key}", "setup_s", value)
    return problems


# The `steady_choice` table: the config steady samples/s would have picked, and why the declared run did not.
STEADY_CHOICE_KEYS: dict[str, tuple[type, ...]] = {
    "config": (str,),  # the config, as the search described it
    "samples_per_s": _NUMBER,  # its steady samples/s in the rounds: above the winner's
    "run_s": _NUMBER,  # its declared run, one-time costs included: not below the winner's
    "setup_s": _NUMBER,  # its one-time costs (materialisation, warm-up, capture)
}


def validate_steady_choice(at: str, profile: dict[str, Any]) -> list[str]:
    """Every problem in a profile's `steady_choice` table, and whether it agrees with the winner's numbers."""
    record, problems = profile["steady_choice"], []
    for key, value in record.items():
        if key not in STEADY_CHOICE_KEYS:
            problems.append(f"{at} has unknown key {key!r}; known: {', '.join(STEADY_CHOICE_KEYS)}")
        elif _check_type(f"{at}.{key}", value, STEADY_CHOICE_KEYS[key], problems) and key != "config":
            problems += _check_range(f"{at}.{key}", "setup_s" if key == "setup_s" else "run_s", value)
    problems += [f"{at} lacks {key!r}" for key in STEADY_CHOICE_KEYS if key not in record]
    if problems:
        return problems
    rules = (("samples_per_s", "steady samples/s picked it"), ("run_s", "the winner's declared run is shorter"))
    for key, rule in rules:
        theirs, ours = record[key], profile.get(key)
        if isinstance(ours, (int, float)) and not isinstance(ours, bool) and theirs < ours:
            problems.append(
                f"`{at}.{key} >= {key}` must hold ({rule}), but got ({at}.{key}={theirs!r}, {key}={ours!r})"
            )
    return problems


# Numbers a run can produce: positive and finite; counts and times not negative.
POSITIVE = ("samples_per_s", "steady_samples_per_s", "baseline_samples_per_s", "speedup", "lr", "step_s", "epoch_s",
            "run_s", "baseline_run_s", "tokens_per_s", "baseline_tokens_per_s", "run_epochs")
NOT_NEGATIVE = ("spread", "baseline_spread", "padding", "setup_s", "first_batch_s", "search_s", "trials_complete",
                "trials_failed", "trials_pruned", "trials_interrupted")
MAX_WORKERS = 1024  # no host gives a DataLoader more workers than this; a larger number is a typo or worse
MAX_BATCH = 2**24  # samples per step; a larger batch is no run's


def _check_range(at: str, key: str, value: Any) -> list[str]:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return []
    if not math.isfinite(value):
        return [f"{at} must be a finite number, but got {value!r}"]
    if key in POSITIVE and value <= 0:
        return [f"{at} must be > 0, but got {value!r}"]
    if key in NOT_NEGATIVE and value < 0:
        return [f"{at} must be >= 0, but got {value!r}"]
    if key == "cpu_share" and not 1 <= value <= MAX_WORKERS:
        return [f"{at} must be in 1..{MAX_WORKERS}, but got {value!r}"]
    return []


def _validate_knobs(at: str, knobs: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    for key, value in knobs.items():
        if key not in KNOB_TYPES:
            problems.append(f"{at} has unknown knob {key!r}")
            continue
        if not _check_type(f"{at}.{key}", value, KNOB_TYPES[key], problems):
            continue
        if key == "batch_size" and not 1 <= value <= MAX_BATCH:
            problems.append(f"{at}.batch_size must be in 1..{MAX_BATCH}, but got {value}")
        if key == "num_workers" and not 0 <= value <= MAX_WORKERS:
            problems.append(f"{at}.num_workers must be in 0..{MAX_WORKERS}, but got {value}")
        if key == "prefetch_factor" and not 1 <= value <= 64:
            problems.append(f"{at}.prefetch_factor must be in 1..64, but got {value}")
        if key == "amp" and value not in AMP_CHOICES:
            problems.append(f"{at}.amp must be one of {', '.join(AMP_CHOICES)}, but got {value!r}")
        if key == "placement" and value not in PLACEMENT_CHOICES:
            problems.append(f"{at}.placement must be one of {', '.join(PLACEMENT_CHOICES)}, but got {value!r}")
        if key == "compile" and value not in COMPILE_CHOICES:
            problems.append(f"{at}.compile must be one of {', '.join(COMPILE_CHOICES)}, but got {value!r}")
        if key == "decode_share" and not 0 < value <= 1:
            problems.append(f"{at}.decode_share must be in (0, 1], but got {value}")
        if key == "decode" and value not in DECODE_CHOICES:
            problems.append(f"{at}.decode must be one of {', '.join(DECODE_CHOICES)}, but got {value!r}")
        if key == "pad_multiple" and not 0 <= value <= MAX_PAD_MULTIPLE:
            problems.append(f"{at}.pad_multiple must be in 0..{MAX_PAD_MULTIPLE} (0: off), but got {value}")
    for key in KNOB_TYPES:
        if key not in knobs and key not in OPTIONAL_KNOBS:
            problems.append(f"{at} lacks knob {key!r}")
    return problems


# The `parity` table of a tuned profile: key -> (types, required when checked).
RECORD_KEYS: dict[str, tuple[tuple[type, ...], bool]] = {
    "checked": ((bool,), True),
    "passed": ((bool,), True),
    "family": ((str,), True),
    "tolerance": (_NUMBER, True),
    "samples": ((int,), True),
    "window": ((int,), True),
    "lr": (_NUMBER, True),
    "baseline_lr": (_NUMBER, True),
    "initial_loss": (_NUMBER, False),
    "loss": (_NUMBER, False),
    "baseline_loss": (_NUMBER, False),
    "deviation": (_NUMBER, False),
    "probe_loss": (_NUMBER, False),
    "baseline_probe_loss": (_NUMBER, False),
    "probe_deviation": (_NUMBER, False),
    "run_s": (_NUMBER, False),
    "reason": ((str,), False),
    # False: the baseline learned too little in the check to judge by; only a config with its math may pass.
    "conclusive": ((bool,), False),
    "lr_rule": ((str,), False),  # the rule `lr` came from (the search's, or a gentler one after a bolder failed)
    "lr_reason": ((str,), False),
    "configs_checked": ((int,), True),
    "configs_rejected": ((int,), True),
    "check_s": (_NUMBER, True),
    "check_budget_s": (_NUMBER, False),  # what the check was allowed to take
    # decode = gpu: its images against the host pipeline's (autotune.parity.inputs)
    "inputs_passed": ((bool,), False),
    "inputs_distance": (_NUMBER, False),
    "inputs_host_distance": (_NUMBER, False),
    # amp and compile at the baseline's batch, judged with no run: its gradients against fp32's (parity.numerics)
    "numerics_passed": ((bool,), False),
    "numerics_ratio": (_NUMBER, False),
    "probe_only": ((bool,), False),  # bucketing on one side: judged by the probe set alone
}
# Knobs whose change makes other arithmetic than the baseline's (fp32, eager, contiguous), whatever its batch size:
# a config with any of these on cannot pass an inconclusive check (autotune.parity.verdict.SAME_MATH_KNOBS), unless a
# check that needs no training showed the change harmless (SHOWN_BY).
OTHER_MATH = {"amp": "off", "decode": "cpu", "decode_share": 1.0, "bucketing": False, "pad_multiple": 0,
              "compile": "off"}
# decode may be gpu when the inputs check showed its images match the host pipeline's, and amp on when the numerics
# check showed its gradients within the batch's own noise; so may compile.
SHOWN_BY = {"decode": "inputs_passed", "decode_share": "inputs_passed", "amp": "numerics_passed",
            "compile": "numerics_passed"}


def _inconclusive_math(at: str, profile: dict[str, Any]) -> list[str]:
    """A winner that passed an inconclusive check must keep the baseline's math: every OTHER_MATH knob as it is."""
    check, knobs = profile["parity"], profile.get("knobs")
    if not (check.get("passed") is True and check.get("conclusive") is False and isinstance(knobs, dict)):
        return []
    return [
        f"{at}.knobs.{knob} must be {'off' if value is False else value!r} when {at}.parity says passed and "
        f"conclusive = false (an inconclusive check passes only configs that leave the math unchanged), but got "
        f"{knobs[knob]!r}"
        for knob, value in OTHER_MATH.items()
        if knob in knobs and knobs[knob] != value and not (knob in SHOWN_BY and check.get(SHOWN_BY[knob]) is True)
    ]


def validate_parity(at: str, record: dict[str, Any]) -> list[str]:
    """Every problem in a profile's `parity` table, as messages that name the key and the rule."""
    problems: list[str] = []
    checked = record.get("checked")
    if not isinstance(checked, bool):
        return [f"{at}.checked must be true or false, but got {checked!r}"]
    if not checked:
        extra = sorted(set(record) - {"checked"})
        return [f"{at} says checked = false, so it must hold nothing else, but has {extra}"] if extra else []
    for key, value in record.items():
        if key not in RECORD_KEYS:
            problems.append(f"{at} has unknown key {key!r}; known: {', '.join(RECORD_KEYS)}")
            continue
        types = RECORD_KEYS[key][0]
        if isinstance(value, bool) != (bool in types) or not isinstance(value, types):
            kind = "a number" if types == _NUMBER else " or ".join(t.__name__ for t in types)
            problems.append(f"{at}.{key} must be {kind}, but got {value!r}")
    problems += [f"{at} lacks {key!r}" for key, (_, required) in RECORD_KEYS.items() if required and key not in record]
    if problems:
        return problems
    if record["family"] not in PARITY_FAMILIES:
        problems.append(f"{at}.family must be one of {', '.join(PARITY_FAMILIES)}, but got {record['family']!r}")
    if "lr_rule" in record and record["lr_rule"] not in LR_RULES:
        problems.append(f"{at}.lr_rule must be one of {', '.join(LR_RULES)}, but got {record['lr_rule']!r}")
    if record["passed"] and record.get("conclusive") is False and record["family"] == "batch_size":
        problems.append(
            f"{at} says passed and conclusive = false, but family = 'batch_size': an inconclusive check passes only "
            f"configs that leave the math unchanged"
        )
    for key in ("tolerance", "lr", "baseline_lr", "samples", "window"):
        if record[key] <= 0:
            problems.append(f"{at}.{key} must be > 0, but got {record[key]!r}")
    if record["window"] > record["samples"]:
        problems.append(
            f"`window <= samples` must hold in {at}, but got (window={record['window']}, samples={record['samples']})"
        )
    for key in ("check_s", "check_budget_s", "run_s", "configs_checked", "configs_rejected"):
        if record.get(key, 0) < 0:
            problems.append(f"{at}.{key} must be >= 0, but got {record[key]!r}")
    if record["configs_rejected"] > record["configs_checked"]:
        problems.append(
            f"`configs_rejected <= configs_checked` must hold in {at}, but got "
            f"(configs_rejected={record['configs_rejected']}, configs_checked={record['configs_checked']})"
        )
    if record["passed"]:
        for key in ("deviation", "probe_deviation"):
            if key in record and abs(record[key]) > record["tolerance"]:
                problems.append(
                    f"{at} says passed, but |{key}| = {abs(record[key]):g} exceeds its tolerance "
                    f"{record['tolerance']:g}"
                )
    return problems
