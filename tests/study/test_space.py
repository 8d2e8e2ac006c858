"""The knob space: conditions, domains, fixes, and what suggest() asks the study for."""

from __future__ import annotations

import dataclasses

import optuna
import pytest
import torch

from autotune.config import Config
from autotune.knobs import BUSY_SHARE, DataFacts, Machine, SpaceError
from autotune.study.space.domains import build_space, parse_fix

GPU = Machine("NVIDIA H200", cuda=True, cpu_share=16, amp_dtypes=("bf16", "fp16"), memory_bytes=140 * 2**30)
CPU = Machine("cpu", cuda=False, cpu_share=2, amp_dtypes=("bf16",), memory_bytes=24 * 2**30)
MNIST = DataFacts(
    size=60_000,
    sample_bytes=28 * 28 * 4 + 8,
    image_4d=True,
    static_shapes=True,
    deterministic=True,
    device_dataset=False,
)


def test_gpu_space_has_every_knob() -> None:
    facts = dataclasses.replace(MNIST, gpu_decode="decode JPEG on the device, then ...", pad_refused="",
                                bucket_refused="", device_normalize="the workers hand over uint8 pixels; ...",
                                device_normalize_refused="")
    space = build_space(128, GPU, facts)
    assert space.excluded == {}
    assert space.domains["decode"] == ("cpu", "gpu")
    assert space.domains["bucketing"] == (False, True)
    assert space.domains["pad_multiple"] == (0, 8, 64)
    assert space.domains["batch_size"] == (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
    assert space.domains["num_workers"] == tuple(range(17))
    assert space.domains["prefetch_factor"] == tuple(range(1, 9))
    assert space.domains["amp"] == ("off", "bf16", "fp16")
    assert space.domains["placement"] == ("stream", "device")
    assert space.domains["compile"] == ("off", "default", "max-autotune-no-cudagraphs")


def test_cpu_leaves_out_cuda_knobs_with_reasons() -> None:
    space = build_space(128, CPU, MNIST)
    assert space.excluded == {
        "pin_memory": "needs CUDA", "cudnn_benchmark": "needs CUDA", "cuda_graph": "needs CUDA", "decode": "needs CUDA",
        "device_normalize": "needs CUDA", "compile": "needs CUDA", "decode_share": "needs CUDA",
        "bucketing": "the workload's sample_lengths was not read",
        "pad_multiple": "the workload's collate_fn was not read",
    }
    assert space.domains["pin_memory"] == (False,)
    assert space.domains["amp"] == ("off", "bf16")
    assert space.domains["num_workers"] == (0, 1, 2)


@pytest.mark.parametrize(
    "facts,knob,reason",
    [
        (DataFacts(1000, 40, False, True, True, False), "channels_last", "input is not a 4-D image batch"),
        (
            DataFacts(1000, 40, True, False, True, False),
            "cuda_graph",
            "batches differ in shape (from sample to sample); a graph replays one shape",
        ),
        (
            DataFacts(1000, 40, True, True, False, False),
            "placement",
            "the transform is random and the workload gives no device_augment",
        ),
        (
            DataFacts(10**9, 4000, True, True, True, False),
            "placement",
            "the data set (3725.3 GiB) exceeds 25% of device memory",
        ),
    ],
)
def test_knobs_that_cannot_apply_are_left_out(facts: DataFacts, knob: str, reason: str) -> None:
    space = build_space(16, GPU, facts)
    assert space.excluded[knob] == reason
    assert len(space.domains[knob]) == 1


def test_random_transform_with_device_augment_keeps_device_placement() -> None:
    space = build_space(128, GPU, DataFacts(50_000, 3 * 32 * 32 * 4, True, True, False, True))
    assert "placement" not in space.excluded


def test_batch_sizes_stay_below_a_quarter_of_the_data_set() -> None:
    space = build_space(16, CPU, DataFacts(512, 264, True, True, True, False))
    assert space.domains["batch_size"] == (4, 8, 16, 32, 64, 128)


def _suggested(space, params: dict) -> tuple[Config, set[str]]:
    trial = optuna.trial.FixedTrial(params)
    return space.suggest(trial), set(trial.params)


def test_loader_knobs_are_asked_for_only_when_they_apply() -> None:
    space = build_space(128, GPU, MNIST)
    flags = dict(cudnn_benchmark=False, channels_last=False, amp="off", cuda_graph=True, compile="off")
    config, asked = _suggested(space, dict(placement="device", batch_size=512, **flags))
    assert config == Config(batch_size=512, placement="device", cuda_graph=True)
    assert asked == {"placement", "batch_size", *flags}
    config, asked = _suggested(space, dict(placement="stream", batch_size=128, num_workers=0, pin_memory=True, **flags))
    assert "persistent_workers" not in asked and "prefetch_factor" not in asked
    config, asked = _suggested(
        space,
        dict(
            placement="stream",
            batch_size=128,
            num_workers=4,
            pin_memory=True,
            persistent_workers=True,
            prefetch_factor=3,
            **flags,
        ),
    )
    assert config.persistent_workers and config.prefetch_factor == 3


def test_params_round_trip_through_suggest() -> None:
    space = build_space(128, GPU, MNIST)
    config = Config(
        batch_size=1024,
        num_workers=8,
        pin_memory=True,
        persistent_workers=True,
        prefetch_factor=2,
        cudnn_benchmark=True,
    )
    params = space.params(config)
    assert params is not None and _suggested(space, params)[0] == config
    assert space.params(Config(batch_size=100)) is None  # 100 is not in the domain


def test_fixes_narrow_the_space() -> None:
    space = build_space(128, GPU, MNIST, {"batch_size": (128,), "num_workers": (2, 3, 4)})
    assert space.domains["batch_size"] == (128,)
    assert space.domains["num_workers"] == (2, 3, 4)
    config, asked = _suggested(
        space,
        dict(
            placement="stream",
            num_workers=3,
            pin_memory=False,
            persistent_workers=False,
            prefetch_factor=2,
            cudnn_benchmark=False,
            channels_last=False,
            amp="off",
            cuda_graph=False,
            compile="off",
        ),
    )
    assert config.batch_size == 128 and "batch_size" not in asked


@pytest.mark.parametrize(
    "text,expected",
    [
        ("batch_size=128", ("batch_size", (128,))),
        ("num_workers=2..4", ("num_workers", (2, 3, 4))),
        ("batch_size=64..256", ("batch_size", (64, 128, 256))),
        ("amp=off,bf16", ("amp", ("off", "bf16"))),
        ("cuda_graph=on", ("cuda_graph", (True,))),
        ("placement=device", ("placement", ("device",))),
    ],
)
def test_parse_fix(text: str, expected: tuple) -> None:
    assert parse_fix(text) == expected


@pytest.mark.parametrize(
    "text,message",
    [
        ("batchsize=128", "--fix names unknown knob 'batchsize'; the knobs are: placement, batch_size"),
        ("amp=fp32", "--fix amp: expected one of off, bf16, fp16, but got 'fp32'."),
        ("num_workers=4..2", "--fix num_workers: `lo <= hi` must hold, but got (low=4, high=2)."),
        ("cuda_graph=maybe", "--fix cuda_graph: expected on/off, but got 'maybe'."),
        ("batch_size", "--fix must look like knob=value"),
    ],
)
def test_parse_fix_rejects_bad_input(text: str, message: str) -> None:
    with pytest.raises(SpaceError, match=__import__("re").escape(message)):
        parse_fix(text)


def test_fix_outside_the_domain_names_the_domain_and_why() -> None:
    with pytest.raises(
        SpaceError,
        match=r"--fix cuda_graph: on is outside its domain \{off\} \(cuda_graph is left out here: needs CUDA\)\.",
    ):
        build_space(128, CPU, MNIST, {"cuda_graph": (True,)})
    with pytest.raises(SpaceError, match=r"--fix batch_size: 100 is outside its domain \{32, 64, 128"):
        build_space(128, GPU, MNIST, {"batch_size": (100,)})


class _Clocks:
    """The two clocks `load_cpu_share` reads (`time.process_time`, `time.perf_counter`), moved by the loads only.

    On the real clocks a CPU-bound load reads as busy only while its process has a core to itself: on a 2-core
    machine beside two busy loops, 5 ms loads read 0.33-0.36 of a core, and the 16 ms try below 0.31-0.36.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from types import SimpleNamespace

        from autotune.trial import facts

        self.cpu = self.wall = 0.0
        monkeypatch.setattr(facts, "time", SimpleNamespace(process_time=lambda: self.cpu,
                                                            perf_counter=lambda: self.wall))

    def busy(self, seconds: float) -> None:
        self.cpu += seconds
        self.wall += seconds

    def wait(self, seconds: float) -> None:
        self.wall += seconds


@pytest.mark.alone  # CPU time over wall time, of loads that sleep
def test_workers_may_outnumber_the_cores_when_loading_a_sample_mostly_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from autotune.trial.facts import load_cpu_share

    class Waiting(torch.utils.data.Dataset):  # a network file system: each sample waits 5 ms
        def __len__(self) -> int:
            return 64

        def __getitem__(self, i: int) -> int:
            time.sleep(0.005)
            return i

    # A sleeping load uses next to no CPU, on the real clocks however busy the host: a load can only lower it.
    waiting = load_cpu_share(Waiting())
    assert waiting < 0.2, waiting
    clocks = _Clocks(monkeypatch)

    class Busy(Waiting):  # decoding: each sample keeps the core busy for 5 ms
        def __getitem__(self, i: int) -> int:
            clocks.busy(0.005)
            return i

    busy = load_cpu_share(Busy())
    assert busy >= BUSY_SHARE, busy
    facts = dataclasses.replace(MNIST, load_cpu_share=waiting)
    assert max(build_space(128, GPU, facts).domains["num_workers"]) == 4 * GPU.cpu_share
    assert max(build_space(128, GPU, dataclasses.replace(MNIST, load_cpu_share=busy)).domains["num_workers"]) == 16


def test_a_load_share_that_was_disturbed_is_measured_again_on_other_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU-bound data set whose first timed loads were descheduled (wall time without CPU): the first try alone
    calls it waiting, and would let num_workers range to 4x the cores."""
    from autotune.trial.facts import load_cpu_share

    clocks = _Clocks(monkeypatch)

    class Descheduled:
        def __init__(self) -> None:
            self.calls = 0

        def __len__(self) -> int:
            return 1000

        def __getitem__(self, i: int) -> int:
            self.calls += 1
            if self.calls <= 8:
                clocks.wait(0.005)  # the first try's 8 loads: this process was not running
            clocks.busy(0.002)
            return i

    assert load_cpu_share(Descheduled(), tries=1) < BUSY_SHARE
    data = Descheduled()
    assert load_cpu_share(data) >= BUSY_SHARE and data.calls == 16  # the second try showed a busy core, and ended it


def test_a_cpu_without_bf16_instructions_leaves_amp_out_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.knobs import cpu_bf16_missing, detect_machine
    from autotune.study.space.seeds import seed_configs
    from autotune.workloads import load, resolve

    why = ("this CPU has no bf16 instructions (AVX-512 or AMX; torch reads its vector instructions as AVX2): bf16 "
           "would be emulated, far slower than fp32; AUTOTUNE_CPU_BF16=1 offers it anyway")
    plain = Machine("cpu", False, 2, (), 2**34, amp_missing=why)
    space = build_space(128, plain, MNIST)
    assert (space.domains["amp"], space.excluded["amp"]) == (("off",), why)
    assert all(c.amp == "off" for c in seed_configs(load(resolve("mnist_cnn")), plain, space))
    if torch.cuda.is_available():
        return  # a GPU machine's amp is the GPU's
    monkeypatch.setenv("AUTOTUNE_CPU_BF16", "0")
    assert detect_machine().amp_missing == "left out by AUTOTUNE_CPU_BF16=0"
    monkeypatch.setenv("AUTOTUNE_CPU_BF16", "yes")
    with pytest.raises(SpaceError, match=r"^AUTOTUNE_CPU_BF16 must be 1 \(offer bf16 on this CPU\) or 0 \(leave it "
                                         r"out\), but got 'yes'\.$"):
        detect_machine()
    monkeypatch.delenv("AUTOTUNE_CPU_BF16")
    # This host, as torch's oneDNN sees it: bf16 offered exactly where its instructions are.
    here = detect_machine()
    has = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    assert (here.amp_dtypes, here.amp_missing == "") == ((("bf16",), True) if has else ((), False))
    assert cpu_bf16_missing() == here.amp_missing
