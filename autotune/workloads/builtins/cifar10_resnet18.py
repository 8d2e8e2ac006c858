"""ResNet-18 on CIFAR-10 with the usual PIL augmentation: a loader-heavy, compute-real workload.

    autotune search --recipe cifar10_resnet18

Untuned defaults are DataLoader's own (0 workers, no pinning) with batch 128 and
shuffling, as most tutorials write it.
"""

import torch
from torch import nn, optim
from torchvision import transforms
from torchvision.models import resnet18

from autotune.workloads.datasets import cifar10

DEFAULTS = dict(
    batch_size=128,  # samples per step
    lr=0.1,  # SGD learning rate at batch 128, the common CIFAR-10 recipe
    epochs=30,  # the declared run
    shuffle=True,  # random order every epoch
)
LR_MAX = 0.8  # linear scaling beyond this makes SGD with momentum unstable on ResNet-18

MEAN = (0.4914, 0.4822, 0.4465)  # per-channel mean of CIFAR-10's training images
STD = (0.2470, 0.2435, 0.2616)  # and their standard deviation


def build_dataset(root):
    augment = transforms.Compose(
        [
            transforms.RandomCrop(32, padding=4),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(MEAN, STD),
        ]
    )
    return cifar10(root, train=True, transform=augment)


def build_device_dataset(root):
    # The deterministic part of the transform; device_augment() does the random part per batch.
    return cifar10(
        root, train=True, transform=transforms.Compose([transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
    )


def device_augment(x):
    """RandomCrop(32, padding=4) and RandomHorizontalFlip on a batch already on the device.

    The batch is already normalised, so the padding is black as Normalize maps it, as in
    the PIL path (which pads black pixels, then normalises). Padding with zeros here would
    pad with the mean colour: a model trained on that meets black borders only at test time.
    """
    n = x.shape[0]
    padded = x.new_empty((n, x.shape[1], 40, 40))
    for c, (m, s) in enumerate(zip(MEAN, STD)):
        padded[:, c].fill_(-m / s)  # a Python number: no host-to-device copy, so no sync per batch
    padded[:, :, 4:36, 4:36] = x
    dx = torch.randint(0, 9, (n,), device=x.device)
    dy = torch.randint(0, 9, (n,), device=x.device)
    rows = dy[:, None] + torch.arange(32, device=x.device)[None, :]  # n x 32
    cols = dx[:, None] + torch.arange(32, device=x.device)[None, :]
    idx_n = torch.arange(n, device=x.device)[:, None, None, None]
    idx_c = torch.arange(x.shape[1], device=x.device)[None, :, None, None]
    out = padded[idx_n, idx_c, rows[:, None, :, None], cols[:, None, None, :]]
    flip = torch.rand(n, device=x.device) < 0.5
    return torch.where(flip[:, None, None, None], out.flip(3), out)


def build_model():
    return resnet18(num_classes=10)


def build_loss():
    return nn.CrossEntropyLoss()


def build_optimizer(params, lr):
    return optim.SGD(params, lr=lr, momentum=0.9)
