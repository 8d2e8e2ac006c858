"""A Lightning job on a tiny model, from the settings `autotune export --to lightning` gives."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch
from _profile import write_cpu_profile
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from autotune.config import Config
from autotune.tuned.export import export

# Imported by the test, not here: importing lightning takes 4 s of CPU, which every pytest-xdist worker paid to
# collect this file, and `pytest -m e2e` paid for a test it does not run.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("lightning") is None, reason="needs lightning")


def classifier(lr: float) -> Any:
    import lightning as L

    class Classifier(L.LightningModule):
        def __init__(self, lr: float) -> None:
            super().__init__()
            self.lr = lr
            self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    return Classifier(lr)


def test_a_lightning_trainer_trains_on_the_exported_settings(project: Path) -> None:
    import lightning as L

    write_cpu_profile(project, Config(batch_size=16, amp="bf16"), 0.2)
    (item,) = export("tiny", "lightning", hardware="cpu")
    assert item.kwargs == {"precision": "bf16-mixed", "benchmark": False}
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 8, generator=g), torch.randint(0, 4, (64,), generator=g))
    loader = DataLoader(data, **item.loader_kwargs)
    torch.manual_seed(0)
    module = classifier(item.lr)
    before = [p.detach().clone() for p in module.parameters()]
    trainer = L.Trainer(max_steps=3, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, **item.kwargs)
    trainer.fit(module, loader)
    assert trainer.global_step == 3 and loader.batch_size == 16 and module.lr == 0.2
    assert any(not torch.equal(a, b) for a, b in zip(before, module.parameters()))
