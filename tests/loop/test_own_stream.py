"""The loop's own stream while a device-decoding loader is iterated (autotune.loop.own_stream)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torchvision import datasets
from torchvision import transforms as T
from torchvision.io import ImageReadMode, decode_jpeg, encode_jpeg

from autotune.config import Config
from autotune.loop.device_decode import decoding_loader
from autotune.loop.own_stream import LEGACY, loop_stream

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SLEEP_CYCLES = 400_000_000  # about 0.2 s of a GPU clock: a step in flight, long beside a decode of 8 small JPEGs


def _folder(root: Path) -> datasets.ImageFolder:
    for label in range(2):
        (root / f"class{label}").mkdir(parents=True)
        for i in range(8):
            image = (torch.arange(3 * 48 * 64).reshape(3, 48, 64) * (i + 1 + label)) % 251
            (root / f"class{label}" / f"{i}.JPEG").write_bytes(encode_jpeg(image.to(torch.uint8)).numpy().tobytes())
    tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    return datasets.ImageFolder(str(root), transform=tf)


def test_off_cuda_there_is_no_stream_to_switch() -> None:
    with loop_stream(torch.device("cpu")) as stream:
        assert stream is None


@pytest.mark.gpu
@pytest.mark.parametrize("share", [1.0, 0.5])
def test_the_loop_runs_on_its_own_stream_while_it_iterates_and_on_the_default_one_after(tmp_path: Path,
                                                                                         share: float) -> None:
    device = torch.device("cuda")
    config = Config(batch_size=4, decode="gpu", decode_share=share, channels_last=True)
    loader = decoding_loader(_folder(tmp_path), config, True, False, device)
    model = torch.nn.Conv2d(3, 4, 3).to(device)  # made on the default stream, trained on the loop's
    seen = []
    for x, y in loader:
        seen.append(torch.cuda.current_stream(device).cuda_stream)
        model(x).float().mean().backward()
    assert len(seen) == 4 and len(set(seen)) == 1 and seen[0] != LEGACY
    assert torch.cuda.current_stream(device).cuda_stream == LEGACY
    assert torch.isfinite(model.weight.grad).all()

    batches = iter(loader)  # a loop that breaks: the default stream is back once its iterator is gone
    next(batches)
    assert torch.cuda.current_stream(device).cuda_stream != LEGACY
    del batches
    assert torch.cuda.current_stream(device).cuda_stream == LEGACY


@pytest.mark.gpu
def test_a_loop_on_a_stream_of_its_own_keeps_it(tmp_path: Path) -> None:
    device = torch.device("cuda")
    loader = decoding_loader(_folder(tmp_path), Config(batch_size=8, decode="gpu"), False, False, device)
    mine = torch.cuda.Stream(device)
    with torch.cuda.stream(mine):
        streams = [torch.cuda.current_stream(device).cuda_stream for _ in loader]
    assert streams == [mine.cuda_stream, mine.cuda_stream]


@pytest.mark.gpu
def test_a_decode_does_not_wait_for_the_step_in_flight_on_the_loops_stream(tmp_path: Path) -> None:
    """The step's work queued on the loop's stream is still running when nvJPEG's decode returns: the two overlap."""
    device = torch.device("cuda")
    data = [torch.frombuffer(bytearray(Path(p).read_bytes()), dtype=torch.uint8) for p, _ in _folder(tmp_path).samples]
    decode_jpeg(data, mode=ImageReadMode.RGB, device=device)  # nvJPEG's first call makes its state
    torch.cuda.synchronize()
    with loop_stream(device) as stream:
        assert stream is not None
        torch.cuda._sleep(SLEEP_CYCLES)  # the step in flight
        step_done = torch.cuda.Event()
        step_done.record()
        with torch.cuda.stream(torch.cuda.Stream(device)):  # the loader's side stream
            images = decode_jpeg(data, mode=ImageReadMode.RGB, device=device)
        assert not step_done.query()
    torch.cuda.synchronize()
    assert len(images) == 16 and images[0].shape == (3, 48, 64)
