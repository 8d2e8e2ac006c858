"""device_normalize on a webdataset pipeline: its map_tuple's transform cut in a copy, the float batches the same."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
import webdataset as wds
from PIL import Image
from torch.utils.data import DataLoader
from torchvision import transforms as T

from autotune.config import Config
from autotune.knobs import Machine
from autotune.loop.device_normalize import NormalizingLoader, normalizing_loader
from autotune.options import SearchOptions
from autotune.study import setup
from autotune.workloads.pixels import split, transform_of, verdict, with_transform
from autotune.workloads.shards import write_shards

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
AUGMENT = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """20 JPEGs of a few sizes in 4 tar shards, written the way webdataset_resnet50's are."""
    folder = tmp_path_factory.mktemp("jpegs")
    rng = np.random.default_rng(0)
    samples = []
    for i in range(20):
        path = folder / f"{i}.jpg"
        Image.fromarray(rng.integers(0, 256, (37 + i, 51, 3), dtype=np.uint8)).save(path, quality=90)
        samples.append((str(path), i % 5))
    names = write_shards(samples, folder / "shards", 4)
    return [str(folder / "shards" / name) for name in names]


def pipeline(urls: list[str], augment=AUGMENT, *more) -> wds.WebDataset:
    stream = wds.WebDataset(urls, shardshuffle=False, nodesplitter=wds.split_by_node,
                            workersplitter=wds.split_by_worker)
    return stream.shuffle(8, seed=1).decode("pil").to_tuple("jpg", "cls").map_tuple(augment, int, *more)


def _seeded(loader: object) -> list:
    torch.manual_seed(5)
    random.seed(5)
    return list(loader)


def test_the_normalizing_loader_makes_the_pipelines_own_float_batches_to_the_bit(shards: list[str]) -> None:
    dataset = pipeline(shards)
    stages = list(dataset.pipeline)
    own = _seeded(DataLoader(dataset, batch_size=6))
    loader = normalizing_loader(dataset, Config(batch_size=6), False, False, torch.device("cpu"))
    assert isinstance(loader, NormalizingLoader) and loader.dataset is dataset
    made = _seeded(loader)
    assert [len(y) for _, y in made] == [6, 6, 6, 2]
    for (want, labels), (got, targets) in zip(own, made):
        assert got.dtype == torch.float32 and got.shape == want.shape and torch.equal(got, want)
        assert torch.equal(targets, labels)
    assert dataset.pipeline == stages and dataset.pipeline[-1].args[0] is AUGMENT  # the user's pipeline, untouched


def test_the_workers_half_is_a_copy_whose_last_stage_hands_over_uint8(shards: list[str]) -> None:
    dataset = pipeline(shards)
    assert transform_of(dataset) is AUGMENT
    cut = split(transform_of(dataset))
    copied = with_transform(dataset, cut.host)
    assert copied is not dataset and copied.pipeline[:-1] == dataset.pipeline[:-1]
    assert copied.pipeline[-1].args[1:] == (int,) and copied.pipeline[-1].kw == dataset.pipeline[-1].kw
    image, label = next(iter(copied))
    assert image.dtype == torch.uint8 and image.shape == (3, 24, 24) and label in range(5)
    assert verdict(dataset) == ("the workers hand over uint8 pixels; the device runs ToTensor's /255 -> Normalize "
                                "on each batch", "")


def test_over_workers_each_batch_is_uint8_on_the_wire_and_the_pass_is_whole(shards: list[str]) -> None:
    config = Config(batch_size=4, num_workers=2, prefetch_factor=2)
    batches = list(normalizing_loader(pipeline(shards), config, False, False, torch.device("cpu")))
    assert sum(len(y) for _, y in batches) == 20 and all(x.dtype == torch.float32 for x, _ in batches)


@pytest.mark.parametrize(
    "make, reason",
    [
        (lambda urls: pipeline(urls).map(lambda s: s),
         "the webdataset pipeline's image transform must be the first function of its last stage, "
         ".map_tuple(transform, ...), but its map_tuple stage is followed by 1 more stage(s), which would get the "
         "workers' uint8 images"),
        (lambda urls: wds.WebDataset(urls, shardshuffle=False).decode("pil").to_tuple("jpg", "cls"),
         "the webdataset pipeline's image transform must be the first function of its last stage, "
         ".map_tuple(transform, ...), but it has no map_tuple(transform, ...) stage"),
        (lambda urls: pipeline(urls, T.Compose([T.CenterCrop(20), T.ToTensor(), T.RandomErasing()])),
         "torchvision.transforms.transforms.RandomErasing runs after the image is converted to float; the device "
         "takes over only torchvision's ToPureTensor, ConvertImageDtype, ToDtype, Normalize"),
    ],
)
def test_a_pipeline_the_device_cannot_take_over_is_left_with_its_reason(shards: list[str], make, reason: str) -> None:
    assert verdict(make(shards)) == ("", reason)


def test_a_search_on_a_gpu_host_offers_device_normalize_and_the_device_decode_on_the_stream(
    project: Path, shards: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "recipes" / "shards.py").write_text(
        "import webdataset as wds\nfrom torch import nn, optim\nfrom torchvision import transforms as T\n"
        f"URLS = {shards!r}\n"
        "DEFAULTS = dict(batch_size=4, lr=0.1, epochs=1, samples_per_epoch=20)\n"
        "def build_dataset(root):\n"
        "    augment = T.Compose([T.RandomResizedCrop(24), T.ToTensor(), T.Normalize((0.5,) * 3, (0.2,) * 3)])\n"
        "    return (wds.WebDataset(URLS, shardshuffle=False, workersplitter=wds.split_by_worker)\n"
        "            .decode('pil').to_tuple('jpg', 'cls').map_tuple(augment, int))\n"
        "def build_model():\n    return nn.Sequential(nn.Flatten(), nn.LazyLinear(5))\n"
        "def build_loss():\n    return nn.CrossEntropyLoss()\n"
        "def build_optimizer(params, lr):\n    return optim.SGD(params, lr=lr)\n"
    )
    gpu = Machine("NVIDIA H100", cuda=True, cpu_share=2, amp_dtypes=("bf16",), memory_bytes=80 * 2**30)
    monkeypatch.setattr(setup, "detect_machine", lambda *args: gpu)
    p = setup.prepare("shards", SearchOptions(trials=1), echo=lambda line: None)
    # The device decode path reads the stream's bytes (workloads.stream_jpegs, tests/streams/test_stream_decode.py).
    assert "decode" not in p.space.excluded and p.space.domains["decode"] == ("cpu", "gpu")
    assert "decode_share" not in p.space.excluded and len(p.space.domains["decode_share"]) > 1
    assert p.facts.gpu_decode.startswith("decode JPEG on the device, then per image RandomResizedCrop(24")
    assert "device_normalize" not in p.space.excluded and p.space.domains["device_normalize"] == (False, True)
    assert p.facts.device_normalize.startswith("the workers hand over uint8 pixels")
    assert p.facts.shards == 4
