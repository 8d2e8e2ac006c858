"""Probe: how fast each JPEG decoder on the device decodes ImageNet batches, and what it costs the calling thread.

Why: the `decode = gpu` loader's batch of 256 JPEGs held the loop's thread 33.9 ms on an H100 host
(lab/results/h100_2026-12-05, feed.log), while a compiled ResNet-50 step takes about 38 ms: the thread, not the
device, bounds the feed. torchvision's `decode_jpeg(list, device="cuda")` (0.19+) asks nvJPEG for its hardware
backend (the NVJPG engines of an A100/H100), parses every header in the calling thread, and synchronizes its
stream before and after the batch, under one process-wide lock. nvImageCodec (NVIDIA's maintained successor for
Python, `nvidia-nvimgcodec-cu13`) drives the same engines with headers parsed on a thread pool, buffers
preallocated, and a call that returns once the batch is queued on the caller's stream.

Each engine decodes the same batches (files of the synthetic or real ImageNet the workload reads), first on an
idle device, then while a second stream keeps the device's SMs busy with bf16 matmuls (a step's stand-in that,
unlike a sleep, competes for the SMs an engine without hardware decode needs). Per batch: wall time, the calling
thread's CPU time; and the largest pixel difference from torchvision's decode on the first batch.

    python3 lab/probes/decode_engines.py [--batches 20] [--batch 256] [--out engines.json]

nvImageCodec is used where it imports (`pip install "nvidia-nvimgcodec-cu13[nvjpeg]"`; its `nvidia` package may
sit in a folder of its own, named by --nvimgcodec-path); the rows it cannot make say why.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

Decode = Callable[[list[bytes], torch.cuda.Stream], list[torch.Tensor]]


def torchvision_engine() -> Decode:
    from torchvision.io import ImageReadMode, decode_jpeg

    def decode(blobs: list[bytes], stream: torch.cuda.Stream) -> list[torch.Tensor]:
        data = [torch.frombuffer(b, dtype=torch.uint8) for b in blobs]
        with torch.cuda.stream(stream):
            return decode_jpeg(data, mode=ImageReadMode.RGB, device="cuda")

    return decode


def nvimgcodec_engine(kinds: tuple[str, ...]) -> Decode:
    from nvidia import nvimgcodec as nv

    backends = [nv.Backend(getattr(nv.BackendKind, k)) for k in kinds]
    decoder = nv.Decoder(device_id=torch.cuda.current_device(), backends=backends,
                         options="nvjpeg_hw_decoder:preallocate_batch_size=256")
    params = nv.DecodeParams(apply_exif_orientation=False, color_spec=nv.ColorSpec.SRGB,
                             sample_format=nv.SampleFormat.I_RGB)  # RGB for grey files too, as ImageReadMode.RGB

    def decode(blobs: list[bytes], stream: torch.cuda.Stream) -> list[torch.Tensor]:
        images = decoder.decode([nv.CodeStream(b) for b in blobs], params=params, cuda_stream=stream.cuda_stream)
        missing = [i for i, image in enumerate(images) if image is None]
        if missing:
            raise RuntimeError(f"nvImageCodec could not decode {len(missing)} of {len(blobs)} images")
        with torch.cuda.stream(stream):
            # HWC -> CHW, as torchvision decodes
            return [torch.from_dlpack(image.to_dlpack()).permute(2, 0, 1) for image in images]

    return decode


class Busy:
    """bf16 matmuls queued on a stream of their own, a few ahead, until stopped: the device's SMs kept busy."""

    def __init__(self) -> None:
        self.stream = torch.cuda.Stream()
        self.a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        with torch.cuda.stream(self.stream):
            while not self.stop.is_set():
                for _ in range(4):
                    self.a = (self.a @ self.a).clamp_(-1, 1)
                self.stream.synchronize()

    def __enter__(self) -> Busy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def timed(decode: Decode, batches: list[list[bytes]], stream: torch.cuda.Stream) -> dict[str, float]:
    for blobs in batches[:2]:  # warm-up: the decoder's state, buffers, the first kernels
        decode(blobs, stream)
    stream.synchronize()
    images = sum(len(b) for b in batches)
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    for blobs in batches:
        decoded = decode(blobs, stream)
        del decoded
    returned = time.perf_counter() - wall0
    stream.synchronize()
    wall, cpu = time.perf_counter() - wall0, time.thread_time() - cpu0
    n = len(batches)
    return {"images_per_s": round(images / wall), "ms_a_batch": round(1e3 * wall / n, 2),
            "thread_cpu_ms_a_batch": round(1e3 * cpu / n, 2), "returned_ms_a_batch": round(1e3 * returned / n, 2)}


def differences(a: list[torch.Tensor], b: list[torch.Tensor]) -> dict[str, float]:
    worst, mean = 0, 0.0
    for x, y in zip(a, b, strict=True):
        d = (x.int() - y.int()).abs()
        worst, mean = max(worst, int(d.max())), mean + float(d.float().mean()) / len(a)
    return {"max_abs": worst, "mean_abs": round(mean, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--nvimgcodec-path", default=os.environ.get("NVIMGCODEC_PATH", ""))
    parser.add_argument("--out", type=Path, default=Path("engines.json"))
    args = parser.parse_args()
    if args.nvimgcodec_path:
        sys.path.insert(0, args.nvimgcodec_path)
    from autotune.workloads.imagenet import imagenet_folder

    folder = imagenet_folder(os.environ.get("AUTOTUNE_DATA", "data"))
    paths = [p for p, _ in folder.samples[: args.batches * args.batch]]
    blobs = [Path(p).read_bytes() for p in paths]
    batches = [blobs[i: i + args.batch] for i in range(0, len(blobs), args.batch)]
    print(f"{len(blobs)} JPEGs, {sum(map(len, blobs)) / len(blobs) / 1e3:.0f} KB each on average, "
          f"batches of {args.batch}, on {torch.cuda.get_device_name()}", flush=True)
    stream = torch.cuda.Stream()
    engines: dict[str, Callable[[], Decode]] = {
        "torchvision": torchvision_engine,
        "nvimgcodec hw": lambda: nvimgcodec_engine(("HW_GPU_ONLY", "GPU_ONLY")),
        "nvimgcodec cuda": lambda: nvimgcodec_engine(("GPU_ONLY",)),
    }
    rows: list[dict[str, Any]] = []
    reference = torchvision_engine()(batches[0], stream)
    stream.synchronize()
    for name, make in engines.items():
        try:
            decode = make()
            row: dict[str, Any] = {"engine": name, **differences(reference, decode(batches[0], stream))}
            row["idle"] = timed(decode, batches, stream)
            with Busy():
                row["busy"] = timed(decode, batches, stream)
        except Exception as exc:  # noqa: BLE001 - a row that says why, not a probe that stops
            row = {"engine": name, "error": f"{type(exc).__name__}: {exc}"[:300]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "batch": args.batch, "rows": rows},
                                   indent=1))


if __name__ == "__main__":
    main()
