"""The pipeline cut where its image becomes float: the workers' half plus the device's half make the same batch."""

import pytest
import torch
from torchvision import datasets
from torchvision import transforms as T
from torchvision.transforms import v2

from autotune.workloads.decode import NotTranslatable
from autotune.workloads.pixels import split, verdict, with_transform

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _images(n: int = 6) -> datasets.FakeData:
    return datasets.FakeData(size=n, image_size=(3, 61, 47), num_classes=3, random_offset=7)


def _both_ways(transform) -> tuple[torch.Tensor, torch.Tensor]:
    """The pipeline per image, stacked; and the workers' half per image, stacked, then the device's half."""
    images = [image for image, _ in _images()]
    torch.manual_seed(3)
    whole = torch.stack([transform(image) for image in images])
    cut = split(transform)
    torch.manual_seed(3)
    pixels = torch.stack([torch.as_tensor(cut.host(image)) for image in images])
    return whole, cut.finish(pixels)


def test_a_v1_pipeline_cut_at_to_tensor_makes_the_same_values_to_the_bit():
    pipeline = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    whole, finished = _both_ways(pipeline)
    assert finished.dtype == torch.float32 and finished.shape == (6, 3, 24, 24)
    assert torch.equal(whole, finished)
    assert split(pipeline).steps == ("ToTensor's /255", "Normalize")


def test_a_v2_pipeline_keeps_its_uint8_crops_on_the_workers_and_cuts_at_to_dtype():
    pipeline = v2.Compose([v2.ToImage(), v2.RandomResizedCrop(24, antialias=True), v2.RandomHorizontalFlip(),
                           v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    whole, finished = _both_ways(pipeline)
    assert torch.equal(whole, finished)
    assert split(pipeline).steps == ("ToDtype", "Normalize")


def test_the_workers_half_ends_in_uint8_pixels():
    cut = split(T.Compose([T.CenterCrop(20), T.ToTensor(), T.Normalize(MEAN, STD)]))
    pixels = cut.host(_images()[0][0])
    assert pixels.dtype == torch.uint8 and pixels.shape == (3, 20, 20)


@pytest.mark.parametrize(
    "transform, reason",
    [
        (T.Compose([T.CenterCrop(20), T.ToTensor(), T.RandomErasing()]),
         "RandomErasing runs after the image is converted to float; the device takes over only ToPureTensor, "
         "ConvertImageDtype, ToDtype, Normalize"),
        (T.Compose([T.CenterCrop(20), T.PILToTensor()]),
         "the transform makes no float image (no ToTensor, no ConvertImageDtype or ToDtype to a float dtype): there "
         "is no float conversion to move to the device"),
        (None, "the data set has no transform: there is no ToTensor to move to the device"),
    ],
)
def test_a_pipeline_the_device_cannot_finish_is_refused_naming_why(transform, reason):
    with pytest.raises(NotTranslatable) as info:
        split(transform)
    assert str(info.value) == reason


def test_with_transform_copies_the_data_set_and_leaves_the_original_as_it_was():
    pipeline = T.Compose([T.CenterCrop(20), T.ToTensor()])
    data = datasets.FakeData(size=2, image_size=(3, 30, 30), transform=pipeline, target_transform=lambda y: y + 100)
    copied = with_transform(data, split(pipeline).host)
    image, target = copied[0]
    assert image.dtype == torch.uint8 and data[0][0].dtype == torch.float32
    assert target == data[0][1] and target >= 100  # the targets' own transform is kept


def test_verdict_says_what_moves_or_why_nothing_can():
    data = datasets.FakeData(size=2, transform=T.Compose([T.ToTensor(), T.Normalize(MEAN, STD)]))
    assert verdict(data) == ("the workers hand over uint8 pixels; the device runs ToTensor's /255 -> Normalize on "
                             "each batch", "")
    assert verdict(data, collate_fn=list) == ("", "the workload gives its own collate_fn, which batches the float "
                                                  "images the workers would no longer make")
