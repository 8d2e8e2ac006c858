"""The pipeline cut where its image becomes float: the workers' half plus the device's half make the same batch."""

import pytest
import torch
from PIL import Image
from torch.utils.data import Dataset, Subset
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
         "torchvision.transforms.transforms.RandomErasing runs after the image is converted to float; the device "
         "takes over only torchvision's ToPureTensor, ConvertImageDtype, ToDtype, Normalize"),
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


class Normalize:
    """A user's own per-image standardisation, named as torchvision's is: not torchvision's arithmetic."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return (x - x.mean()) / x.std()


def test_a_class_named_as_torchvisions_but_the_users_own_is_not_taken_over():
    with pytest.raises(NotTranslatable, match=r"^test_pixels\.Normalize runs after the image is converted to float"):
        split(T.Compose([T.CenterCrop(20), T.ToTensor(), Normalize()]))


class Images(Dataset):
    """Images of one PIL mode through a pipeline; `transform` as torchvision's data sets keep it."""

    def __init__(self, mode: str, transform) -> None:
        self.mode, self.transform = mode, transform

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int):
        image = Image.new(self.mode, (20, 16), color=40 * index + 3)
        return self.transform(image), index


def test_verdict_draws_samples_both_ways_and_refuses_images_the_split_would_change():
    pipeline = T.Compose([T.RandomCrop(12), T.ToTensor(), T.Normalize(0.5, 0.25)])
    assert verdict(Images("L", pipeline))[1] == ""  # 8-bit grey: PILToTensor, then /255, is ToTensor
    assert verdict(Images("1", pipeline)) == ("", (  # 1-bit: ToTensor makes 0 and 1 of it
        "its sample 0 cannot be split: TypeError: device_normalize takes uint8 image batches (8-bit PIL images), "
        "but got torch.bool; ToTensor scales other image modes otherwise: pass device_normalize=False"))
    assert verdict(Subset(Images("RGB", pipeline), [2, 3]))[1] == ""  # random_split's data sets are cut inside


class Passing(Images):
    """A data set whose `transform` is a property that sets another object's: a copy would change that object."""

    @property
    def transform(self):
        return self.inner.transform

    @transform.setter
    def transform(self, value) -> None:
        self.inner = getattr(self, "inner", None) or type("Inner", (), {})()
        self.inner.transform = value


def test_a_transform_that_is_a_property_is_refused_and_the_data_set_left_as_it_was():
    pipeline = T.Compose([T.ToTensor()])
    data = Passing("RGB", pipeline)
    assert verdict(data) == ("", "Passing.transform is a property: setting it on a copy may change the data set it "
                                 "reads through")
    assert data.transform is pipeline


def test_the_device_s_normalize_is_made_once_and_a_zero_std_is_refused():
    from autotune.workloads.pixels import QueuedNormalize

    cut = split(T.Compose([T.ToTensor(), T.Normalize(MEAN, STD)]))
    (normalize,) = [t for t in cut.device if isinstance(t, QueuedNormalize)]
    batch = torch.rand(4, 3, 5, 5)
    assert torch.equal(normalize(batch), T.Normalize(MEAN, STD)(batch)) and len(normalize._made) == 1
    normalize(batch.clone())
    assert len(normalize._made) == 1  # its mean and std made once a device and dtype, not at every batch
    with pytest.raises(NotTranslatable, match=r"^Normalize has a zero std \(\[0\.2, 0\.0, 0\.2\]\): it would divide"):
        split(T.Compose([T.ToTensor(), T.Normalize(MEAN, (0.2, 0.0, 0.2))]))


@pytest.mark.gpu
def test_the_device_s_half_of_a_pipeline_waits_for_nothing():
    """Normalize's own tensors and its check of the std would each synchronize the stream the hybrid decode's host
    half is finished on."""
    cut = split(T.Compose([T.ToTensor(), T.Normalize(MEAN, STD)]))
    pixels = torch.randint(0, 256, (8, 3, 16, 16), dtype=torch.uint8, device="cuda")
    cut.finish(pixels)  # warm: the mean and std made
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = cut.finish(pixels)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert out.dtype == torch.float32 and out.shape == (8, 3, 16, 16)
