"""tuned_loader and tuned_step read the committed recipe: a matching profile, and none."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from autotune import NoProfileWarning, load_tuned, tuned_loader, tuned_step
from autotune.config import Config
from autotune.loop import DeviceLoader
from autotune.tuned import file as tuned_file
from autotune.workloads import load, resolve


def _write(project: Path, hardware: str, config: Config, lr: float = 0.1) -> None:
    tuned_file.write_profile(
        project / "recipes" / "tiny.tuned.toml",
        "tiny",
        hardware,
        {
            "samples_per_s": 1000.0,
            "baseline_samples_per_s": 100.0,
            "speedup": 10.0,
            "lr": lr,
            "lr_rule": "linear",
            "knobs": tuned_file.config_to_knobs(config),
            "versions": {"torch": torch.__version__},
        },
    )


def _dataset():
    return load(resolve("tiny")).build_dataset(Path("data"))


def test_matching_profile_builds_its_dataloader(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(project, "cpu", Config(batch_size=32, num_workers=2, persistent_workers=True, prefetch_factor=3))
    loader = tuned_loader(_dataset(), recipe="tiny", device="cpu")
    assert isinstance(loader, DataLoader)
    assert (loader.batch_size, loader.num_workers, loader.persistent_workers, loader.prefetch_factor) == (
        32,
        2,
        True,
        3,
    )
    assert len(loader) == 16
    assert (
        "uses batch size 32 (the workload's is 16); its learning rate is 0.1 by the linear rule."
        in capsys.readouterr().err
    )


def test_device_placement_gives_a_device_loader_with_the_same_contract(project: Path) -> None:
    _write(project, "cpu", Config(batch_size=64, placement="device"))
    loader = tuned_loader(_dataset(), recipe="tiny", device="cpu")
    assert isinstance(loader, DeviceLoader)
    assert (loader.batch_size, loader.shuffle, loader.drop_last, len(loader)) == (64, True, False, 8)
    x, y = next(iter(loader))
    assert x.shape == (64, 1, 8, 8) and y.shape == (64,)
    # Workers asked of a loader that runs none: one error, not a DeviceLoader that ignored them.
    with pytest.raises(ValueError, match=r"^tuned_loader: num_workers=2, pin_memory=True cannot apply: tiny's profile "
                                         r"\(placement=device\) keeps the data set on the device, where no "
                                         r"DataLoader workers run; pass placement='stream' as well"):
        tuned_loader(_dataset(), recipe="tiny", device="cpu", num_workers=2, pin_memory=True)
    # What the device-resident loader does anyway is no conflict.
    assert isinstance(tuned_loader(_dataset(), recipe="tiny", device="cpu", num_workers=0, pin_memory=False),
                      DeviceLoader)
    streamed = tuned_loader(_dataset(), recipe="tiny", device="cpu", placement="stream", num_workers=2)
    assert isinstance(streamed, torch.utils.data.DataLoader) and streamed.num_workers == 2


def test_a_data_set_whose_pipeline_cannot_move_to_the_device_names_the_knob_that_keeps_it(project: Path) -> None:
    from torchvision import datasets
    from torchvision import transforms as T

    from autotune.loop.device_normalize import NormalizingLoader
    from autotune.workloads.decode import NotTranslatable

    _write(project, "cpu", Config(batch_size=4, device_normalize=True))
    pipeline = T.Compose([T.ToTensor(), T.Normalize(0.5, 0.2)])
    images = datasets.FakeData(size=8, image_size=(3, 12, 12), transform=pipeline)
    assert isinstance(tuned_loader(images, recipe="tiny", device="cpu"), NormalizingLoader)
    with pytest.raises(NotTranslatable) as info:
        tuned_loader(_dataset(), recipe="tiny", device="cpu")  # tensors in memory: no transform to cut
    assert str(info.value) == (
        "tuned_loader: tiny's profile moves part of the pipeline to the device (bs=4 workers=0 device-normalize), "
        "but this data set's cannot move: the data set has no transform: there is no ToTensor to move to the "
        "device; pass device_normalize=False to keep it in the workers")
    assert isinstance(tuned_loader(_dataset(), recipe="tiny", device="cpu", device_normalize=False), DataLoader)


def test_overrides_win_over_the_profile(project: Path) -> None:
    _write(project, "cpu", Config(batch_size=32))
    loader = tuned_loader(_dataset(), recipe="tiny", device="cpu", batch_size=8, shuffle=False)
    assert loader.batch_size == 8


def test_no_matching_profile_warns_names_the_profiles_and_uses_the_defaults(project: Path) -> None:
    _write(project, "NVIDIA H200", Config(batch_size=1024, placement="device", cuda_graph=True))
    with pytest.warns(
        NoProfileWarning, match=r"has no profile for 'cpu' \(profiles: 'NVIDIA H200'\); using tiny's own defaults"
    ):
        loader = tuned_loader(_dataset(), recipe="tiny", device="cpu")
    assert isinstance(loader, DataLoader) and loader.batch_size == 16 and loader.num_workers == 0


def test_no_tuned_file_at_all_warns_too(project: Path) -> None:
    with pytest.warns(NoProfileWarning, match=r"\(profiles: none\)"):
        tuned = load_tuned("tiny", "cpu")
    assert tuned.profile is None and tuned.lr == 0.05


def test_tuned_step_applies_the_profile_to_the_users_model(project: Path) -> None:
    _write(project, "cpu", Config(batch_size=32, amp="bf16"), lr=0.1)
    workload = load(resolve("tiny"))
    model = workload.build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=load_tuned("tiny", "cpu").lr)
    step = tuned_step(model, torch.nn.CrossEntropyLoss(), optimizer, recipe="tiny", device="cpu")
    assert step.config.amp == "bf16" and step.amp_dtype is torch.bfloat16
    before = [p.detach().clone() for p in model.parameters()]
    loss = step(torch.rand(32, 1, 8, 8), torch.randint(0, 4, (32,)))
    assert loss.shape == () and torch.isfinite(loss)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_tuned_step_passes_the_hooks_and_turns_the_profiles_graph_off_when_asked(project: Path) -> None:
    _write(project, "cpu", Config(batch_size=32, cuda_graph=True))
    model = load(resolve("tiny")).build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = tuned_step(model, torch.nn.CrossEntropyLoss(), optimizer, recipe="tiny", device="cpu",
                      clip_grad_norm=1.0, accumulate=2, cuda_graph=False)
    assert (step.clip_grad_norm, step.accumulate, step.config.cuda_graph, step.use_graph) == (1.0, 2, False, False)
    graphed = tuned_step(model, torch.nn.CrossEntropyLoss(), optimizer, recipe="tiny", device="cpu")
    assert graphed.graph_reason == "cuda_graph needs a CUDA device, but the step runs on cpu"


def test_tuned_step_hands_its_keywords_to_the_step_as_one_options_object(project: Path) -> None:
    from autotune.loop import StepOptions

    _write(project, "cpu", Config(batch_size=32))
    model = load(resolve("tiny")).build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = tuned_step(model, torch.nn.CrossEntropyLoss(), optimizer, recipe="tiny", device="cpu",
                      clip_grad_norm=1.0, accumulate=4, set_cudnn_benchmark=False)
    assert step.options == StepOptions(clip_grad_norm=1.0, accumulate=4, set_cudnn_benchmark=False)
    # An options object travels whole; a keyword given beside it wins.
    shared = StepOptions(clip_grad_norm=2.0, accumulate=2)
    again = tuned_step(model, torch.nn.CrossEntropyLoss(), optimizer, recipe="tiny", device="cpu", options=shared)
    assert again.options is shared
    assert tuned_step(model, torch.nn.CrossEntropyLoss(), optimizer, recipe="tiny", device="cpu", options=shared,
                      accumulate=8).options == StepOptions(clip_grad_norm=2.0, accumulate=8)


def test_an_unknown_keyword_to_tuned_step_is_a_type_error_naming_the_step_options(project: Path) -> None:
    _write(project, "cpu", Config(batch_size=32))
    model = torch.nn.Linear(2, 2)
    with pytest.raises(TypeError, match=r"^tuned_step\(\) got an unexpected keyword argument 'accumulation'; the step "
                                        r"options are clip_grad_norm, accumulate, after_update, "):
        tuned_step(model, torch.nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=0.1), recipe="tiny",
                   device="cpu", accumulation=4)


def _next_line() -> int:
    """The line after the caller's: where the call it precedes is."""
    import inspect

    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno + 1


