"""Hybrid decode on the CPU: a share of each batch decoded on the device path, the rest by the host pipeline."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import optuna
import pytest
import torch
from torch.utils.data import DataLoader
from torchvision import datasets
from torchvision import transforms as T
from torchvision.io import encode_jpeg

from autotune.config import DECODE_SHARES, Config
from autotune.knobs import DataFacts, Machine, SpaceError
from autotune.loop import device_decode
from autotune.loop.device_decode import decoding_loader
from autotune.loop.hybrid_decode import on_device
from autotune.parity.check import ParityCheck
from autotune.parity.inputs import judge as judge_inputs
from autotune.parity.numerics import NumericsVerdict, label
from autotune.parity.numerics import judge as judge_numerics
from autotune.parity.run import ParityRun
from autotune.parity.verdict import changes_math
from autotune.study.space.domains import build_space, parse_fix
from autotune.tuned.schema import SCHEMA_VERSION, validate

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
GPU = Machine("NVIDIA H200", cuda=True, cpu_share=16, amp_dtypes=("bf16", "fp16"), memory_bytes=140 * 2**30)
JPEGS = DataFacts(size=51_200, sample_bytes=3 * 224 * 224 * 4 + 8, image_4d=True, static_shapes=True,
                  deterministic=False, device_dataset=False, gpu_decode="decode JPEG on the device, then ...")


def jpeg_folder(root: Path, n: int = 12) -> Path:
    g = torch.Generator().manual_seed(0)
    for cls in range(2):
        (root / f"class{cls}").mkdir(parents=True, exist_ok=True)
        for i in range(n // 2):
            image = (torch.rand(3, 48, 40, generator=g) * 255).to(torch.uint8)
            (root / f"class{cls}" / f"{i}.JPEG").write_bytes(encode_jpeg(image, quality=90).numpy().tobytes())
    return root


def test_the_share_is_a_function_of_the_sample_and_holds_over_the_data_set() -> None:
    for share in DECODE_SHARES[1:]:
        assert sum(on_device(i, share) for i in range(20_000)) / 20_000 == pytest.approx(share, abs=0.01)
    assert [on_device(i, 0.5) for i in range(6)] == [on_device(i, 0.5) for i in range(6)]


def test_a_split_batch_holds_both_halves_with_their_own_targets_in_the_cpu_path_s_order(tmp_path: Path) -> None:
    tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    folder = datasets.ImageFolder(str(jpeg_folder(tmp_path)), transform=tf)
    config = Config(batch_size=4, decode="gpu", decode_share=0.5, channels_last=True)
    torch.manual_seed(0)
    order = [i.tolist() for i in DataLoader(range(len(folder)), batch_size=4, shuffle=True)]
    torch.manual_seed(0)
    loader = decoding_loader(folder, config, shuffle=True, drop_last=False, device=torch.device("cpu"))
    batches = list(loader)
    assert len(batches) == len(order) == 3 and loader.dataset is folder
    for (x, y), indices in zip(batches, order):
        host = [i for i in indices if not on_device(i, 0.5)]
        device = [i for i in indices if on_device(i, 0.5)]
        assert y.tolist() == [folder.targets[i] for i in host + device]  # host-decoded first
        assert x.shape == (4, 3, 32, 32) and x.dtype == torch.float32
        assert x.is_contiguous(memory_format=torch.channels_last)
    assert any(on_device(i, 0.5) for b in order for i in b) and not all(on_device(i, 0.5) for b in order for i in b)


def test_the_host_half_hands_over_uint8_pixels_and_makes_the_pipeline_s_own_images(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    folder = datasets.ImageFolder(str(jpeg_folder(tmp_path)), transform=tf)
    config = Config(batch_size=4, decode="gpu", decode_share=0.5)

    def batches() -> tuple[object, list[torch.Tensor]]:
        torch.manual_seed(0)
        loader = decoding_loader(folder, config, shuffle=True, drop_last=False, device=torch.device("cpu"))
        return loader, [x for x, _ in loader]

    loader, cut = batches()
    host_samples = loader.loader.dataset.dataset  # SplitSamples' own: the workers' copy of the data set
    assert loader.host_cut is not None and host_samples is not folder
    assert [type(t).__name__ for t in host_samples.transform.transforms][-1] == "PILToTensor"
    assert host_samples[0][0].dtype == torch.uint8 and folder.transform is tf  # the user's data set is untouched
    monkeypatch.setattr(device_decode, "uint8_host", lambda dataset: None)  # the whole pipeline in the workers
    whole_loader, whole = batches()
    assert whole_loader.host_cut is None
    assert all(torch.equal(a, b) for a, b in zip(cut, whole, strict=True))  # to the bit on a CPU


def test_a_pipeline_the_device_cannot_finish_leaves_the_host_half_whole(tmp_path: Path) -> None:
    tf = T.Compose([T.RandomResizedCrop(32), T.ToTensor(), T.Lambda(lambda x: x * 2)])  # a tail of the user's own
    folder = datasets.ImageFolder(str(jpeg_folder(tmp_path)), transform=tf)
    assert device_decode.uint8_host(folder) is None
    decode_tf = T.Compose([T.RandomResizedCrop(32), T.ToTensor()])
    folder = datasets.ImageFolder(str(jpeg_folder(tmp_path)), transform=decode_tf)
    assert device_decode.uint8_host(folder) is not None


def test_the_knob_applies_with_device_decode_only() -> None:
    space = build_space(256, GPU, JPEGS)
    assert space.domains["decode_share"] == (1.0, 0.75, 0.5, 0.25, 0.125)
    hybrid = Config(batch_size=256, num_workers=15, prefetch_factor=2, decode="gpu", decode_share=0.5)
    params = space.params(hybrid)
    assert params is not None and params["decode_share"] == 0.5
    assert space.suggest(optuna.trial.FixedTrial(params)) == hybrid
    assert space.normalise(dataclasses.replace(hybrid, decode="cpu")).decode_share == 1.0
    assert hybrid.describe() == "bs=256 workers=15 gpu-decode 50% prefetch=2"
    assert parse_fix("decode_share=50%") == ("decode_share", (0.5,))
    no_decode = build_space(256, GPU, dataclasses.replace(JPEGS, gpu_decode="", gpu_decode_refused="no JPEGs"))
    assert no_decode.excluded["decode_share"] == "no JPEGs"
    with pytest.raises(SpaceError, match=r"--fix decode_share: expected a share such as 0.5 or 50%, but got 'half'"):
        parse_fix("decode_share=half")


def test_it_is_judged_by_the_inputs_check_as_decode_is_and_the_tuned_file_takes_it_or_its_absence() -> None:
    base = Config(batch_size=256)
    assert changes_math(base, Config(batch_size=256, decode="gpu", decode_share=0.5)) == ["decode", "decode_share"]
    knobs = dict(batch_size=256, num_workers=15, pin_memory=True, persistent_workers=True, prefetch_factor=4,
                 cudnn_benchmark=True, channels_last=True, amp="bf16", cuda_graph=False, placement="stream",
                 decode="gpu")

    def profile(**more: object) -> dict:
        return {"schema": SCHEMA_VERSION, "recipe": "imagenet_resnet50", "profiles": {"NVIDIA H200": {
            "samples_per_s": 4000.0, "baseline_samples_per_s": 1000.0, "speedup": 4.0, "cpu_share": 16,
            "knobs": {**knobs, **more}, "versions": {}}}}

    assert validate(profile(decode_share=0.5)) == [] and validate(profile()) == []
    assert validate(profile(decode_share=1.5)) == ["profiles.'NVIDIA H200'.knobs.decode_share must be in (0, 1], "
                                                   "but got 1.5"]


def inconclusive_run(config: Config, lr: float, samples: int) -> ParityRun:
    """Random labels: every run, the baseline's included, learns 0.4% of its initial loss 2.0."""
    return ParityRun(config.batch_size, lr, 2.0, 1.992, (samples,), (1.992,), True, 0.0)


