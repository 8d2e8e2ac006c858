"""An `oom` reason says how much the config asked for and how much was free, as torch's error states it."""

from __future__ import annotations

import pytest
import torch

from autotune.trial.runner import classify_failure

# torch's allocator, word for word (c10/cuda/CUDACachingAllocator.cpp), on a GPU another process fills.
BESIDE_ANOTHER = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB of which 1.25 GiB is "
    "free. Process 4242 has 120.50 GiB memory in use. Including non-PyTorch memory, this process has 18.02 GiB memory "
    "in use. Of the allocated memory 17.10 GiB is allocated by PyTorch, and 412.00 MiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
    "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
# In a container NVML gives the host's pids: torch cannot tell its own process among them.
IN_A_CONTAINER = (
    "CUDA out of memory. Tried to allocate 768.00 MiB. GPU 1 has a total capacity of 79.15 GiB of which 301.94 MiB is "
    "free. Process 90001 has 1.50 GiB memory in use. Process 90002 has 77.30 GiB memory in use. Of the allocated "
    "memory 76.80 GiB is allocated by PyTorch, and 20.00 MiB is reserved by PyTorch but unallocated."
)


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (
            torch.OutOfMemoryError(BESIDE_ANOTHER),
            "oom: asked for 2.00 GiB more, holding 18.02 GiB; 1.25 GiB of 139.81 GiB free; "
            "other processes held 120.50 GiB (pid 4242)",
        ),
        (
            torch.OutOfMemoryError(IN_A_CONTAINER),
            "oom: asked for 768.00 MiB; 301.94 MiB of 79.15 GiB free; "
            "processes on the GPU held 1.50 GiB + 77.30 GiB (pid 90001, 90002)",
        ),
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), "oom: asked for 2.00 GiB"),
        (RuntimeError("CUDA out of memory."), "oom"),  # no numbers to state, and no CUDA here to ask
    ],
    ids=["beside another process", "in a container", "only the allocation", "no numbers"],
)
def test_an_oom_reason_states_what_was_asked_and_what_was_free(exc: BaseException, reason: str) -> None:
    assert classify_failure(exc) == reason


def test_a_reason_whose_first_line_heads_a_list_keeps_the_list() -> None:
    # A trial process whose workload fails to load: "has 1 problem(s):" alone would not say which.
    from autotune.workloads.locate import WorkloadError

    exc = WorkloadError("workload /tmp/w.py has 2 problem(s):\n  - DEFAULTS lacks 'epochs'\n  - no build_loss()")
    assert classify_failure(exc) == (
        "error: WorkloadError: workload /tmp/w.py has 2 problem(s): DEFAULTS lacks 'epochs'; no build_loss()")
    assert classify_failure(ValueError("bad value\nTraceback follows")) == "error: ValueError: bad value"


def test_an_error_raised_in_a_dataloader_worker_is_named_with_the_workload_s_line(tmp_path) -> None:
    """A real worker, a data set with one corrupt row: the reason says what the worker raised, and where."""
    import importlib.util

    source = tmp_path / "badrow.py"
    source.write_text(
        "import torch\n"
        "from torch.utils.data import Dataset\n\n\n"
        "class Rows(Dataset):\n"
        "    def __len__(self):\n"
        "        return 8\n\n"
        "    def __getitem__(self, i):\n"
        "        value = float('abc' if i == 5 else '1.5')\n"
        "        return torch.tensor([value])\n"
    )
    spec = importlib.util.spec_from_file_location("badrow", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for workers, place in ((1, " in DataLoader worker process 0"), (0, "")):
        with pytest.raises(ValueError) as raised:
            list(torch.utils.data.DataLoader(module.Rows(), batch_size=2, num_workers=workers))
        assert classify_failure(raised.value) == (
            f"error: ValueError: could not convert string to float: 'abc'{place} (badrow.py, line 10)")


def test_a_long_or_multi_line_worker_error_keeps_its_type_and_the_worker_it_came_from(tmp_path) -> None:
    """failures.py reads "in DataLoader worker process" to blame the loader's knobs: only the message is cut."""
    from autotune.study.failed.hopeless import WORKER_ERROR

    class Missing(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> torch.Tensor:
            raise FileNotFoundError(f"no such file: {'/data/' + 'x' * 400}.jpg\nsee the data set's README")

    with pytest.raises(FileNotFoundError) as raised:
        list(torch.utils.data.DataLoader(Missing(), batch_size=2, num_workers=1))
    reason = classify_failure(raised.value)
    assert reason.startswith("error: FileNotFoundError: no such file: /data/xxx") and WORKER_ERROR in reason
    line = Missing.__getitem__.__code__.co_firstlineno + 1  # the raise
    assert reason.endswith(f" in DataLoader worker process 0 (test_oom.py, line {line})"), reason
