"""A user's stream from a slow store: 13 shards of 500 samples, each sample a 0.5 ms read; an MLP trained with Adam."""

import time

import torch
from torch import nn, optim
from torch.utils.data import IterableDataset, get_worker_info

DEFAULTS = dict(batch_size=64, lr=1e-3, epochs=3, samples_per_epoch=6500)


class SlowStore(IterableDataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        n = 13 * 500
        self.y = torch.randint(0, 10, (n,), generator=g)
        self.x = torch.rand(10, 64, generator=g)[self.y] + 0.5 * torch.rand(n, 64, generator=g)

    def __iter__(self):
        info = get_worker_info()
        shards = range(13) if info is None else range(info.id, 13, info.num_workers)
        for shard in shards:
            for i in range(shard * 500, shard * 500 + 500):
                time.sleep(0.0005)
                yield self.x[i], int(self.y[i])


def build_dataset(root):
    return SlowStore()


def build_model():
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def build_loss():
    return nn.CrossEntropyLoss()


def build_optimizer(params, lr):
    return optim.Adam(params, lr=lr)
