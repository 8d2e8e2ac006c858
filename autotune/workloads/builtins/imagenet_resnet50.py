"""ResNet-50 on an ImageNet-class folder of JPEGs, decoded and augmented on the CPU: a loader-bound workload.

    autotune search --recipe imagenet_resnet50

Built as pytorch/examples' imagenet recipe builds it: torchvision's ImageFolder
over $AUTOTUNE_DATA/imagenet/train (the real ImageNet when it is there, else a
synthetic folder of 51,200 JPEGs of about 500x375 written once), the standard
augmentation, ResNet-50, SGD with momentum. Its data set is far larger than any
GPU's memory once decoded, and its transform is random: it must stream.
"""

from torch import nn, optim
from torchvision import transforms
from torchvision.models import resnet50

from autotune.workloads.imagenet import imagenet_folder

DEFAULTS = dict(
    batch_size=256,  # pytorch/examples' imagenet default
    lr=0.1,  # SGD learning rate at batch 256 (Goyal et al.: 0.1 per 256)
    epochs=90,  # the recipe's declared run
    shuffle=True,
    num_workers=4,  # the recipe's --workers default
    pin_memory=True,  # as the recipe's DataLoader
)
# Linear scaling holds to batch 8k with warm-up (Goyal et al.); past it, this rate is the cap.
LR_MAX = 3.2

MEAN = (0.485, 0.456, 0.406)  # ImageNet's per-channel mean
STD = (0.229, 0.224, 0.225)  # and standard deviation


def build_dataset(root):
    augment = transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(MEAN, STD),
    ])
    return imagenet_folder(root, transform=augment)


def build_model():
    return resnet50(num_classes=1000)


def build_loss():
    return nn.CrossEntropyLoss()


def build_optimizer(params, lr):
    return optim.SGD(params, lr=lr, momentum=0.9, weight_decay=1e-4)
