"""A tiny workload built to underflow in fp16: its gradients vanish under autocast unless a GradScaler scales them.

The loss is cross-entropy times 2**-22 and the learning rate 2**22 times the usual,
so fp32 SGD trains exactly as if neither were scaled (powers of two scale exactly).
Under fp16 autocast the gradient reaching the logits, at most 2**-26, is below
fp16's smallest subnormal (2**-24) and rounds to zero: without a scaler nothing
learns. GradScaler's 2**16 lifts it back into range.
"""

import torch
from torch import nn, optim
from torch.nn import functional as F
from torch.utils.data import Dataset

SCALE = 2.0**-22  # the loss's scale; the learning rate carries its inverse
DEFAULTS = dict(
    batch_size=16,  # as tests/workloads/tiny.py
    lr=0.05 / SCALE,  # SGD at batch 16, compensating the loss's scale
    epochs=2,  # the declared run
    shuffle=True,
)
DETERMINISTIC_TRANSFORM = True


class Blobs(Dataset):
    def __init__(self, n=512):
        g = torch.Generator().manual_seed(0)
        self.y = torch.randint(0, 4, (n,), generator=g)
        protos = torch.rand(4, 1, 8, 8, generator=g)
        self.x = protos[self.y] + 0.3 * torch.rand(n, 1, 8, 8, generator=g)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], int(self.y[i])


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 8 * 8, 4)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def build_dataset(root):
    return Blobs()


def build_model():
    return Net()


def build_loss():
    return lambda output, target: F.cross_entropy(output, target) * SCALE


def build_optimizer(params, lr):
    return optim.SGD(params, lr=lr)
