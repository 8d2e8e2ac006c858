"""What a profile means under torchrun, checked in one process: each rank's sampler, the global rate, the cores."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, SequentialSampler
from torch.utils.data.distributed import DistributedSampler

from autotune import load_tuned, tuned_loader
from autotune.config import Config
from autotune.loop import DeviceLoader
from autotune.tuned import distributed
from autotune.tuned import file as tuned_file
from autotune.workloads import load, resolve


def _write(project: Path, config: Config, cpu_share: int = 1) -> None:
    tuned_file.write_profile(
        project / "recipes" / "tiny.tuned.toml",
        "tiny",
        "cpu",
        {
            "samples_per_s": 1000.0,
            "baseline_samples_per_s": 100.0,
            "speedup": 10.0,
            "lr": 0.1,
            "lr_rule": "sqrt",
            "cpu_share": cpu_share,
            "knobs": tuned_file.config_to_knobs(config),
            "versions": {"torch": torch.__version__},
        },
    )


@pytest.fixture
def rank1of2(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as rank 1 of 2, one host: what torchrun's second process sees."""
    monkeypatch.setattr(distributed, "world", lambda: (1, 2))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")


def _dataset():
    return load(resolve("tiny")).build_dataset(Path("data"))


def test_a_rank_gets_a_distributed_sampler_of_its_own(project: Path, rank1of2: None) -> None:
    _write(project, Config(batch_size=32))
    loader = tuned_loader(_dataset(), recipe="tiny", device="cpu")
    assert isinstance(loader, DataLoader) and isinstance(loader.sampler, DistributedSampler)
    sampler = loader.sampler
    assert (sampler.rank, sampler.num_replicas, sampler.shuffle, len(loader)) == (1, 2, True, 8)


def test_the_device_resident_loader_follows_the_ranks_sampler(project: Path, rank1of2: None) -> None:
    _write(project, Config(batch_size=32, placement="device"))
    loader = tuned_loader(_dataset(), recipe="tiny", device="cpu", shuffle=False)
    assert isinstance(loader, DeviceLoader) and isinstance(loader.sampler, DistributedSampler)
    assert len(loader) == 8
    x, y = next(iter(loader))
    dataset = _dataset()
    assert torch.equal(y, torch.tensor([dataset[i][1] for i in range(1, 64, 2)]))  # rank 1: every other sample


def test_a_users_distributed_sampler_is_kept_and_the_loader_does_not_shuffle_too(project: Path,
                                                                                 rank1of2: None) -> None:
    _write(project, Config(batch_size=32, placement="device"))
    dataset = _dataset()
    mine = DistributedSampler(dataset, num_replicas=2, rank=1, seed=7)
    assert tuned_loader(dataset, recipe="tiny", device="cpu", sampler=mine).sampler is mine
    with pytest.raises(ValueError, match=r"sampler= and shuffle=True both choose the order"):
        tuned_loader(dataset, recipe="tiny", device="cpu", sampler=mine, shuffle=True)


@pytest.mark.parametrize(
    ("config", "kwargs", "match"),
    [
        (Config(batch_size=32), {"sampler": "sequential"},
         r"sampler=SequentialSampler under torch.distributed \(rank 1 of 2\) gives every rank the same samples"),
        (Config(batch_size=32, bucketing=True), {},
         r"bucketing=True, which draws its batches over the whole data set, under torch.distributed \(rank 1 of 2\)"),
    ],
)
def test_an_order_that_cannot_be_split_by_rank_is_one_error(project: Path, rank1of2: None, config: Config,
                                                            kwargs: dict, match: str) -> None:
    _write(project, config)
    dataset = _dataset()
    if kwargs.get("sampler") == "sequential":
        kwargs = {"sampler": SequentialSampler(dataset), "shuffle": False}
    with pytest.raises(ValueError, match=match):
        tuned_loader(dataset, recipe="tiny", device="cpu", **kwargs)


def test_the_rate_follows_the_global_batch_by_the_profiles_rule(project: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    _write(project, Config(batch_size=32))
    tuned = load_tuned("tiny", "cpu", world_size=4)
    assert (tuned.lr, tuned.config.batch_size, tuned.global_batch_size) == (pytest.approx(0.2), 32, 128)
    assert ("uses batch size 32 per process, 128 over 4 processes (the workload's is 16); its learning rate is 0.2 "
            "by the sqrt rule.") in capsys.readouterr().err
    assert load_tuned("tiny", "cpu").lr == 0.1
    with pytest.raises(ValueError, match=r"`world_size >= 1` .* but got world_size=0\."):
        load_tuned("tiny", "cpu", world_size=0)


def test_a_profile_tuned_with_more_cores_than_a_rank_has_warns_with_the_numbers(
    project: Path, rank1of2: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(8)))
    _write(project, Config(batch_size=32, num_workers=6), cpu_share=8)
    with pytest.warns(distributed.CpuShareWarning) as caught:
        load_tuned("tiny", "cpu")
    assert caught[0].filename == __file__, "the warning points at the user's call of load_tuned"
    assert str(caught[0].message) == (
        "tiny's profile for cpu was tuned with 8 CPU cores, but this host's 8 cores are shared by 2 processes (4 "
        "each): its settings (num_workers=6) were measured with cores these processes do not have. Tune one "
        "process's share with `autotune search --recipe tiny --cpus 4`."
    )
    _write(project, Config(batch_size=32), cpu_share=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_tuned("tiny", "cpu")  # 4 cores tuned, 4 per process: no warning
