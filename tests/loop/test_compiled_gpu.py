"""The compiled step with the real compiler (Inductor, Triton): `pytest -m gpu tests/loop/test_compiled_gpu.py`.

Each test compiles a tiny model (tests/fixtures/compiles.py, tests/fixtures/host_sync.py) for real; on an H200
each takes seconds to tens of seconds, mostly Inductor's cold compile.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from autotune.config import Config
from autotune.parity import gradients
from autotune.parity import numerics as parity_numerics
from autotune.trial.runner import Runner
from autotune.trial.timing import Windows
from autotune.workloads import load, resolve

FIXTURES = Path(__file__).parents[1] / "fixtures"
WINDOWS = Windows(warmup_steps=5, window_s=0.05, min_windows=2, max_windows=3, boundaries=1, extra_windows=0)


def cuda_runner(name: str, root: Path) -> Runner:
    return Runner(load(resolve(str(FIXTURES / name))), torch.device("cuda"), root=root)


@pytest.mark.gpu
def test_gpu_the_compiled_step_captured_in_a_graph_trains_as_the_compiled_one_alone(tmp_path: Path) -> None:
    torch._dynamo.reset()
    run = cuda_runner("compiles.py", tmp_path)
    losses = {}
    for graph in (False, True):
        loader, step, _ = run.build(Config(batch_size=16, compile="default", cuda_graph=graph), 0.05)
        losses[graph] = torch.stack([step(batch) for batch in loader]).cpu()
        assert (step.graph is not None) == graph and step.compile_s > 0
    assert torch.allclose(losses[True], losses[False], rtol=1e-5, atol=1e-6), (losses[True], losses[False])


@pytest.mark.gpu
def test_gpu_inductor_passes_the_gradient_check_alone_and_with_bf16(tmp_path: Path) -> None:
    torch._dynamo.reset()
    run = cuda_runner("compiles.py", tmp_path)
    for candidate in (Config(batch_size=16, compile="default"), Config(batch_size=16, compile="default", amp="bf16")):
        found = gradients.compare(run.build, Config(batch_size=16), candidate, 0.05)
        verdict = parity_numerics.judge(found, parity_numerics.label(candidate))
        assert verdict.passed, verdict.summary()


@pytest.mark.gpu
def test_gpu_a_trial_counts_its_compile_and_a_second_process_compiles_from_the_cache(tmp_path: Path) -> None:
    """Two trial processes of one config, one after the other, sharing a compile cache as a search's trials do."""
    from autotune.procs import compile_cache
    from autotune.procs.pool import TrialPool

    workload = FIXTURES / "compiles.py"
    mine = {k: v for k, v in os.environ.items() if k != compile_cache.CACHE_DIR_VAR}
    env = compile_cache.environment(tmp_path / ".autotune", workload, base=mine)
    env["AUTOTUNE_DATA"] = str(tmp_path / "data")
    compiles = []
    for _ in range(2):
        pool = TrialPool(workload, "cuda:0", 4, tmp_path / "logs", 300.0, env=env)
        try:
            outcome = pool.run(Config(batch_size=16, compile="default"), 0.05, WINDOWS)
        finally:
            pool.stop()
        assert outcome.state == "complete" and outcome.result is not None, outcome.reason
        assert 0 < outcome.result["compile_s"] <= outcome.result["setup_s"]
        compiles.append(outcome.result["compile_s"])
    assert any(compile_cache.cache_dir(tmp_path / ".autotune", workload).iterdir())
    assert compiles[1] < 0.5 * compiles[0], f"cold {compiles[0]:.1f} s, from the cache {compiles[1]:.1f} s"


@pytest.mark.gpu
def test_gpu_a_search_names_a_graph_break_and_compiles_no_third_time(project: Path) -> None:
    from autotune.options import SearchOptions
    from autotune.study import search
    from autotune.study.failed.hopeless import BATCH_LAYOUT
    from autotune.study.setup import open_study, prepare

    shutil.copy(FIXTURES / "host_sync.py", project / "recipes" / "host_sync.py")
    lines: list[str] = []
    # compile=off stays in the space: the baseline (the workload's own, eager) must run for the search to end.
    options = SearchOptions(trials=8, parity_check=False, rounds=1, time_budget_s=None,
                            fixes={"compile": ("off", "default", "max-autotune-no-cudagraphs"), "cuda_graph": (False,)})
    search("host_sync", options, echo=lines.append)
    setup = open_study(prepare("host_sync", options, echo=lambda line: None))
    trials = setup.study.get_trials(deepcopy=False)
    measured = [t for t in trials if "duplicate_of" not in t.user_attrs
                and not str(t.user_attrs.get("reason", "")).startswith("skipped:")
                and t.user_attrs.get("config", {}).get("compile", "off") != "off"]
    # A break rules out compile at its batch layout (placement, channels_last, device_normalize); one on a second
    # layout rules out every mode (autotune.study.failed.hopeless.compile_failed): never a third compile.
    layouts = {tuple(t.user_attrs["config"].get(k) for k in BATCH_LAYOUT) for t in measured}
    assert 1 <= len(measured) <= 2 and len(layouts) == len(measured), [t.user_attrs.get("reason") for t in measured]
    path = project / "recipes" / "host_sync.py"
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "if loss > 1e6:" in text)
    reason = measured[0].user_attrs["reason"]
    assert reason.startswith(f"compile: graph break (2 in the step; Dynamo stopped at {path}, line {line}: "), reason
    assert any(line_.startswith("  not trying again: compile=") for line_ in lines), lines
