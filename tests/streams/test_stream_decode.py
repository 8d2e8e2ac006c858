"""decode = gpu on a webdataset stream: the workers read JPEG bytes through a copy of the user's stages, the device
decodes and augments; a share of each batch may stay on the workers (hybrid). Real tar shards, written here.

On a CPU the device path runs inline, the same code as on a GPU (autotune.loop.device_decode).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
import webdataset as wds
from torch.utils.data import DataLoader
from torchvision import transforms as T

from autotune.config import Config
from autotune.loop.device_decode import DecodingLoader, decoding_loader
from autotune.parity import images as inputs
from autotune.parity import inputs as parity_inputs
from autotune.workloads.decode import Flip
from autotune.workloads.shards import write_shards
from autotune.workloads.stream_jpegs import (
    NotTranslatable,
    bytes_stream,
    derive_stream,
    first_jpegs,
    on_device,
    verdict,
)

HALVES = Path(__file__).parents[1] / "fixtures" / "jpeg_halves.py"
AUGMENT = T.Compose([T.RandomResizedCrop(32, scale=(0.6, 1.0)), T.RandomHorizontalFlip(), T.ToTensor(),
                     T.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))])
CPU = torch.device("cpu")


def _halves() -> Any:
    spec = importlib.util.spec_from_file_location("jpeg_halves", HALVES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """jpeg_halves' 128 JPEGs (the class: which half is bright) in 8 tar shards, as webdataset_resnet50 packs them."""
    root = tmp_path_factory.mktemp("halves")
    folder = _halves().write_folder(root)
    samples = [(str(p), int(p.parent.name[-1])) for p in sorted(folder.glob("class*/*.JPEG"))]
    names = write_shards(samples, root / "shards", 8)
    return [str(root / "shards" / name) for name in names]


def stream(urls: list[str], augment: Any = AUGMENT, decode: str = "pil") -> wds.WebDataset:
    return (wds.WebDataset(urls, shardshuffle=False, nodesplitter=wds.split_by_node, workersplitter=wds.split_by_worker)
            .shuffle(16, seed=3).decode(decode).to_tuple("jpg", "cls").map_tuple(augment, int))


def _keys_and_bytes(urls: list[str]) -> dict[bytes, int]:
    """Every JPEG in the shards, by its bytes, with its class."""
    found: dict[bytes, int] = {}
    for url in urls:
        with tarfile.open(url) as tar:
            members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
        for name, data in members.items():
            if name.endswith(".jpg"):
                found[data] = int(members[name[:-4] + ".cls"])
    return found


def test_the_bytes_copy_yields_each_file_as_written_with_its_class_and_leaves_the_users_stream(
    shards: list[str],
) -> None:
    dataset = stream(shards)
    stages = list(dataset.pipeline)
    files = _keys_and_bytes(shards)
    copied = bytes_stream(dataset)
    seen = [(data.numpy().tobytes(), target) for data, target in copied]
    assert len(seen) == len(files) == 128
    assert dict(seen) == files  # every file once, its bytes untouched, its class decoded as the stream decodes it
    assert dataset.pipeline == stages and dataset.pipeline[-1].args[0] is AUGMENT
    assert copied.pipeline[:6] == stages[:6]  # shards, splitters, tar reader, shuffle buffer: the same objects
    image, target = next(iter(dataset))  # and the user's stream still decodes and augments
    assert image.shape == (3, 32, 32) and target in (0, 1)


@pytest.mark.parametrize("workers", [0, 3])
@pytest.mark.parametrize("share", [1.0, 0.5])
def test_a_pass_of_the_decoding_loader_gives_every_sample_once(shards: list[str], workers: int, share: float) -> None:
    config = Config(batch_size=16, num_workers=workers, decode="gpu", decode_share=share)
    loader = decoding_loader(stream(shards), config, False, False, CPU)
    assert isinstance(loader, DecodingLoader) and loader.split == (share < 1)
    batches = list(loader)
    images = torch.cat([x for x, _ in batches])
    targets = Counter(torch.cat([y for _, y in batches]).tolist())
    assert images.shape == (128, 3, 32, 32) and images.dtype == torch.float32
    assert targets == Counter(_keys_and_bytes(shards).values()) == {0: 64, 1: 64}


def test_the_hybrid_splits_a_streams_jpegs_by_their_bytes_the_same_in_every_pass(shards: list[str]) -> None:
    from autotune.workloads.stream_jpegs import split_stream

    files = _keys_and_bytes(shards)
    on = {data for data in files if on_device(data, 0.5)}
    assert 40 < len(on) < 88  # about half, by a hash of the bytes
    copied = split_stream(stream(shards), 0.5, T.Compose([T.CenterCrop(20), T.PILToTensor()]))
    for _ in range(2):
        device = [x for (x, flag), _ in copied if flag]
        host = [x for (x, flag), _ in copied if not flag]
        assert {x.numpy().tobytes() for x in device} == on
        assert len(host) == 128 - len(on) and all(x.shape == (3, 20, 20) and x.dtype == torch.uint8 for x in host)


def test_the_streams_jpegs_decode_on_the_device_into_the_host_pipelines_images(shards: list[str]) -> None:
    found = parity_inputs.judge(inputs.compare(stream(shards), CPU, workers=2))
    assert found.passed, found.summary()
    assert (found.images, found.draws) == (64, 32)
    assert 0.5 < found.host_to_host < 3.0, "about 1: two draws of one pipeline"


def test_a_wrong_device_pipeline_for_a_stream_is_caught_by_the_inputs_check(shards: list[str]) -> None:
    dataset = stream(shards)
    pipeline, _ = derive_stream(dataset)
    wrong = dataclasses.replace(pipeline, geometry=tuple(Flip(g.p, "vertical") if isinstance(g, Flip) else g
                                                         for g in pipeline.geometry))
    found = parity_inputs.judge(inputs.compare(dataset, CPU, workers=2, pipeline=wrong))
    assert not found.passed, found.summary()


