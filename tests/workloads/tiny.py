"""A tiny workload for tests: 512 8x8 images, a two-layer CNN; a trial takes about a second on a CPU.

Environment switches let one file stand for the failing workloads the tests need:
TINY_FAIL=oom (forward raises "CUDA out of memory." at batch >= 64), TINY_FAIL=hang
(forward never returns at batch >= 64), TINY_FAIL=getitem (the data set raises in
__getitem__), TINY_FAIL=kill_worker (a DataLoader worker kills itself),
TINY_FAIL=getitem_worker (__getitem__ raises, but only in a DataLoader worker),
TINY_FAIL=hang_worker (__getitem__ never returns, but only in a DataLoader worker).
TINY_WORKER_WAITS_FOR=PATH makes a `--gpus` worker process wait (60 s at most) until PATH exists
before it builds its data set.
"""

import os
import sys
import time

import torch
from torch import nn, optim
from torch.utils.data import Dataset

DEFAULTS = dict(
    batch_size=16,  # small, so the space spans 4..1024 over 512 samples
    lr=0.05,  # SGD at batch 16
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
        fail = os.environ.get("TINY_FAIL")
        if fail == "getitem":
            raise ValueError(f"cannot read sample {i}")
        in_worker = torch.utils.data.get_worker_info() is not None
        if fail == "kill_worker" and in_worker:
            os.kill(os.getpid(), 9)
        if fail == "getitem_worker" and in_worker:
            raise ValueError(f"cannot read sample {i} in a worker")
        if fail == "hang_worker" and in_worker:
            while True:
                time.sleep(1)
        return self.x[i], int(self.y[i])


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 8 * 8, 4)

    def forward(self, x):
        fail = os.environ.get("TINY_FAIL")
        if fail == "oom" and x.shape[0] >= 64:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if fail == "hang" and x.shape[0] >= 64:
            while True:
                time.sleep(1)
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def build_dataset(root):
    wait_for = os.environ.get("TINY_WORKER_WAITS_FOR")
    if wait_for and sys.argv[0].endswith("_worker.py"):  # python -m autotune._worker
        deadline = time.monotonic() + 60
        while not os.path.exists(wait_for) and time.monotonic() < deadline:
            time.sleep(0.05)
    return Blobs()


def build_model():
    return Net()


def build_loss():
    return nn.CrossEntropyLoss()


def build_optimizer(params, lr):
    return optim.SGD(params, lr=lr)
