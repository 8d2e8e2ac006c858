"""The device path's crops are drawn from torchvision's RandomResizedCrop distribution, and a wrong one shows.

The parity check judges the whole GPU path on a GPU; here the sampler itself is
compared with ``RandomResizedCrop.get_params`` over thousands of draws, by a
two-sample Kolmogorov-Smirnov statistic on each crop's area share, aspect ratio
and position.
"""

from __future__ import annotations

import math

import pytest
import torch
from torchvision import transforms as T

from autotune.loop.crops import boxes, resized_crop_params, resized_size
from autotune.workloads.decode import translate

DRAWS = 4000
HEIGHT, WIDTH = 375, 500
# The KS statistic two samples of 4,000 from one distribution exceed with probability 0.001:
# 1.95 * sqrt(2 / 4000).
KS_LIMIT = 1.95 * math.sqrt(2 / DRAWS)


def _ks(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest gap between the two samples' empirical distribution functions."""
    both = torch.cat([a, b]).sort().values
    cdf_a = torch.searchsorted(a.sort().values, both, right=True) / len(a)
    cdf_b = torch.searchsorted(b.sort().values, both, right=True) / len(b)
    return float((cdf_a - cdf_b).abs().max())


def _features(top: torch.Tensor, left: torch.Tensor, h: torch.Tensor, w: torch.Tensor) -> dict[str, torch.Tensor]:
    h, w = h.double(), w.double()
    return {
        "area share": h * w / (HEIGHT * WIDTH),
        "aspect ratio": w / h,
        "centre x": (left.double() + w / 2) / WIDTH,
        "centre y": (top.double() + h / 2) / HEIGHT,
    }


def _torchvision(scale: tuple[float, float], ratio: tuple[float, float]) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    image = torch.empty(3, HEIGHT, WIDTH)
    params = torch.tensor([T.RandomResizedCrop.get_params(image, list(scale), list(ratio)) for _ in range(DRAWS)])
    return _features(*params.unbind(1))


def _ours(scale: tuple[float, float], ratio: tuple[float, float]) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    heights, widths = torch.full((DRAWS,), float(HEIGHT)), torch.full((DRAWS,), float(WIDTH))
    return _features(*resized_crop_params(heights, widths, scale, ratio, generator))


def _worst(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor]) -> tuple[str, float]:
    return max(((name, _ks(ours[name], theirs[name])) for name in ours), key=lambda item: item[1])


@pytest.mark.parametrize("scale,ratio", [((0.08, 1.0), (3 / 4, 4 / 3)), ((0.25, 1.0), (0.5, 2.0))])
def test_crops_follow_torchvisions_distribution(scale: tuple[float, float], ratio: tuple[float, float]) -> None:
    name, ks = _worst(_ours(scale, ratio), _torchvision(scale, ratio))
    assert ks < KS_LIMIT, f"{name}: KS {ks:.3f} >= {KS_LIMIT:.3f}"


@pytest.mark.parametrize(
    "wrong_scale,wrong_ratio,feature",
    [((0.5, 1.0), (3 / 4, 4 / 3), "area share"), ((0.08, 1.0), (1.0, 1.0), "aspect ratio")],
)
def test_a_wrong_crop_distribution_is_told_apart(wrong_scale: tuple[float, float], wrong_ratio: tuple[float, float],
                                                 feature: str) -> None:
    theirs = _torchvision((0.08, 1.0), (3 / 4, 4 / 3))
    ours = _ours(wrong_scale, wrong_ratio)
    assert _worst(ours, theirs)[0] == feature
    assert _ks(ours[feature], theirs[feature]) > 5 * KS_LIMIT


def test_quantiles_of_area_and_aspect_agree_with_torchvision() -> None:
    ours, theirs = _ours((0.08, 1.0), (3 / 4, 4 / 3)), _torchvision((0.08, 1.0), (3 / 4, 4 / 3))
    q = torch.tensor([0.1, 0.25, 0.5, 0.75, 0.9], dtype=torch.float64)
    for name in ("area share", "aspect ratio"):
        assert torch.allclose(ours[name].quantile(q), theirs[name].quantile(q), atol=0.04), name


def test_fallback_is_torchvisions_central_crop() -> None:
    # No draw of ratio 4 fits a square image: torchvision falls back to the whole image cut to ratio 4, centred.
    top, left, h, w = resized_crop_params(torch.tensor([100.0]), torch.tensor([100.0]), (0.9, 1.0), (4.0, 4.0))
    assert T.RandomResizedCrop.get_params(torch.empty(3, 100, 100), [0.9, 1.0], [4.0, 4.0]) == (37, 0, 25, 100)
    assert (top.item(), left.item(), h.item(), w.item()) == (37.0, 0.0, 25.0, 100.0)


@pytest.mark.parametrize("height,width", [(375, 500), (500, 375), (333, 500), (1000, 90)])
@pytest.mark.parametrize("size,max_size", [((256,), None), ((224, 300), None), ((256,), 400)])
def test_resized_size_is_torchvisions(height: int, width: int, size: tuple[int, ...], max_size: int | None) -> None:
    resized = T.Resize(list(size), max_size=max_size)(torch.empty(1, height, width))
    assert resized_size(height, width, size, max_size) == tuple(resized.shape[1:])


def test_boxes_of_a_centre_crop_and_a_certain_flip() -> None:
    pipeline = translate(T.Compose([T.Resize(256), T.CenterCrop(224), T.RandomHorizontalFlip(1.0), T.ToTensor()]))
    box, mirror_x, mirror_y = boxes(pipeline.geometry, [375], [500], torch.device("cpu"))
    # Resize(256): 375x500 -> 256x341; CenterCrop(224) keeps rows 16..240 and columns 58..282 there.
    sy, sx = 375 / 256, 500 / 341
    assert box[0].tolist() == pytest.approx([58 * sx, 16 * sy, 282 * sx, 240 * sy])
    assert mirror_x.tolist() == [True] and mirror_y.tolist() == [False]
