"""A tiny workload built to underflow in fp16: its gradients vanish under autocast unless a GradScaler scales them.

The loss is cross-entropy times 2**-22 and the learning rate 2**22 times the usual,
so fp32 SGD trains exactly as if neither were scaled (powers of two scale exactly).
Under fp16 autocast the gradient reaching the logits, at most 2**-26, is below
fp16's smallest subnormal (2**-24) and rounds to zero: without a scaler nothing
learns. GradScaler's 2**16 lifts it back into range.
"""

import importlib.util
from pathlib import Path

from torch import optim
from torch.nn import functional as F

SCALE = 2.0**-22  # the loss's scale; the learning rate carries its inverse
DEFAULTS = dict(
    batch_size=16,  # as tests/workloads/tiny.py
    lr=0.05 / SCALE,  # SGD at batch 16, compensating the loss's scale
    epochs=2,  # the declared run
    shuffle=True,
)
DETERMINISTIC_TRANSFORM = True


def _tiny():
    """tests/workloads/tiny.py, beside this file: the same data and model (its failure switches stay off here)."""
    spec = importlib.util.spec_from_file_location("_tiny_workload", Path(__file__).with_name("tiny.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_TINY = _tiny()
Blobs, Net = _TINY.Blobs, _TINY.Net


def build_dataset(root):
    return Blobs()


def build_model():
    return Net()


def build_loss():
    return lambda output, target: F.cross_entropy(output, target) * SCALE


def build_optimizer(params, lr):
    return optim.SGD(params, lr=lr)
