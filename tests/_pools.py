"""A trial pool that starts no process, for searches whose trials and parts run at rates a test makes up."""

from __future__ import annotations

from autotune.config import Config
from autotune.procs.trial_process import Outcome


class FakePool:
    """What a search asks of its pool besides measuring: a subclass says what `run` and `parts` measure."""

    startup_s = 0.0  # no process starts here: nothing to reserve for a round's

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def prestart(self, n: int) -> None:
        pass

    ask_to_exit = stop = kill = lambda self: None


def ran(config: Config, rate: float, compile_s: float = 0.0) -> Outcome:
    """A trial of `config` that ran at `rate`, steady from its first window, as a trial process reports one."""
    return Outcome("complete", windows=(rate,), result=dict(
        samples_per_s=rate, steady_samples_per_s=rate, spread=0.01, step_s=config.batch_size / rate,
        epoch_s=512 / rate, setup_s=0.0, materialize_s=0.0, stopped_early=False, compile_s=compile_s))
