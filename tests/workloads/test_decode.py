"""The device decode path read off torchvision pipelines: which transforms map, which are refused and why,
and real JPEGs decoded and augmented by it on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader
from torchvision import datasets
from torchvision import transforms as T
from torchvision.io import ImageReadMode, decode_jpeg, encode_jpeg
from torchvision.transforms import v2

from autotune.config import Config
from autotune.loop.device_decode import augment, decode_batch, decoding_loader
from autotune.trial import backlog
from autotune.workloads.decode import (
    COLLATE_REFUSAL,
    CenterCrop,
    Flip,
    JpegBytes,
    NotTranslatable,
    RandomResizedCrop,
    Resize,
    jpeg_samples,
    translate,
    verdict,
)

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SIZES = ((375, 500), (500, 375), (333, 500), (120, 90))  # height x width, as the synthetic ImageNet's and smaller


def test_the_imagenet_recipe_pipeline_translates_and_says_what_was_derived() -> None:
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    pipeline = translate(tf)
    assert pipeline.geometry == (RandomResizedCrop((224, 224), (0.08, 1.0), (0.75, 4 / 3)), Flip(0.5, "horizontal"))
    assert pipeline.out_size == (224, 224) and pipeline.dtype == torch.float32
    assert pipeline.scale == pytest.approx(tuple(1 / (255 * s) for s in STD))
    assert pipeline.shift == pytest.approx(tuple(-m / s for m, s in zip(MEAN, STD)))
    assert pipeline.describe() == (
        "decode JPEG on the device, then per image RandomResizedCrop(224, scale=(0.08, 1), ratio=(0.75, 1.33333)) "
        "-> RandomHorizontalFlip(p=0.5) -> ToTensor -> Normalize(mean=(0.485, 0.456, 0.406), "
        "std=(0.229, 0.224, 0.225)), 224x224 float32 (crop and resize in one roi_align)"
    )


@pytest.mark.parametrize(
    "tf",
    [
        # v2 spells the conversion ToImage + ToDtype(scale=True); the flip may come after it.
        v2.Compose([v2.RandomResizedCrop(224), v2.ToImage(), v2.RandomHorizontalFlip(),
                    v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]),
        T.Compose([T.RandomResizedCrop(224), T.PILToTensor(), T.ConvertImageDtype(torch.float32),
                   T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)]),
        # Nested Composes flatten; ToPureTensor changes no value.
        v2.Compose([v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip()]), v2.ToImage(),
                    v2.ToDtype(torch.float32, scale=True), v2.ToPureTensor(), v2.Normalize(MEAN, STD)]),
    ],
)
def test_other_spellings_of_the_same_pipeline_translate_to_the_same_device_path(tf: object) -> None:
    reference = translate(T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                                     T.Normalize(MEAN, STD)]))
    pipeline = translate(tf)
    assert (pipeline.geometry, pipeline.out_size, pipeline.dtype) == (
        reference.geometry, reference.out_size, reference.dtype)
    assert pipeline.scale == pytest.approx(reference.scale) and pipeline.shift == pytest.approx(reference.shift)


def test_evaluation_pipeline_and_uint8_output_translate() -> None:
    pipeline = translate(T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor()]))
    assert pipeline.geometry == (Resize((256,)), CenterCrop((224, 224)))
    assert translate(v2.Compose([v2.Resize((200, 300)), v2.PILToTensor()])).dtype == torch.uint8


@pytest.mark.parametrize(
    "tf,reason",
    [
        (T.Compose([T.RandomResizedCrop(224), T.ColorJitter(0.4), T.ToTensor()]),
         "transform ColorJitter has no device equivalent (the device path knows RandomResizedCrop, Resize, "
         "CenterCrop, Random*Flip, ToTensor, Normalize)"),
        (T.Compose([T.RandomResizedCrop(224, interpolation=T.InterpolationMode.BICUBIC), T.ToTensor()]),
         "RandomResizedCrop with interpolation bicubic: the device path resamples bilinearly"),
        (T.Compose([T.Resize(256), T.ToTensor()]),
         "Resize(256) is the last resize and no crop follows: each image keeps its own aspect ratio, so a batch "
         "has no one size"),
        (T.Compose([T.ToTensor(), T.Normalize(MEAN, STD)]),
         "no crop or resize: each image keeps its own size, so a batch has no one size"),
        (T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()]),
         "the pipeline ends in a PIL image, not a tensor: its samples do not batch"),
        (T.Compose([T.RandomResizedCrop(224), T.PILToTensor(), T.Normalize(MEAN, STD)]),
         "Normalize before the image is a float tensor (uint8)"),
        (v2.Compose([v2.RandomResizedCrop(224), v2.ToImage(), v2.ToDtype(torch.float16, scale=True)]),
         "ToDtype(torch.float16): the device path makes float32 images"),
        (T.Compose([T.RandomResizedCrop(224), T.ToTensor(), T.Normalize((0.5,) * 4, (0.2,) * 4)]),
         "Normalize mean has 4 values; a decoded RGB JPEG has 3 channels"),
        (None, "the data set has no transform: its samples are PIL images, which do not batch"),
        (T.Lambda(lambda img: img), "transform Lambda has no device equivalent (the device path knows "
         "RandomResizedCrop, Resize, CenterCrop, Random*Flip, ToTensor, Normalize)"),
    ],
)
def test_what_cannot_be_translated_is_refused_with_the_transform_named(tf: object, reason: str) -> None:
    with pytest.raises(NotTranslatable, match=rf"^{_literal(reason)}$"):
        translate(tf)


def _literal(text: str) -> str:
    import re

    return re.escape(text)


def _write_jpegs(root: Path, smooth: bool = True) -> Path:
    """Two class folders of JPEGs of SIZES, written by torchvision's own encoder."""
    generator = torch.Generator().manual_seed(0)
    for label in range(2):
        (root / f"class{label}").mkdir(parents=True, exist_ok=True)
        for i, (h, w) in enumerate(SIZES):
            yy, xx = torch.meshgrid(torch.linspace(0, 1, h), torch.linspace(0, 1, w), indexing="ij")
            # A smooth field: resampling differences stay small, so geometry errors would show.
            image = torch.stack([xx, yy, xx * yy]) * 200 + 25 * torch.sin(xx * 12 + label)
            if not smooth:
                image = torch.rand(3, h, w, generator=generator) * 255
            jpeg = encode_jpeg(image.clamp(0, 255).to(torch.uint8), quality=95)
            (root / f"class{label}" / f"{i}.JPEG").write_bytes(jpeg.numpy().tobytes())
    return root


