"""The parity check's verdicts that need no run, and the reasons a verdict gives.

``ParityCheck`` (``autotune.parity.check``) runs the candidates, and
``autotune.parity.verdict`` judges each run. Here is what the check states
without a run (a config that differs in loader knobs alone; one that changes
the math against a baseline that learned too little to judge by; one that
changes only amp and compile, judged by its gradients) and the words it adds to
a verdict: the learning rule a rate came from and why, and why a check is
inconclusive.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from autotune.config import Config, LrRule
from autotune.parity import signal
from autotune.parity.inputs import InputsVerdict
from autotune.parity.numerics import NumericsVerdict
from autotune.parity.run import ParityRun
from autotune.parity.verdict import (
    MIN_PROGRESS,
    SAME_MATH_KNOBS,
    TOLERANCES,
    ParityVerdict,
    changes_math,
    family,
    progress,
)


def same_as_baseline(
    baseline: Config, config: Config, lr: float, samples: int, window: int, conclusive: bool | None
) -> ParityVerdict:
    """Loader knobs alone (workers, pinning, prefetch, persistence) change speed, not what is trained:
    the same samples in the same order through the same math. No run can tell them apart.

    `conclusive`: the check's, None before its baseline has run.
    """
    reason = "the baseline's own numerics: only loader knobs differ, which change speed, not what is trained"
    if config == baseline:
        reason = "the workload's own settings: the baseline itself"
    return ParityVerdict(
        True,
        "loader",
        TOLERANCES["loader"],
        samples,
        window,
        lr,
        lr,
        reason=reason,
        conclusive=conclusive is not False,
    )


def cannot_judge(
    baseline: Config, config: Config, changed: list[str], lr: float, baseline_lr: float, samples: int, window: int,
    why: str,
) -> ParityVerdict:
    """No run: against a baseline that learned nothing measurable (`why`, from `inconclusive_reason`), a config
    that changes the math (`changed`, its knobs) cannot be judged."""
    name = family(baseline, config)
    return ParityVerdict(
        False,
        name,
        TOLERANCES[name],
        samples,
        window,
        lr,
        baseline_lr,
        reason=f"it changes {', '.join(changed)}, and {why}: cannot be judged",
        conclusive=False,
    )


def same_math_unjudged(
    baseline: Config, config: Config, lr: float, samples: int, window: int, why: str,
    inputs: InputsVerdict | None = None,
) -> ParityVerdict:
    """No run: against a baseline that learned nothing measurable (`why`), a config with the baseline's math
    (loader knobs, placement, cudnn.benchmark, channels_last, a graph; the device decode path whose images passed
    the inputs check, `inputs`) passes, inconclusively.

    A run could not judge it: its deviations would be in units of noise (docs/parity.md, "Inconclusive").
    """
    name = family(baseline, config)
    decode = f"decode: {inputs.summary()}; otherwise " if inputs is not None else ""
    return ParityVerdict(
        True,
        name,
        TOLERANCES[name],
        samples,
        window,
        lr,
        lr,
        reason=f"{decode}it keeps the baseline's math, and {why}",
        conclusive=False,
    )


def without_run(
    baseline: Config, config: Config, inputs: InputsVerdict | None, lr: float, baseline_lr: float, samples: int,
    window: int, why: str | None, same: tuple[str, ...] = SAME_MATH_KNOBS,
) -> ParityVerdict:
    """A verdict no run could change. A device decode path whose images differ from the host pipeline's (`inputs`)
    fails whatever a training run would show. Against a baseline that learned nothing measurable (`why`), a
    config that changes the math (outside `same`: on a stream whose order is fixed, its worker count too) cannot be
    judged, and one that keeps it passes; decode, once its images match, keeps it. (amp and compile at the baseline's
    batch are judged by their gradients instead: ``by_gradients``.)"""
    name = family(baseline, config)
    if inputs is not None and not inputs.passed:
        verdict = ParityVerdict(False, name, TOLERANCES[name], samples, window, lr, lr,
                                reason=f"decode: {inputs.summary()}")
    elif why is None:
        raise ValueError("a config whose images match is judged by a run when the check is conclusive")
    elif changed := [k for k in changes_math(baseline, config, same)
                     if not (k in ("decode", "decode_share") and inputs is not None)]:
        verdict = cannot_judge(baseline, config, changed, lr, baseline_lr, samples, window, why)
    else:
        verdict = same_math_unjudged(baseline, config, lr, samples, window, why, inputs)
    return with_checks(verdict, inputs)


def by_gradients(
    baseline: Config, config: Config, inputs: InputsVerdict | None, numerics: NumericsVerdict | None, lr: float,
    baseline_lr: float, samples: int, window: int,
) -> ParityVerdict:
    """The verdict, with no training run, on a config at the baseline's batch that changes only amp and compile
    (``autotune.parity.numerics.GRADIENT_JUDGED``; decode, judged by its images, `inputs`, aside).

    Its gradients at the warmed-up weights against the batch-to-batch noise (`numerics`) decide: within it, it
    passes; beyond it, it is rejected; a check that could not run leaves it unjudged (not passed, not conclusive).
    A device decode path whose images differ from the host pipeline's fails it first, as it fails any config
    (`numerics` None: not checked). Conclusive whatever the baseline's run would show: no run is made for it.
    """
    name = family(baseline, config)
    decode = f"decode: {inputs.summary()}; " if inputs is not None else ""
    if inputs is not None and not inputs.passed:
        passed, conclusive, reason = False, True, f"decode: {inputs.summary()}"
    elif numerics is None:
        raise ValueError("a config judged by its gradients needs the numerics check's verdict")
    elif not numerics.batches:  # it could not run (a crash, an OOM, a timeout): nothing was measured
        passed, conclusive = False, False
        reason = (f"{decode}{numerics.summary()}; only its gradients judge a change of amp or compile, with no "
                  f"training run")
    else:
        passed, conclusive = numerics.passed, True
        reason = f"{decode}judged by its gradients, with no training run: {numerics.summary()}"
    verdict = ParityVerdict(passed, name, TOLERANCES[name], samples, window, lr, baseline_lr, reason=reason,
                            conclusive=conclusive)
    return with_checks(verdict, inputs, numerics)


def with_checks(verdict: ParityVerdict, inputs: InputsVerdict | None,
                numerics: NumericsVerdict | None = None) -> ParityVerdict:
    """The verdict with the outcome and numbers of the checks that need no run: the inputs check, for a config
    that decodes on the device, and the numerics check, for one judged by its gradients (amp, compile)."""
    changes: dict[str, Any] = {}
    if inputs is not None:
        changes["inputs_passed"] = inputs.passed
        if inputs.reason is None:
            changes.update(inputs_distance=inputs.host_to_device, inputs_host_distance=inputs.host_to_host)
    if numerics is not None:
        changes["numerics_passed"] = numerics.passed
        if numerics.batches:
            changes["numerics_ratio"] = numerics.ratio
    return dataclasses.replace(verdict, **changes)


def inconclusive_reason(base: ParityRun, samples: int, window: int, extended: bool) -> str:
    """What the baseline learned, against what a verdict needs: the reason every inconclusive verdict gives."""
    learned = progress(base, samples, window)
    longer = ", run once longer" if extended else ""
    inputs = ""
    if base.shuffled_loss is not None and base.shuffled_loss - base.final_loss <= learned * abs(base.initial_loss):
        # The binding measure: its loss fell, but no more on the true targets than on shuffled ones.
        inputs = (
            f" from its inputs (probe loss {base.final_loss:.4g}, and {base.shuffled_loss:.4g} with the targets "
            f"shuffled)"
        )
    needs = f"a verdict needs {MIN_PROGRESS:.1%}"
    z = signal.clear(base, samples, window)
    if z is not None:  # its noise is known: the other way to conclude
        needs += f", or {signal.MIN_SIGNAL:.2%} at {signal.SIGNAL_Z:g} times its noise (it stood {z:.1f} times)"
    return (
        f"the baseline learned {learned:.1%} of its initial loss {base.initial_loss:.4g}{inputs} in "
        f"{samples:,} samples{longer}; {needs}"
    )


def explained(
    verdict: ParityVerdict,
    rule: str | None,
    lr_rule: LrRule | None,
    failed: list[tuple[str | None, ParityVerdict]],
    inconclusive: str | None,
) -> ParityVerdict:
    """The verdict with the rule its rate came from and why that rate (the search's `lr_rule`, or the bolder ones
    `failed`); a pass of an inconclusive check (`inconclusive`: its reason, None when conclusive) says so."""
    changes: dict[str, Any] = {}
    if rule is not None and lr_rule is not None:
        tried = "; ".join(f"the {r} rate (lr {v.lr:g}) failed: {_short(v)}" for r, v in failed)
        if rule in lr_rule.bolder():
            next_one = f"the gentler rates trained further from the baseline, so {rule}, a bolder rate, is next"
        else:
            next_one = f"{rule} is the next gentler rate"
        why = f"{tried}; {next_one}" if failed else lr_rule.why
        changes.update(lr_rule=rule, lr_reason=why)
    if verdict.passed and inconclusive is not None:
        # It passes on its math alone: the same arithmetic as a baseline whose learning is too small to measure.
        changes.update(conclusive=False, reason=f"it keeps the baseline's math, and {inconclusive}")
    return dataclasses.replace(verdict, **changes)


def too_low(failed: list[tuple[str | None, ParityVerdict]]) -> bool:
    """The rates tried so far, boldest first, were too low: each gentler one left the candidate further behind.

    A larger batch takes fewer steps over the same samples. When its loss is above the baseline's and a gentler
    rate raises it further, the rate held it back, and a bolder one is the next to try (docs/parity.md, "The
    check", has the AdamW run that showed it).
    """
    deviations = [v.deviation for _, v in failed if v.deviation is not None]
    return len(deviations) >= 2 and 0 < deviations[0] < deviations[-1]


def _short(verdict: ParityVerdict) -> str:
    if verdict.deviation is None or verdict.probe_deviation is None:
        return str(verdict.reason)
    return f"deviation {verdict.deviation:+.1%}, probe {verdict.probe_deviation:+.1%}"
