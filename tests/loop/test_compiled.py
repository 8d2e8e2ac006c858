"""The compiled step on a CPU, through a fake compiler: what it trains, how its failures are named.

The fake backends receive Dynamo's graph as ``torch.compile`` hands it to Inductor and run it
(``fake``), change it (``doubled``: a wrong compiled step) or fail (``broken``), so everything but
Inductor itself runs here in a second. The GPU tests run the real compiler.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from autotune.config import Config
from autotune.loop import Step, compiled
from autotune.parity import gradients
from autotune.parity import numerics as parity_numerics
from autotune.trial.runner import Runner, classify_failure
from autotune.trial.timing import Windows
from autotune.workloads import load, resolve

FIXTURES = Path(__file__).parents[1] / "fixtures"
BASE = Config(batch_size=16)


def fake(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    return gm.forward


def doubled(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    """A compiler with a bug: every output of the graph (the loss) comes out twice as large."""

    def run(*args: Any) -> Any:
        out = gm(*args)
        return type(out)(o * 2 for o in out) if isinstance(out, (tuple, list)) else out * 2

    return run


def broken(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    raise RuntimeError("no C compiler: cc not found")


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Any:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def with_backend(monkeypatch: pytest.MonkeyPatch, backend: Any) -> None:
    monkeypatch.setitem(compiled.COMPILE_OPTIONS, "default", {"backend": backend})


def runner(name: str, root: Path) -> Runner:
    return Runner(load(resolve(str(FIXTURES / name))), torch.device("cpu"), root=root)


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_a_graph_break_is_named_with_the_workload_s_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with_backend(monkeypatch, fake)
    run = runner("host_sync.py", tmp_path)
    loader, step, _ = run.build(Config(batch_size=16, compile="default"), 0.05)
    with pytest.raises(compiled.CompileError) as raised:
        step(next(iter(loader)))
    path = FIXTURES / "host_sync.py"
    # .item() and the branch on the loss: two breaks; with fullgraph Dynamo stops at the branch.
    assert str(raised.value) == (
        f"compile: graph break (2 in the step; Dynamo stopped at {path.resolve()}, line "
        f"{line_of(path, 'if loss > 1e6:')}: `if loss > 1e6:`: Data-dependent branching): a compiled step must be "
        f"one graph; change that line (no Python branch on a tensor, no .item()), or leave compile off"
    )
    assert classify_failure(raised.value) == str(raised.value)


def test_a_correct_compiled_step_trains_as_the_eager_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with_backend(monkeypatch, fake)
    run = runner("compiles.py", tmp_path)
    losses: dict[str, list[float]] = {}
    for mode in ("off", "default"):
        loader, step, _ = run.build(Config(batch_size=16, compile=mode), 0.05)
        losses[mode] = [float(step(batch)) for batch in loader]
        assert (step.compiled is None) == (mode == "off")
    assert losses["default"] == losses["off"] and len(losses["off"]) == 32
    assert step.compiled is not None and step.compiled.graphs == 1  # every batch of 16: one graph, no recompile
    assert step.compile_s > 0


def test_a_short_batch_runs_eagerly_beside_the_compiled_step_and_compiles_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stream's workers each end a pass with a short batch, of as many sizes as their shares: none recompiles."""
    with_backend(monkeypatch, fake)
    workload = load(resolve(str(FIXTURES / "compiles.py")))
    data = workload.build_dataset(None)
    sizes = (16, 16, 10, 16, 7, 16)  # full batches, then short ones of two sizes between them
    losses: dict[str, list[float]] = {}
    for mode in ("off", "default"):
        torch.manual_seed(0)
        model = workload.build_model()
        step = Step(model, workload.build_loss(), workload.build_optimizer(model.parameters(), 0.05),
                    Config(batch_size=16, compile=mode), torch.device("cpu"))
        start, losses[mode] = 0, []
        for n in sizes:
            losses[mode].append(float(step(data.x[start:start + n], data.y[start:start + n])))
            start += n
    assert losses["default"] == losses["off"]
    assert step.compiled is not None and step.compiled.graphs == 1  # the batch of 16's graph alone


def test_a_trial_reports_its_compile_time_within_its_one_time_costs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_backend(monkeypatch, fake)
    windows = Windows(warmup_steps=3, window_s=0.02, min_windows=2, max_windows=2, boundaries=1, extra_windows=0)
    result = runner("compiles.py", tmp_path).run(Config(batch_size=16, compile="default"), 0.05, windows)
    assert 0 < result["compile_s"] <= result["setup_s"]


