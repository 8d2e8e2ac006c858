"""The seed's workload: a tiny MNIST CNN that ran slower on an A100 than on an RTX 3070.

Model, loss, optimizer and DataLoader settings are exactly as the seed wrote them
(its `out.view(out.size(0), 400)` included, which is why channels_last cannot work
on this model). Tune it with:

    autotune search --recipe mnist_cnn
"""

from torch import nn, optim
from torchvision import transforms

from autotune.workloads.datasets import mnist

DEFAULTS = dict(
    batch_size=128,  # samples per step, as the seed
    lr=1e-2,  # SGD learning rate at batch 128, as the seed
    epochs=10,  # the seed's num_epoches: the declared run
    shuffle=False,  # the seed's DataLoader(shuffle=False)
    pin_memory=True,  # the seed's DataLoader(pin_memory=True); num_workers left at DataLoader's 0
)
# ToTensor has no randomness: the transformed data set may be computed once and kept on the GPU.
DETERMINISTIC_TRANSFORM = True
# Linear learning-rate scaling stops here. Measured over 3 epochs (synthetic MNIST, CPU): lr 0.08 at batch
# 1024 tracks the baseline to the end (loss 0.011); 0.16 at 2048, 0.32 at 4096 and 0.5 at 8192 track it through
# the first plateau, then blow up where the loss falls (4.2 at 115k samples) and end at 1.8 to 2.3.
LR_MAX = 0.08


class Cnn(nn.Module):
    def __init__(self, in_dim, n_class):  # 28x28x1
        super(Cnn, self).__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(in_dim, 6, 3, stride=1, padding=1),  # 28 x28
            nn.ReLU(True),
            nn.MaxPool2d(2, 2),  # 14 x 14
            nn.Conv2d(6, 16, 5, stride=1, padding=0),  # 10 * 10*16
            nn.ReLU(True),
            nn.MaxPool2d(2, 2),
        )  # 5x5x16

        self.fc = nn.Sequential(nn.Linear(400, n_class))  # 400 = 5 * 5 * 16

    def forward(self, x):
        out = self.conv(x)
        out = out.view(out.size(0), 400)  # 400 = 5 * 5 * 16,
        out = self.fc(out)
        return out


def build_dataset(root):
    return mnist(root, train=True, transform=transforms.ToTensor())


def build_model():
    return Cnn(1, 10)


def build_loss():
    return nn.CrossEntropyLoss()


def build_optimizer(params, lr):
    return optim.SGD(params, lr=lr)