def test_a_hybrid_config_with_compile_and_amp_passes_once_its_images_and_its_gradients_match() -> None:
    hybrid = Config(batch_size=16, decode="gpu", decode_share=0.5, amp="bf16", compile="default")
    numerics: list[Config] = []

    def check_numerics(config: Config) -> NumericsVerdict:
        numerics.append(config)
        return judge_numerics({"error": 0.1, "noise": 1.0, "signal": 0.5, "finite": True, "batches": 8,
                               "batch_size": 16, "seconds": 2.0}, label(config))

    gate = ParityCheck(
        Config(batch_size=16), lambda c: 0.05, inconclusive_run, [hybrid], lambda line: None,
        check_inputs=lambda c: judge_inputs({"host_to_host": 1.0, "host_to_device": 0.9, "images": 64, "draws": 32,
                                             "seconds": 3.0}),
        check_numerics=check_numerics,
    )
    assert gate.select([hybrid], want=1, max_runs=1) == [hybrid] and numerics == [hybrid]
    verdict = gate.verdicts[hybrid]
    # Judged by its images and its gradients, with no training run: conclusively, whatever the baseline learns.
    assert (verdict.inputs_passed, verdict.numerics_passed, verdict.conclusive) == (True, True, True)


def test_seeds_split_the_decoding_where_the_device_can_decode(project: Path) -> None:
    from autotune.study.space.seeds import seed_configs
    from autotune.workloads import load, resolve

    seeds = seed_configs(load(resolve("tiny")), GPU, build_space(16, GPU, dataclasses.replace(JPEGS, size=4096)))
    assert [c.describe() for c in seeds if c.decode_share < 1] == [
        "bs=16 workers=15 gpu-decode 50% pinned persistent prefetch=4 cudnn.benchmark channels_last graph bf16 "
        "compile=default",
        "bs=16 workers=15 gpu-decode 50% pinned persistent prefetch=4 cudnn.benchmark channels_last bf16"]


@pytest.mark.gpu
def test_gpu_hybrid_batches_come_off_the_side_stream_whole(tmp_path: Path) -> None:
    tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    folder = datasets.ImageFolder(str(jpeg_folder(tmp_path, n=64)), transform=tf)
    config = Config(batch_size=16, decode="gpu", decode_share=0.5, num_workers=2, pin_memory=True,
                    channels_last=True)
    torch.manual_seed(0)
    order = [i.tolist() for i in DataLoader(range(len(folder)), batch_size=16, shuffle=True)]
    torch.manual_seed(0)
    batches = list(decoding_loader(folder, config, shuffle=True, drop_last=False, device=torch.device("cuda")))
    for (x, y), indices in zip(batches, order):
        host = [i for i in indices if not on_device(i, 0.5)]
        device = [i for i in indices if on_device(i, 0.5)]
        assert x.is_cuda and x.shape == (16, 3, 32, 32) and bool(torch.isfinite(x).all())
        assert y.tolist() == [folder.targets[i] for i in host + device]