def _bytes_of(folder: datasets.ImageFolder) -> list[torch.Tensor]:
    return [torch.frombuffer(bytearray(Path(p).read_bytes()), dtype=torch.uint8) for p, _ in folder.samples]


def test_decoded_and_resized_on_the_device_path_matches_torchvision_on_pil(tmp_path: Path) -> None:
    tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)])
    folder = datasets.ImageFolder(str(_write_jpegs(tmp_path)), transform=tf)
    out = decode_batch(translate(tf), _bytes_of(folder), torch.device("cpu"))
    reference = torch.stack([folder[i][0] for i in range(len(folder))])
    assert out.shape == reference.shape == (8, 3, 224, 224) and out.dtype == torch.float32
    # Normalised units (1/255 of a pixel is about 0.017): the same crop, within resampling differences.
    assert (out - reference).abs().mean().item() < 0.01


def test_random_pipeline_gives_normalised_channels_last_batches(tmp_path: Path) -> None:
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    folder = datasets.ImageFolder(str(_write_jpegs(tmp_path, smooth=False)), transform=tf)
    generator = torch.Generator().manual_seed(1)
    out = decode_batch(translate(tf), _bytes_of(folder), torch.device("cpu"), generator, torch.channels_last)
    assert out.shape == (8, 3, 224, 224) and out.dtype == torch.float32
    assert out.is_contiguous(memory_format=torch.channels_last)
    # Uniform noise pixels in 0..255, normalised: each channel's mean is (0.5 - mean) / std.
    expected = torch.tensor([(0.5 - m) / s for m, s in zip(MEAN, STD)])
    assert torch.allclose(out.mean(dim=(0, 2, 3)), expected, atol=0.1)
    lo, hi = torch.tensor([-m / s for m, s in zip(MEAN, STD)]), torch.tensor([(1 - m) / s for m, s in zip(MEAN, STD)])
    per_channel = out.permute(1, 0, 2, 3).flatten(1)
    assert bool((per_channel.min(1).values >= lo - 1e-4).all() and (per_channel.max(1).values <= hi + 1e-4).all())


def test_uint8_pipeline_gives_whole_pixels(tmp_path: Path) -> None:
    tf = v2.Compose([v2.Resize((200, 300)), v2.PILToTensor()])
    folder = datasets.ImageFolder(str(_write_jpegs(tmp_path)), transform=tf)
    out = decode_batch(translate(tf), _bytes_of(folder), torch.device("cpu"))
    reference = torch.stack([folder[i][0] for i in range(len(folder))])
    assert out.dtype == torch.uint8 and out.shape == (8, 3, 200, 300)
    assert (out.float() - reference.float()).abs().mean().item() < 2.0


