"""The loop's own CUDA stream while a device-decoding loader is iterated: nvJPEG's engine and the step, side by side.

torchvision's ``decode_jpeg(..., device="cuda")`` decodes baseline JPEGs on the GPU's hardware
JPEG engine where it has one (A100, H100, H200), and nvJPEG queues that work on streams of its
own, made without ``cudaStreamNonBlocking``. Work on such a stream waits for everything queued
before it on the legacy default stream, and the legacy stream's later work waits for it: where the
training step runs on the default stream, as a plain loop's does, each decode waits for the step
in flight and the next step for the decode. On an H100 with ResNet-50 compiled at batch 256
(lab/results/h100_where_2026-12-06): the loop's thread spent 45 ms a batch in a decode of 64
images that takes 3 ms on an idle device, the device ran nothing for 4.8 ms a batch, and a
hybrid at a quarter of each batch ran 4,844 samples/s against 5,409 with the workers making
every image. On a stream created non-blocking (every stream ``torch.cuda.Stream`` makes) the
step neither waits for nvJPEG's streams nor they for it.

So the device-decoding loader makes such a stream current from its first batch to its last, or
to the loop's ``break``; the user's step between its batches runs there. Where the loop already
runs on a stream of its own, it is left alone. Both switches are ordered: the loop's stream
waits for what the default stream had queued (the model's parameters, made there), and the
default stream, afterwards, for the loop's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

LEGACY = 0  # the legacy default stream's handle (``torch.cuda.Stream.cuda_stream``)


@contextlib.contextmanager
def loop_stream(device: torch.device) -> Iterator[torch.cuda.Stream | None]:
    """A non-blocking stream current on `device` within; the stream, or None where there was nothing to do (not
    CUDA, or the loop runs on a stream of its own already)."""
    if device.type != "cuda":
        yield None
        return
    before = torch.cuda.current_stream(device)
    if before.cuda_stream != LEGACY:
        yield None
        return
    own = torch.cuda.Stream(device)
    own.wait_stream(before)
    torch.cuda.set_stream(own)
    try:
        yield own
    finally:
        before.wait_stream(own)
        torch.cuda.set_stream(before)
