"""The step's hooks (clipping, accumulation, after_update) and LR schedulers, eager on the CPU and under a graph.

The CPU tests run the eager step and the learning-rate logic the graphed step shares (``autotune.loop.lr``);
the `gpu` ones run the same checks against a captured graph.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch import nn

from autotune.config import Config
from autotune.loop.hooks import device_lrs, graph_off_reason
from autotune.loop.lr import DeviceLr, reads_tensor_lr_under_graph
from autotune.loop.step import GraphOffWarning, RecaptureWarning, Step

STEPS = 30
ZERO_AFTER = 20  # the LambdaLR below sets the rate to 0 from this step on


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _batches(n: int, size: int = 32) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(size, 8, generator=g), torch.randint(0, 4, (size,), generator=g)) for _ in range(n)]


def _optimizer(name: str, model: nn.Module) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return torch.optim.Adam(model.parameters(), lr=0.01)


def _weights(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b))


def _close(a: list[torch.Tensor], b: list[torch.Tensor], rtol: float = 1e-5, atol: float = 1e-6) -> None:
    for x, y in zip(a, b):
        torch.testing.assert_close(x.cpu(), y.cpu(), rtol=rtol, atol=atol)


def test_clipping_equals_clip_grad_norm_by_hand() -> None:
    ours, theirs = _model(), _model()
    step = Step(ours, nn.CrossEntropyLoss(), torch.optim.SGD(ours.parameters(), lr=0.5), Config(batch_size=32),
                torch.device("cpu"), clip_grad_norm=0.05)
    optimizer = torch.optim.SGD(theirs.parameters(), lr=0.5)
    for x, y in _batches(5):
        step(x, y)
        optimizer.zero_grad()
        nn.CrossEntropyLoss()(theirs(x), y).backward()
        norm = torch.nn.utils.clip_grad_norm_(theirs.parameters(), 0.05)
        optimizer.step()
        assert step.grad_norm is not None and float(norm) > 0.05  # the clip did cut
        torch.testing.assert_close(step.grad_norm, norm, rtol=0, atol=0)
    _close(_weights(ours), _weights(theirs), rtol=0, atol=0)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_accumulating_four_micro_batches_equals_one_batch_four_times_as_large(optimizer: str) -> None:
    micro, whole = _model(), _model()
    cpu = torch.device("cpu")
    stepped = Step(micro, nn.CrossEntropyLoss(), _optimizer(optimizer, micro), Config(batch_size=8), cpu,
                   accumulate=4, clip_grad_norm=1.0)
    one = Step(whole, nn.CrossEntropyLoss(), _optimizer(optimizer, whole), Config(batch_size=32), cpu,
               clip_grad_norm=1.0)
    for x, y in _batches(3):
        start = _weights(micro)
        for i in range(4):
            stepped(x[8 * i : 8 * i + 8], y[8 * i : 8 * i + 8])
            assert _same(_weights(micro), start) == (i < 3)  # the update runs on the 4th call only
        one(x, y)
        _close(_weights(micro), _weights(whole))


def test_after_update_runs_once_per_update_as_an_ema_would() -> None:
    model = _model()
    ema = _weights(model)
    calls = []

    def update_ema() -> None:
        calls.append(1)
        torch._foreach_lerp_(ema, [p.detach() for p in model.parameters()], 0.5)

    step = Step(model, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.1), Config(batch_size=16),
                torch.device("cpu"), accumulate=2, after_update=update_ema)
    expected = _weights(model)
    for i, (x, y) in enumerate(_batches(6, size=16)):
        step(x, y)
        assert len(calls) == (i + 1) // 2
    # Replayed by hand: the EMA of the weights after each of the three updates.
    hand = _model()
    optimizer = torch.optim.SGD(hand.parameters(), lr=0.1)
    batches = _batches(6, size=16)
    for i in range(0, 6, 2):
        optimizer.zero_grad()
        for x, y in batches[i : i + 2]:
            (nn.CrossEntropyLoss()(hand(x), y) / 2).backward()
        optimizer.step()
        torch._foreach_lerp_(expected, [p.detach() for p in hand.parameters()], 0.5)
    _close(ema, expected)


def _lambda_run(optimizer: str, device: str, graph: bool, tensor_lr: bool | None) -> list[list[torch.Tensor]]:
    """The weights after each of STEPS steps under a LambdaLR that sets the rate to 0 after ZERO_AFTER steps."""
    model = _model()
    opt = _optimizer(optimizer, model)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 1.0 if epoch < ZERO_AFTER else 0.0)
    step = Step(model, nn.CrossEntropyLoss(), opt, Config(batch_size=32, cuda_graph=graph), torch.device(device),
                tensor_lr=tensor_lr)
    history = []
    for x, y in _batches(STEPS):
        step(x, y)
        scheduler.step()
        history.append(_weights(model))
    return history


def _assert_stops_after_zero(history: list[list[torch.Tensor]]) -> None:
    assert not _same(history[ZERO_AFTER - 2], history[ZERO_AFTER - 1])  # the 20th step still moved
    for later in history[ZERO_AFTER:]:
        assert _same(later, history[ZERO_AFTER - 1])  # steps 21..30 at lr 0: not one weight moves


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("tensor_lr", [False, True])
def test_lambda_lr_to_zero_stops_the_weights_eagerly(optimizer: str, tensor_lr: bool) -> None:
    history = _lambda_run(optimizer, "cpu", graph=False, tensor_lr=tensor_lr)
    _assert_stops_after_zero(history)


def _cosine_run(optimizer: str, device: str, graph: bool, tensor_lr: bool | None, steps: int) -> list[torch.Tensor]:
    model = _model()
    opt = _optimizer(optimizer, model)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    step = Step(model, nn.CrossEntropyLoss(), opt, Config(batch_size=32, cuda_graph=graph), torch.device(device),
                tensor_lr=tensor_lr)
    for x, y in _batches(steps):
        step(x, y)
        scheduler.step()
    return _weights(model)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_cosine_schedule_on_device_tensors_gives_the_float_runs_weights(optimizer: str) -> None:
    _close(_cosine_run(optimizer, "cpu", False, True, STEPS), _cosine_run(optimizer, "cpu", False, False, STEPS))


def test_device_lr_takes_a_float_a_scheduler_or_the_user_assigns() -> None:
    model = _model()
    optimizer = torch.optim.SGD([{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.2}],
                                lr=0.1)
    lrs = DeviceLr(optimizer, torch.device("cpu"))
    first = [group["lr"] for group in optimizer.param_groups]
    assert all(isinstance(t, torch.Tensor) and t.shape == () for t in first)
    assert [float(t) for t in first] == pytest.approx([0.1, 0.2])
    optimizer.param_groups[1]["lr"] = 0.05  # as an older scheduler, or the user, writes it
    lrs.sync()
    assert optimizer.param_groups[1]["lr"] is first[1] and float(first[1]) == pytest.approx(0.05)
    optimizer.add_param_group({"params": [nn.Parameter(torch.zeros(2))], "lr": 0.3})
    lrs.sync()
    assert len(lrs.tensors) == 3 and float(optimizer.param_groups[2]["lr"]) == pytest.approx(0.3)


def test_which_optimizers_read_a_tensor_rate_under_a_graph() -> None:
    params = [nn.Parameter(torch.zeros(2))]
    assert reads_tensor_lr_under_graph(torch.optim.Adam(params))
    assert reads_tensor_lr_under_graph(torch.optim.AdamW(params))
    assert not reads_tensor_lr_under_graph(torch.optim.SGD(params, lr=0.1))
    with pytest.raises(ValueError, match=r"tensor_lr=True under a CUDA graph needs .*\(Adam, AdamW\), but got SGD"):
        device_lrs(torch.optim.SGD(params, lr=0.1), torch.device("cpu"), True, graphed=True)


def test_graph_off_reasons_name_the_cause() -> None:
    params = [nn.Parameter(torch.zeros(2))]
    graphed = Config(batch_size=4, cuda_graph=True)
    cuda = torch.device("cuda")
    assert graph_off_reason(Config(batch_size=4), cuda, torch.optim.Adam(params), True) is None
    assert graph_off_reason(graphed, cuda, torch.optim.Adam(params), True) is None
    assert graph_off_reason(graphed, torch.device("cpu"), torch.optim.Adam(params), True) == (
        "cuda_graph needs a CUDA device, but the step runs on cpu"
    )
    assert graph_off_reason(graphed, cuda, torch.optim.Adam(params), False) == (
        "Adam counts its steps on the host unless capturable=True, and set_capturable=False keeps param_groups [0] "
        "as they are"
    )


@pytest.mark.parametrize(
    ("hooks", "error", "match"),
    [
        ({"accumulate": 0}, ValueError, r"`accumulate >= 1` .* but got accumulate=0\."),
        ({"accumulate": 2.0}, ValueError, r"`accumulate >= 1` .* but got accumulate=2\.0\."),
        ({"clip_grad_norm": -1.0}, ValueError, r"`clip_grad_norm > 0` .* but got clip_grad_norm=-1\.0\."),
        ({"clip_grad_norm": math.inf}, ValueError, r"but got clip_grad_norm=inf\."),
        ({"after_update": 3}, TypeError, r"after_update must be a callable taking no arguments, but got "
                                         r"after_update=3\."),
        ({"capture_after_update": True}, ValueError, r"capture_after_update=True .* but no after_update is given"),
    ],
)
def test_a_hook_the_step_cannot_take_is_one_error(hooks: dict, error: type, match: str) -> None:
    model = _model()
    with pytest.raises(error, match=match):
        Step(model, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.1), Config(batch_size=4),
             torch.device("cpu"), **hooks)


def test_the_step_takes_its_options_as_keywords_or_as_one_object() -> None:
    from autotune.loop.hooks import StepOptions

    model = _model()

    def step(**given: object) -> Step:
        return Step(model, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.1), Config(batch_size=4),
                    torch.device("cpu"), **given)

    options = StepOptions(clip_grad_norm=1.0, accumulate=2)
    assert step(clip_grad_norm=1.0, accumulate=2).options == options == step(options=options).options
    assert (step(options=options).clip_grad_norm, step(options=options).accumulate) == (1.0, 2)
    with pytest.raises(TypeError, match=r"^Step\(\) got an unexpected keyword argument 'clip'; the step options are "):
        step(clip=1.0)
    with pytest.raises(ValueError, match=r"`accumulate >= 1` .* but got accumulate=0\."):
        step(options=options, accumulate=0)


def test_move_model_false_refuses_a_model_on_another_device() -> None:
    model = _model()
    with pytest.raises(ValueError, match=r"its parameters are on \['cpu'\], not the step's device cuda"):
        Step(model, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.1), Config(batch_size=4),
             torch.device("cuda"), move_model=False, set_cudnn_benchmark=False)


def test_set_cudnn_benchmark_false_leaves_the_global_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    model = _model()
    config = Config(batch_size=4, cudnn_benchmark=True)
    with pytest.raises(ValueError):  # stops before any CUDA work; the setting is read or not before that
        Step(model, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.1), config,
             torch.device("cuda"), move_model=False, set_cudnn_benchmark=False)
    assert torch.backends.cudnn.benchmark is False
    with pytest.raises(ValueError):
        Step(model, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.1), config,
             torch.device("cuda"), move_model=False)
    assert torch.backends.cudnn.benchmark is True


# --- under a CUDA graph -----------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_graphed_lambda_lr_to_zero_stops_the_weights(optimizer: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graphed = _lambda_run(optimizer, "cuda", graph=True, tensor_lr=None)
    _assert_stops_after_zero(graphed)
    recaptured = [w for w in caught if issubclass(w.category, RecaptureWarning)]
    assert len(recaptured) == (1 if optimizer == "sgd" else 0)  # SGD captures again once, at the change to 0
    eager = _lambda_run(optimizer, "cuda", graph=False, tensor_lr=None)
    _close(graphed[-1], eager[-1], rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize(("optimizer", "steps"), [("adam", STEPS), ("sgd", 12)])
def test_graphed_cosine_schedule_matches_eager(optimizer: str, steps: int) -> None:
    # SGD's graph is captured again at each change: 12 steps stay within RECAPTURE_LIMIT (3 warm-up, 1 capture, 8).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graphed = _cosine_run(optimizer, "cuda", True, None, steps)
    assert not [w for w in caught if issubclass(w.category, GraphOffWarning)]
    _close(graphed, _cosine_run(optimizer, "cuda", False, None, steps), rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
def test_a_per_step_schedule_on_sgd_gives_up_the_graph_and_still_matches_eager() -> None:
    with pytest.warns(GraphOffWarning, match=r"changed more than 16 times"):
        graphed = _cosine_run("sgd", "cuda", True, None, STEPS)
    _close(graphed, _cosine_run("sgd", "cuda", False, None, STEPS), rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("capture_after_update", [False, True])
def test_graphed_hooks_match_eager(optimizer: str, capture_after_update: bool) -> None:
    runs = []
    for graph in (False, True):
        model = _model()
        ema = [p.detach().clone().cuda() for p in model.parameters()]

        def update_ema(model: nn.Module = model, ema: list[torch.Tensor] = ema) -> None:
            torch._foreach_lerp_(ema, [p.detach() for p in model.parameters()], 0.25)

        step = Step(model, nn.CrossEntropyLoss(), _optimizer(optimizer, model),
                    Config(batch_size=8, cuda_graph=graph), torch.device("cuda"), clip_grad_norm=0.5, accumulate=4,
                    after_update=update_ema, capture_after_update=capture_after_update and graph)
        for x, y in _batches(8):
            for i in range(4):
                step(x[8 * i : 8 * i + 8], y[8 * i : 8 * i + 8])
        assert (step.graph is not None) == graph and (step.update_graph is not None) == graph
        runs.append((_weights(model), [t.clone() for t in ema]))
    (eager, eager_ema), (graphed, graphed_ema) = runs
    _close(graphed, eager, rtol=1e-4, atol=1e-5)
    _close(graphed_ema, eager_ema, rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
def test_graphed_clipping_without_accumulation_matches_eager() -> None:
    runs = []
    for graph in (False, True):
        model = _model()
        step = Step(model, nn.CrossEntropyLoss(), _optimizer("adam", model), Config(batch_size=32, cuda_graph=graph),
                    torch.device("cuda"), clip_grad_norm=0.05)
        for x, y in _batches(10):
            step(x, y)
        assert step.grad_norm is not None and float(step.grad_norm) > 0.05
        runs.append(_weights(model))
    _close(runs[1], runs[0], rtol=1e-4, atol=1e-5)