def test_the_no_profile_warning_points_at_the_users_own_call(project: Path) -> None:
    """Whether the user calls load_tuned or tuned_loader/tuned_step (which call it), the warning names their line."""
    model = torch.nn.Linear(2, 2)
    with pytest.warns(NoProfileWarning) as direct:
        line = _next_line()
        load_tuned("tiny", "cpu")
    assert (direct[0].filename, direct[0].lineno) == (__file__, line)
    with pytest.warns(NoProfileWarning) as through:
        line = _next_line()
        tuned_loader(_dataset(), recipe="tiny", device="cpu")
    assert (through[0].filename, through[0].lineno) == (__file__, line)
    with pytest.warns(NoProfileWarning) as stepped:
        line = _next_line()
        tuned_step(model, torch.nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=0.1), recipe="tiny", device="cpu")
    assert (stepped[0].filename, stepped[0].lineno) == (__file__, line)


@pytest.mark.parametrize(
    ("hooks", "builtin", "message"),
    [
        ({"accumulate": 0}, ValueError,
         "`accumulate >= 1` (micro-batches per update, an int) must hold, but got accumulate=0."),
        ({"clip_grad_norm": -1}, ValueError,
         "`clip_grad_norm > 0` (a finite number, or None for no clipping) must hold, but got clip_grad_norm=-1."),
        ({"after_update": 5}, TypeError,
         "after_update must be a callable taking no arguments, but got after_update=5."),
    ],
)
def test_a_hook_tuned_step_cannot_take_is_an_autotune_error_naming_value_and_rule(
    project: Path, hooks: dict, builtin: type, message: str
) -> None:
    """docs/api.md: every deliberate error derives from AutotuneError, and keeps the builtin it refines."""
    from autotune.errors import AutotuneError

    _write(project, "cpu", Config(batch_size=16))
    model = torch.nn.Linear(2, 2)
    with pytest.raises(AutotuneError, match=f"^{re.escape(message)}$") as raised:
        tuned_step(model, torch.nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=0.1), recipe="tiny",
                   device="cpu", **hooks)
    assert isinstance(raised.value, builtin)
