"""The device_normalize loader yields the batches the plain DataLoader yields, and its workers' backlog can be read."""

import pytest
import torch
from torch.utils.data import DataLoader
from torchvision import datasets
from torchvision import transforms as T

from autotune.batch import BatchError
from autotune.config import Config
from autotune.loop import build_loader
from autotune.loop.device_normalize import NormalizingLoader, normalizing_loader
from autotune.trial import backlog
from autotune.workloads.decode import NotTranslatable

PIPELINE = T.Compose([T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize((0.5, 0.4, 0.3), (0.2, 0.25, 0.3))])


def _data(n: int = 24) -> datasets.FakeData:
    return datasets.FakeData(size=n, image_size=(3, 40, 30), num_classes=5, transform=PIPELINE)


def _batches(loader) -> list[tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(11)  # the DataLoader's order and its workers' seeds both come from here
    return [(x.clone(), y.clone()) for x, y in loader]


def test_two_workers_make_the_plain_loaders_batches_to_the_bit_in_its_order():
    config = Config(batch_size=5, num_workers=2, prefetch_factor=2, device_normalize=True)
    tuned = build_loader(_data(), config, shuffle=True, drop_last=False, device=torch.device("cpu"))
    plain = DataLoader(_data(), batch_size=5, shuffle=True, num_workers=2)
    assert isinstance(tuned, NormalizingLoader) and len(tuned) == len(plain) == 5
    got, want = _batches(tuned), _batches(plain)
    assert [x.shape[0] for x, _ in got] == [5, 5, 5, 5, 4]
    for (x, y), (x_want, y_want) in zip(got, want):
        assert x.dtype == torch.float32 and torch.equal(x, x_want) and torch.equal(y, y_want)


def test_channels_last_batches_come_in_that_layout():
    config = Config(batch_size=4, channels_last=True, device_normalize=True)
    x, _ = next(iter(build_loader(_data(8), config, shuffle=False, drop_last=False, device=torch.device("cpu"))))
    assert x.is_contiguous(memory_format=torch.channels_last)


def test_a_measurement_reads_the_workers_backlog_through_the_wrapping_iterator():
    config = Config(batch_size=4, num_workers=2, prefetch_factor=3, device_normalize=True)
    loader = build_loader(_data(), config, shuffle=False, drop_last=False, device=torch.device("cpu"))
    assert backlog.capacity(loader) == 6
    iterator = iter(loader)
    next(iterator)
    assert isinstance(backlog.ready(iterator), int)


def test_a_collate_fn_and_a_batch_that_is_not_images_and_targets_are_refused_naming_why():
    config = Config(batch_size=4, device_normalize=True)
    with pytest.raises(NotTranslatable, match="its own collate_fn, which batches the float images"):
        normalizing_loader(_data(), config, False, False, torch.device("cpu"), collate_fn=list)

    class Dicts(datasets.FakeData):
        def __getitem__(self, index):
            image, target = super().__getitem__(index)
            return {"image": image, "label": target}

    loader = normalizing_loader(Dicts(size=8, transform=PIPELINE), config, False, False, torch.device("cpu"))
    with pytest.raises(BatchError, match="finishes the images of \\(images, targets\\) batches, but a batch is a dict"):
        next(iter(loader))


@pytest.mark.gpu
def test_on_cuda_pinned_batches_arrive_as_the_cpu_pipeline_makes_them_within_a_rounding():
    # CUDA divides by a scalar as a multiplication by its reciprocal: a float32 rounding apart from the CPU's division.
    config = Config(batch_size=6, num_workers=2, prefetch_factor=2, pin_memory=True, channels_last=True,
                    device_normalize=True)
    tuned = build_loader(_data(), config, shuffle=True, drop_last=False, device=torch.device("cuda"))
    plain = DataLoader(_data(), batch_size=6, shuffle=True, num_workers=2)
    got, want = _batches(tuned), _batches(plain)
    assert len(got) == len(want) == 4
    for (x, y), (x_want, y_want) in zip(got, want):
        assert x.is_cuda and x.is_contiguous(memory_format=torch.channels_last) and torch.equal(y.cpu(), y_want)
        assert torch.allclose(x.cpu(), x_want, rtol=1e-6, atol=1e-6)


def test_a_parity_run_seeds_its_order_through_the_wrapped_dataloader():
    # Both runs of a parity check visit the samples in one order, whatever the global generator says.
    from autotune.parity.run import own_order

    def order(loader, global_seed: int) -> list[int]:
        own_order(loader, 5)
        torch.manual_seed(global_seed)
        return [int(t) for _, y in loader for t in y]

    config = Config(batch_size=4, device_normalize=True)
    tuned = build_loader(_data(), config, shuffle=True, drop_last=False, device=torch.device("cpu"))
    plain = build_loader(_data(), Config(batch_size=4), shuffle=True, drop_last=False, device=torch.device("cpu"))
    assert order(tuned, 0) == order(tuned, 1) == order(plain, 2)
