"""Steps with a real bug, built over a runner's model, loss and optimizer: what the parity checks must catch."""

from __future__ import annotations

from typing import Any

from autotune.config import Config
from autotune.loop import Step
from autotune.parity import run as parity_run
from autotune.trial.runner import Runner


class NoScalerStep(Step):
    """fp16 autocast without the GradScaler that fp16 needs."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.scaler = None


def with_step(runner: Runner, step_cls: type[Step]) -> parity_run.Builder:
    """Runner.build, with the step replaced by `step_cls` over the same model, loss and optimizer."""

    def build(config: Config, lr: float) -> tuple[Any, Step, float]:
        loader, step, seconds = runner.build(config, lr)
        return loader, step_cls(step.model, step.loss_fn, step.optimizer, config, step.device), seconds

    return build