def test_decoding_loader_keeps_the_cpu_paths_data_order_and_targets(tmp_path: Path) -> None:
    tf = T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    folder = datasets.ImageFolder(str(_write_jpegs(tmp_path)), transform=tf)
    config = Config(batch_size=3, channels_last=True)
    torch.manual_seed(0)
    cpu_targets = [y.tolist() for _, y in DataLoader(folder, batch_size=3, shuffle=True)]
    torch.manual_seed(0)
    loader = decoding_loader(folder, config, shuffle=True, drop_last=False, device=torch.device("cpu"))
    batches = list(loader)
    assert len(loader) == len(batches) == 3
    assert [y.tolist() for _, y in batches] == cpu_targets
    assert [tuple(x.shape) for x, _ in batches] == [(3, 3, 64, 64), (3, 3, 64, 64), (2, 3, 64, 64)]
    assert all(x.is_contiguous(memory_format=torch.channels_last) for x, _ in batches)


@pytest.mark.alone  # the workers must fill their queues while the test waits
def test_a_measurement_reads_the_decoding_loaders_worker_queue(tmp_path: Path) -> None:
    """The device path's workers prefetch bytes as any DataLoader's do: a measurement must see that backlog."""
    folder = datasets.ImageFolder(str(_write_jpegs(tmp_path)), transform=T.Compose([T.CenterCrop(64), T.ToTensor()]))
    config = Config(batch_size=1, num_workers=2, prefetch_factor=3)
    loader = decoding_loader(folder, config, shuffle=False, drop_last=False, device=torch.device("cpu"))
    assert backlog.capacity(loader) == 6
    batches = iter(loader)
    next(batches)  # the loader decodes one batch ahead: two taken from the workers
    assert backlog.settle(batches)
    # 8 files: 6 given to the workers at the start, one more for each of the 2 taken; all 6 left wait ready.
    assert (backlog.in_flight(batches), backlog.ready(batches)) == (0, 6)
    assert len(list(batches)) == 7


def test_files_that_are_not_jpegs_are_named(tmp_path: Path) -> None:
    root = _write_jpegs(tmp_path)
    folder = datasets.ImageFolder(str(root), transform=T.Compose([T.CenterCrop(64), T.ToTensor()]))
    assert verdict(folder)[1] == ""
    png = root / "class1" / "9.png"
    T.ToPILImage()(torch.zeros(3, 8, 8)).save(png)
    folder = datasets.ImageFolder(str(root), transform=folder.transform)
    assert verdict(folder) == ("", f"{png} is not a JPEG (by its name); the device decodes JPEG only")
    png.rename(root / "class1" / "9.jpg")
    folder = datasets.ImageFolder(str(root), transform=folder.transform)
    with pytest.raises(NotTranslatable, match=r"9\.jpg is not a JPEG \(its first bytes\); the device decodes JPEG"):
        jpeg_samples(folder)
    with pytest.raises(ValueError, match=r"9\.jpg is not a JPEG \(its first bytes are b'\\x89PNG'\)"):
        JpegBytes(folder.samples)[len(folder) - 1]


def test_a_data_set_without_files_or_with_its_own_collate_is_refused() -> None:
    data = datasets.FakeData(size=4, transform=T.Compose([T.CenterCrop(8), T.ToTensor()]))
    assert verdict(data) == ("", "FakeData has no `samples` list of (path, target): the device path reads the "
                                 "files itself")
    assert verdict(data, collate_fn=lambda batch: batch) == ("", COLLATE_REFUSAL)


@pytest.mark.gpu
def test_cuda_decode_on_a_side_stream_matches_the_cpu_path(tmp_path: Path) -> None:
    tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)])
    folder = datasets.ImageFolder(str(_write_jpegs(tmp_path)), transform=tf)
    cpu = decode_batch(translate(tf), _bytes_of(folder), torch.device("cpu"))
    loader = decoding_loader(folder, Config(batch_size=8, channels_last=True), False, False, torch.device("cuda"))
    (x, y), = list(loader)
    assert x.device.type == "cuda" and x.is_contiguous(memory_format=torch.channels_last)
    # nvJPEG and libjpeg-turbo may round a few pixels differently; the geometry is the same.
    assert (x.cpu() - cpu).abs().mean().item() < 0.02
    assert y.tolist() == [t for _, t in folder.samples]


@pytest.mark.gpu
@pytest.mark.parametrize("train", [True, False])
def test_the_device_path_queues_its_work_and_never_waits_for_the_device(tmp_path: Path, train: bool) -> None:
    """Crops, resizes, flips and normalisation after the decode make no synchronizing call: each would wait for the
    side stream's kernels queued before it, a dozen a batch and one per image size besides."""
    geometry = [T.RandomResizedCrop(64), T.RandomHorizontalFlip()] if train else [T.Resize(72), T.CenterCrop(64)]
    tf = T.Compose([*geometry, T.ToTensor(), T.Normalize(MEAN, STD)])
    folder = datasets.ImageFolder(str(_write_jpegs(tmp_path)), transform=tf)
    device = torch.device("cuda")
    images = decode_jpeg(_bytes_of(folder), mode=ImageReadMode.RGB, device=device)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = augment(translate(tf), images, device, memory_format=torch.channels_last)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert out.shape == (len(images), 3, 64, 64) and out.is_contiguous(memory_format=torch.channels_last)