def test_recompiles_up_to_dynamo_s_limit_are_named_with_the_guard_and_the_advice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with_backend(monkeypatch, fake)
    model = nn.Linear(4, 2)

    def compute_loss(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        out = model(x)
        return out.sum() if x.shape[0] % 2 else out.square().sum()  # a Python branch on the shape

    loss = compiled.CompiledLoss(compute_loss, "default")
    # Dynamo's own patch, not monkeypatch: monkeypatch's undo leaves a torch config option hidden, and every later
    # compile in the process fails.
    with torch._dynamo.config.patch(recompile_limit=3), pytest.raises(compiled.CompileError, match=re.escape(
        "compile: recompiled: 3 graphs, Dynamo's limit of 3 (it runs any further call eagerly); the last guard "
        "that failed: "
    )) as raised:
        for rows in (3, 4, 5, 6, 7):
            loss.timed(lambda x: loss(model, x).backward(), torch.randn(rows, 4))
    assert str(raised.value).endswith(compiled.SHAPE_ADVICE)


def test_a_compiler_error_is_named_with_its_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with_backend(monkeypatch, broken)
    loader, step, _ = runner("compiles.py", tmp_path).build(Config(batch_size=16, compile="default"), 0.05)
    with pytest.raises(compiled.CompileError) as raised:
        step(next(iter(loader)))
    assert str(raised.value) == (
        "compile: compiler error (default): RuntimeError: no C compiler: cc not found; leave compile=default off"
    )


def test_an_error_of_the_workload_s_own_is_not_a_compile_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    with_backend(monkeypatch, fake)

    def compute_loss(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return model(x).sum()

    loss = compiled.CompiledLoss(compute_loss, "default")
    with pytest.raises(RuntimeError, match="a and b must have same reduction dim") as raised:
        loss.timed(lambda x: loss(nn.Linear(4, 2), x), torch.randn(3, 5))
    assert not isinstance(raised.value, compiled.CompileError)


def test_the_gradient_check_fails_a_wrong_compiled_step_and_passes_a_correct_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = runner("compiles.py", tmp_path)
    candidate = Config(batch_size=16, compile="default")
    verdicts = {}
    for name, backend in (("fake", fake), ("doubled", doubled)):
        with_backend(monkeypatch, backend)
        torch._dynamo.reset()
        found = gradients.compare(run.build, BASE, candidate, 0.05, warm_steps=8)
        verdicts[name] = parity_numerics.judge(found, parity_numerics.label(candidate))
    assert verdicts["fake"].passed and verdicts["fake"].ratio == 0.0, verdicts["fake"].summary()
    assert not verdicts["doubled"].passed and verdicts["doubled"].ratio > 1, verdicts["doubled"].summary()
    assert verdicts["doubled"].summary().startswith("off with compile=default's gradients are beyond the batch's")


def test_compile_with_bf16_is_one_check_of_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with_backend(monkeypatch, fake)
    run = runner("compiles.py", tmp_path)
    candidate = Config(batch_size=16, amp="bf16", compile="default")
    assert gradients.numerics_of(BASE, candidate) == Config(batch_size=16, amp="bf16", compile="default")
    found = gradients.compare(run.build, BASE, candidate, 0.05, warm_steps=8)
    verdict = parity_numerics.judge(found, parity_numerics.label(candidate))
    assert verdict.passed and 0 < verdict.ratio < 0.01, verdict.summary()


def test_step_compiles_the_workload_s_loss_and_keeps_the_plain_model(monkeypatch: pytest.MonkeyPatch) -> None:
    with_backend(monkeypatch, fake)
    model = nn.Linear(4, 2)
    step = Step(model, nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=0.1),
                Config(batch_size=4, compile="default"), torch.device("cpu"))
    step(torch.randn(4, 4), torch.randn(4, 2))
    assert step.model is model and list(model.state_dict()) == ["weight", "bias"]
    assert isinstance(step.compute_loss, compiled.CompiledLoss)


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match=re.escape("`mode` must be one of ('default', 'max-autotune-no-cudagraphs'), "
                                                   "but got 'reduce-overhead'.")):
        compiled.CompiledLoss(lambda model, batch: batch, "reduce-overhead")


def test_each_compiling_trial_compiles_its_own_step_as_a_fresh_process_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the runner's reset, the second trial reused the first one's graph (Dynamo takes the parameters as
    inputs) and counted no compile: graphs [1, 0, 0, ...]."""
    with_backend(monkeypatch, fake)
    run = runner("compiles.py", tmp_path)
    graphs = []
    for _ in range(torch._dynamo.config.recompile_limit + 2):
        loader, step, _ = run.build(Config(batch_size=16, compile="default"), 0.05)
        step(next(iter(loader)))
        assert step.compiled is not None
        graphs.append(step.compiled.graphs)
    assert graphs == [1] * len(graphs)


def test_tuned_step_compiles_where_the_profile_says_so(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune import tuned_step
    from autotune.tuned import file as tuned_file

    with_backend(monkeypatch, fake)
    knobs = tuned_file.config_to_knobs(Config(batch_size=32, compile="default"))
    tuned_file.write_profile(project / "recipes" / "tiny.tuned.toml", "tiny", "cpu", {
        "samples_per_s": 1000.0, "baseline_samples_per_s": 100.0, "speedup": 10.0, "lr": 0.1, "knobs": knobs,
        "versions": {"torch": torch.__version__}})
    assert tuned_file.read(project / "recipes" / "tiny.tuned.toml")["profiles"]["cpu"]["knobs"]["compile"] == "default"
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 4))
    step = tuned_step(model, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.1), recipe="tiny",
                      device="cpu")
    loss = step(torch.rand(32, 1, 8, 8), torch.randint(0, 4, (32,)))
    assert isinstance(step.compute_loss, compiled.CompiledLoss) and torch.isfinite(loss)
    assert step.compiled is not None and step.compiled.graphs == 1


@pytest.mark.slow
def test_inductor_on_the_cpu_passes_the_gradient_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real compiler, once: about 20 s on two busy cores, most of it Inductor's C++ compile."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    run = runner("compiles.py", tmp_path)
    candidate = Config(batch_size=16, compile="default")
    found = gradients.compare(run.build, BASE, candidate, 0.05)
    verdict = parity_numerics.judge(found, parity_numerics.label(candidate))
    assert verdict.passed and verdict.ratio < 1e-6, verdict.summary()
