"""pytorch/examples' MNIST as that recipe writes it: Adadelta at lr 1.0, batch 64, dropout, log-softmax.

A workload the built-ins do not resemble: an adaptive optimizer, whose rate must not
grow linearly with the batch (autotune's default rule scales it by the square root).

    autotune search --recipe benchmarks/workloads/mnist_adadelta.py

From https://github.com/pytorch/examples/blob/main/mnist/main.py: the model, the
transform, the optimizer and the DataLoader settings (its `--batch-size 64`, and on
CUDA `num_workers=1, pin_memory=True, shuffle=True`). Its StepLR schedule changes the
rate per epoch and is left out: a search measures within an epoch. Training code keeps
it: `tuned_step` follows a scheduler, also under a CUDA graph (docs/step.md).
"""

import torch.nn.functional as F
from torch import nn, optim
from torchvision import transforms

from autotune.workloads.datasets import mnist

DEFAULTS = dict(
    batch_size=64,  # the example's --batch-size
    lr=1.0,  # the example's --lr, for Adadelta
    epochs=14,  # the example's --epochs: the declared run
    shuffle=True,
    num_workers=1,  # the example's cuda_kwargs
    pin_memory=True,
)
# ToTensor and Normalize have no randomness: the transformed data set may be computed once and kept on the GPU.
DETERMINISTIC_TRANSFORM = True


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch_flatten(x)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


def torch_flatten(x):
    return x.flatten(1)  # the example's torch.flatten(x, 1)


def build_dataset(root):
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    return mnist(root, train=True, transform=transform)


def build_model():
    return Net()


def build_loss():
    return nn.NLLLoss()  # the example's F.nll_loss on log-probabilities


def build_optimizer(params, lr):
    return optim.Adadelta(params, lr=lr)
