"""Whether ``torch.compile`` can compile a step on this machine's GPU, and if not, why, in one line.

Inductor writes a CUDA step's kernels in Triton: without the ``triton`` package (a CUDA
wheel of torch brings it; a build from source may not) every compile fails with a
``BackendCompilerFailed`` the search would only learn of trial by trial.
"""

from __future__ import annotations


def compiler_missing() -> str:
    """Why compile is left out of the space on this CUDA machine; "" where Inductor can compile for it."""
    import torch
    from torch.utils._triton import has_triton

    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile"
    if not has_triton():
        return "Inductor needs the triton package to compile for a CUDA device, and it is not installed"
    return ""
