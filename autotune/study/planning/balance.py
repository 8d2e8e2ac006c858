"""The hybrid decode's share, solved from one hybrid measured end to end, and the best share measured next.

At a share s of each batch decoded on the device (``autotune.loop.hybrid_decode``), two sides
run at once. The workers make the other 1 - s of each batch, at the rate H their loader makes
host-decoded batches alone. The device runs the step (S samples/s alone, on batches already
there) and decodes and augments its s of the batch on a side stream, whose kernels take SMs
from the step. Per sample, in seconds:

    workers: (1 - s) / H        device: 1 / S + s * c

where c is what one device-decoded sample costs the step. The parts cannot show c: the decode
alone runs far faster on an idle device than beside a step's kernels (docs/search.md#the-hybrid-decodes-share).
One hybrid measured end to end at s0, rate R0, where the device is what limits it, gives it:
c = (1/R0 - 1/S) / s0. The loop runs at its slower side, so the best share is where both take
as long: s* = (1/H - 1/S) / (1/H + c). The share the seeds guess (a half) is one measurement;
the model turns it into the share the host and the card call for.
"""

from __future__ import annotations

import dataclasses

from optuna.trial import TrialState

from autotune.config import Config
from autotune.study import standing
from autotune.study.context import Setup
from autotune.study.planning.valuation import Valuation, loader_key, step_key
from autotune.study.shared import sharing, tickets
from autotune.study.shared.tickets import VALUED_ROLE
from autotune.text import rate

# A hybrid measured within this share of what its workers alone make of it (their half at their rate) is taken as
# limited by them: noise of a few percent would otherwise read as a device decode cost, and the share solved for
# would come out under the best.
HOST_MARGIN = 0.9
SOLVED = "balanced"  # a ticket's attribute: the share the model solved for, with its predicted rate


@dataclasses.dataclass(frozen=True)
class Balance:
    """Seconds per sample of each side: the workers' (1 / H), the step's alone (1 / S), a device decode's (c)."""

    host_s: float
    step_s: float
    decode_s: float

    def rate(self, share: float) -> float:
        """The loop's predicted samples/s at `share`: its slower side."""
        return 1.0 / max((1.0 - share) * self.host_s, self.step_s + share * self.decode_s)

    def best_share(self) -> float:
        """Where both sides take as long; 0 where the workers alone outrun the step."""
        return min(1.0, max(0.0, (self.host_s - self.step_s) / (self.host_s + self.decode_s)))


def solve(share: float, measured: float, step: float, host: float) -> Balance | None:
    """The model from a hybrid at `share` measured at `measured` samples/s, its step alone at `step`, the workers'
    host-decoded loader alone at `host`; None where the workers could explain the measured rate (the device was
    not what limited it, so it shows nothing of c) or the step alone was no faster than the whole loop."""
    if not 0 < share < 1 or min(measured, step, host) <= 0:
        return None
    per_sample = 1.0 / measured
    decode_s = (per_sample - 1.0 / step) / share
    if decode_s <= 0 or (1.0 - share) / host >= HOST_MARGIN * per_sample:
        return None
    return Balance(host_s=1.0 / host, step_s=1.0 / step, decode_s=decode_s)


def host_feed(setup: Setup, config: Config) -> Config:
    """The config with every sample decoded by the workers: the host half of `config`'s hybrid, whole. It hands over
    uint8 pixels where the space can (the hybrid's host half does, where the pipeline's cut holds)."""
    return setup.space.normalise(dataclasses.replace(config, decode="cpu", decode_share=1.0, device_normalize=True))


def queue_next(setup: Setup, config: Config, measured: float, valuation: Valuation) -> str | None:
    """After a hybrid `config` measured `measured` samples/s end to end: queue its best share by the model next, where
    that share is in the space, not measured or queued yet, and predicted over the best measured so far; the line
    that says so, or None where nothing was queued."""
    if config.decode != "gpu" or not 0 < config.decode_share < 1:
        return None
    step = valuation.steps.get(step_key(config)) or 0.0  # neither known: no model
    host = valuation.loaders.get(loader_key(host_feed(setup, config))) or 0.0
    model = solve(config.decode_share, measured, step, host)
    if model is None:
        return None
    study = setup.study
    trials = study.get_trials(deepcopy=False)
    tried = {setup.config_of(t) for t in trials if "config" in t.user_attrs and t.user_attrs.get("role") != VALUED_ROLE}
    # Queued, not taken yet: the seeds' list past what was queued, and tickets waiting for a worker.
    pending = [s["params"] for s in study.user_attrs.get(tickets.SEEDS_ATTRIBUTE, [])[tickets.seeds_queued(trials):]]
    pending += [t.system_attrs.get("fixed_params") for t in trials if t.state == TrialState.WAITING]
    best = standing.best_of(trials, standing.rejected_families(study)) or 0.0
    choices = [dataclasses.replace(config, decode_share=s) for s in setup.space.domains["decode_share"] if s < 1]
    choices = [c for c in choices if c not in tried and (p := setup.space.params(c)) is not None and p not in pending]
    if not choices:
        return None
    pick = max(choices, key=lambda c: model.rate(c.decode_share))
    predicted = model.rate(pick.decode_share)
    if predicted <= max(best, measured):
        return None  # no share left can win
    said = (f"balance: the hybrid at {config.decode_share * 100:g}% ran {rate(measured)}/s beside a step of "
            f"{rate(step)}/s alone and workers of {rate(host)}/s alone: a device-decoded sample costs "
            f"the step {model.decode_s * 1e3:.3f} ms, so both sides take as long at {model.best_share():.0%}")
    params = setup.space.params(pick)
    assert params is not None
    with sharing.study_lock(setup.storage, setup.study_name):
        # A seed's role, so the seeds' list counts it; measured as it comes, not valued from its parts again: the
        # parts' prediction (the slower of step and loader) is what the model corrects for a hybrid.
        tickets.insert_next(study, [{"params": params, "user_attrs": {
            "role": "seed", SOLVED: round(predicted, 1), "predicted_samples_per_s": round(predicted, 1)}}])
    return f"{said}; measuring it at {pick.decode_share * 100:g}% next (predicted {rate(predicted)}/s)"
