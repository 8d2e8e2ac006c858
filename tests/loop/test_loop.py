"""The loop a config builds: DeviceLoader's contract and order, the eager and graph-captured steps."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from autotune.config import Config
from autotune.loop import DeviceLoader, Step


def _data(n: int = 100) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.rand(n, 1, 8, 8, generator=g), torch.randint(0, 4, (n,), generator=g))


@pytest.mark.parametrize("drop_last,expected_len,last_size", [(False, 4, 4), (True, 3, 32)])
def test_device_loader_iterates_like_a_dataloader(drop_last: bool, expected_len: int, last_size: int) -> None:
    loader = DeviceLoader(_data(), batch_size=32, shuffle=False, drop_last=drop_last, device="cpu")
    batches = list(loader)
    assert (len(loader), len(batches), loader.batch_size, loader.drop_last, loader.shuffle) == (
        expected_len,
        expected_len,
        32,
        drop_last,
        False,
    )
    assert batches[-1][0].shape[0] == last_size
    assert torch.equal(batches[0][0], _data().tensors[0][:32])


def test_device_loader_shuffles_in_dataloaders_order() -> None:
    ds = _data()
    torch.manual_seed(7)
    expected = [y for _, y in DataLoader(ds, batch_size=10, shuffle=True)]
    torch.manual_seed(7)
    got = [y for _, y in DeviceLoader(ds, batch_size=10, shuffle=True, device="cpu")]
    assert all(torch.equal(a, b) for a, b in zip(expected, got)) and len(got) == 10


def _train(config: Config, device: torch.device, steps: int, batch: int = 32) -> tuple[list[float], torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(256, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = Step(model, nn.CrossEntropyLoss(), opt, config, device)
    ds = _data(steps * batch + 7)  # a short last batch exercises the eager path of a graph step
    losses = [step(x, y) for x, y in DataLoader(ds, batch_size=batch)]
    return [float(loss) for loss in losses], torch.cat([p.detach().flatten().cpu() for p in model.parameters()])


def test_eager_step_trains_on_cpu() -> None:
    losses, _ = _train(Config(batch_size=32), torch.device("cpu"), steps=30)
    assert losses[-1] < losses[0]


@pytest.mark.gpu
def test_graph_step_matches_eager_step() -> None:
    device = torch.device("cuda")
    eager_losses, eager_params = _train(Config(batch_size=32), device, steps=12)
    graph_losses, graph_params = _train(Config(batch_size=32, cuda_graph=True), device, steps=12)
    assert len(graph_losses) == len(eager_losses) == 13
    assert graph_losses == pytest.approx(eager_losses, rel=1e-4, abs=1e-5)
    assert torch.allclose(graph_params, eager_params, rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_graph_step_under_amp_trains(amp: str) -> None:
    losses, params = _train(
        Config(batch_size=32, cuda_graph=True, amp=amp, channels_last=True, cudnn_benchmark=True),
        torch.device("cuda"),
        steps=40,
    )
    assert all(torch.isfinite(torch.tensor(losses))) and torch.isfinite(params).all()
    assert sum(losses[-5:]) < sum(losses[:5])