def _png_shards(folder: Path) -> list[str]:
    path = folder / "png.tar"
    with tarfile.open(path, "w") as tar:
        for name, data in (("a.jpg", b"\x89PNG\r\n\x1a\n" + bytes(32)), ("a.cls", b"1")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return [str(path)]


@pytest.mark.parametrize(
    "make, reason",
    [
        (lambda urls, tmp: stream(urls, decode="torchrgb"),
         "the stream decodes its images with ImageHandler('torchrgb'); the device path replaces .decode('pil') only, "
         "whose RGB images its augmentation was written for"),
        (lambda urls, tmp: wds.WebDataset(urls, shardshuffle=False).decode("pil").to_tuple("jpg", "cls", "__key__")
         .map_tuple(AUGMENT, int, str),
         "the stream's samples are .to_tuple('jpg', 'cls', '__key__'): the device path batches (image, target) "
         "pairs, two fields"),
        (lambda urls, tmp: wds.WebDataset(urls, shardshuffle=False).decode("pil").map(lambda s: s)
         .to_tuple("jpg", "cls").map_tuple(AUGMENT, int),
         "the stream runs _map between its decode and its augmentation; the device path keeps the bytes through "
         "_to_tuple and _shuffle only"),
        (lambda urls, tmp: wds.WebDataset(urls, shardshuffle=False).to_tuple("jpg", "cls").map_tuple(AUGMENT, int),
         "the webdataset pipeline has no .decode(...) stage: the device path replaces its image decode, and there "
         "is none to replace"),
        (lambda urls, tmp: stream(_png_shards(tmp)),
         "the stream's .jpg field is not a JPEG (its first bytes are b'\\x89PNG'); the device decodes JPEG only: "
         "search with --fix decode=cpu"),
        (lambda urls, tmp: stream(urls, T.Compose([T.RandomResizedCrop(32), T.ColorJitter(0.1), T.ToTensor()])),
         "transform ColorJitter has no device equivalent (the device path knows RandomResizedCrop, Resize, "
         "CenterCrop, Random*Flip, ToTensor, Normalize)"),
    ],
)
def test_a_stream_the_device_cannot_decode_is_left_with_its_reason(shards: list[str], tmp_path: Path, make: Any,
                                                                  reason: str) -> None:
    assert verdict(make(shards, tmp_path)) == ("", reason)


def _dotted_shard(folder: Path, shards: list[str]) -> list[str]:
    """The first shard's samples again, each image under `KEY.input.jpg`: a field name with a dot in it."""
    path = folder / "dotted.tar"
    with tarfile.open(shards[0]) as source, tarfile.open(path, "w") as tar:
        for member in source.getmembers():
            data = source.extractfile(member).read()
            info = tarfile.TarInfo(member.name.replace(".jpg", ".input.jpg"))
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return [str(path)]


def test_an_image_field_named_with_a_dot_is_kept_as_bytes(shards: list[str], tmp_path: Path) -> None:
    urls = _dotted_shard(tmp_path, shards)
    dataset = (wds.WebDataset(urls, shardshuffle=False).decode("pil").to_tuple("input.jpg", "cls")
               .map_tuple(AUGMENT, int))
    assert verdict(dataset)[1] == ""
    batches = list(decoding_loader(dataset, Config(batch_size=8, decode="gpu"), False, False, CPU))
    assert sum(len(y) for _, y in batches) == 16 and batches[0][0].shape == (8, 3, 32, 32)


def test_a_decode_stage_that_skips_what_it_cannot_decode_is_refused(shards: list[str]) -> None:
    dataset = (wds.WebDataset(shards, shardshuffle=False).decode("pil", handler=wds.ignore_and_continue)
               .to_tuple("jpg", "cls").map_tuple(AUGMENT, int))
    assert verdict(dataset) == ("", "the stream's decode stage skips what it cannot decode (handler="
                                    "ignore_and_continue); the device path decodes every sample the workers read, and "
                                    "takes a decode stage that raises only")


def test_reading_the_first_jpegs_leaves_the_users_stages_where_they_were(shards: list[str]) -> None:
    # A shard shuffle counts its passes (its epoch): a read in this process must not move the user's on.
    dataset = (wds.WebDataset(shards, shardshuffle=8, detshuffle=True, seed=1).decode("pil").to_tuple("jpg", "cls")
               .map_tuple(AUGMENT, int))
    shuffle = next(s for s in dataset.pipeline if type(s).__name__ == "detshuffle")
    before = shuffle.epoch
    first_jpegs(dataset, 4)
    derive_stream(dataset)
    assert shuffle.epoch == before


def test_a_stream_that_is_no_webdataset_or_brings_its_own_collate_is_refused(shards: list[str]) -> None:
    class Own(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(())

    assert verdict(Own())[1].startswith("the stream is not a webdataset pipeline")
    assert verdict(stream(shards), collate_fn=lambda batch: batch)[1].startswith("the workload gives its own")
    with pytest.raises(NotTranslatable, match="no .decode"):
        bytes_stream(wds.WebDataset(shards, shardshuffle=False).to_tuple("jpg", "cls").map_tuple(AUGMENT, int))


def test_the_first_jpegs_are_the_streams_first_samples_bytes(shards: list[str]) -> None:
    dataset = stream(shards)
    first = [x.numpy().tobytes() for x in first_jpegs(dataset, 5)]
    again = [x.numpy().tobytes() for x, _ in list(DataLoader(bytes_stream(dataset), batch_size=None))[:5]]
    assert first == again and len(set(first)) == 5
