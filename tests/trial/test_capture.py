"""A CUDA graph capture that a host sync broke is named by its cause and its line; the search stops trying graphs.

On a CPU the errors torch raises while a stream captures are faked (their types and words, raised through the
workload's own lines); the GPU test meets them for real.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from autotune.trial.capture import HOST_SYNC, is_host_sync
from autotune.trial.runner import classify_failure
from autotune.workloads import RecipeRef, load

HOST_SYNC_WORKLOAD = Path(__file__).parents[1] / "fixtures" / "host_sync.py"
CUDA_NOTE = (
    "\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
    "incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable "
    "device-side assertions.\n"
)
# cudaErrorStreamCaptureUnsupported, raised at the sync; cudaErrorStreamCaptureInvalidated, raised by capture_end.
NOT_PERMITTED = "CUDA error: operation not permitted when stream is capturing" + CUDA_NOTE
INVALIDATED = "CUDA error: operation failed due to a previous error during capture" + CUDA_NOTE
ADVICE = "a CUDA graph cannot wait for the GPU; move it out of the step, or leave cuda_graph off"


class _Capturing:
    """Stands in for a CUDA tensor while its stream captures: reading it on the host raises as torch does."""

    def abs(self) -> _Capturing:
        return self

    def max(self) -> _Capturing:
        return self

    def __gt__(self, other: object) -> _Capturing:
        return self

    def item(self) -> float:
        raise torch.AcceleratorError(NOT_PERMITTED)

    def __bool__(self) -> bool:
        raise torch.AcceleratorError(NOT_PERMITTED)


class _Graph:
    """torch.cuda.graph's exit: ending a capture that an error invalidated raises again, chained to that error."""

    def __enter__(self) -> _Graph:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is not None:
            raise torch.AcceleratorError(INVALIDATED)


def _captured(step: Any, *args: Any) -> BaseException:
    with pytest.raises(torch.AcceleratorError, match="previous error during capture") as raised:
        with _Graph():
            step(*args)
    return raised.value


@pytest.fixture
def workload(tmp_path: Path) -> Any:
    path = tmp_path / "host_sync.py"
    shutil.copy(HOST_SYNC_WORKLOAD, path)
    return load(RecipeRef("host_sync", path, tmp_path / "host_sync.tuned.toml", False))


def _line_of(path: Path, code: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if code in line)


def test_an_item_call_in_the_forward_is_named_with_its_line(workload: Any) -> None:
    exc = _captured(workload.build_model(), _Capturing())
    line = _line_of(workload.path, "scale = x.abs().max().item()")
    assert classify_failure(exc) == (
        f"{HOST_SYNC} (`.item()` at {workload.path}, line {line}: `scale = x.abs().max().item()`): {ADVICE}"
    )


def test_a_python_branch_on_the_loss_is_named_with_its_line(workload: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.nn.functional, "cross_entropy", lambda output, target: output)
    exc = _captured(workload.build_loss(), _Capturing(), None)
    line = _line_of(workload.path, "if loss > 1e6")
    assert classify_failure(exc) == (
        f"{HOST_SYNC} (a Python branch on a tensor at {workload.path}, line {line}: `if loss > 1e6:`): {ADVICE}"
    )


def test_a_sync_outside_the_workload_files_is_still_named_a_host_sync() -> None:
    exc = _captured(lambda t: t.item(), _Capturing())
    assert is_host_sync(exc)
    assert classify_failure(exc) == (
        f"{HOST_SYNC} (`.item()`, `.cpu()`, `.tolist()`, `nonzero` or a Python branch on a tensor; no line of the "
        f"workload in the traceback): {ADVICE}"
    )


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (
            torch.AcceleratorError(INVALIDATED),
            "cuda error: CUDA error: operation failed due to a previous error during capture",
        ),
        (
            RuntimeError("Cannot call CUDAGeneratorImpl::current_seed during CUDA graph capture."),
            "error: RuntimeError: Cannot call CUDAGeneratorImpl::current_seed during CUDA graph capture.",
        ),
    ],
    ids=["invalidated, cause unknown", "an op torch refuses to capture"],
)
def test_other_capture_errors_keep_their_own_reasons(exc: BaseException, reason: str) -> None:
    assert not is_host_sync(exc)
    assert classify_failure(exc) == reason


@pytest.mark.gpu
def test_a_host_sync_step_fails_capture_once_and_graphs_are_not_tried_again(project: Path) -> None:
    from autotune.options import SearchOptions
    from autotune.study import search
    from autotune.study.setup import open_study, prepare

    shutil.copy(HOST_SYNC_WORKLOAD, project / "recipes" / "host_sync.py")
    lines: list[str] = []
    options = SearchOptions(trials=10, parity_check=False, rounds=1, time_budget_s=None)
    search("host_sync", options, echo=lines.append)
    setup = open_study(prepare("host_sync", options, echo=lambda line: None))
    measured = [
        t for t in setup.study.get_trials(deepcopy=False)
        if t.user_attrs.get("config", {}).get("cuda_graph") and "duplicate_of" not in t.user_attrs
        and not str(t.user_attrs.get("reason", "")).startswith("skipped:")
    ]
    assert len(measured) == 1, [t.user_attrs.get("reason") for t in measured]
    line = _line_of(project / "recipes" / "host_sync.py", "scale = x.abs().max().item()")
    assert measured[0].user_attrs["reason"] == (
        f"{HOST_SYNC} (`.item()` at {project / 'recipes' / 'host_sync.py'}, line {line}: "
        f"`scale = x.abs().max().item()`): {ADVICE}"
    )
    assert (
        f"  not trying again: cuda_graph=on cannot capture this workload's step ({measured[0].number}): "
        f"{measured[0].user_attrs['reason']}"
    ) in lines
    later = [t for t in setup.study.get_trials(deepcopy=False) if t.number > measured[0].number]
    assert all(
        not t.user_attrs.get("config", {}).get("cuda_graph") or t.user_attrs["reason"].startswith("skipped:")
        for t in later
    )
