"""ResNet-50 on ImageNet-class JPEGs streamed from webdataset tar shards: imagenet_resnet50's loop, read as a stream.

    autotune search --recipe webdataset_resnet50

The JPEGs are imagenet_resnet50's (the real ImageNet under $AUTOTUNE_DATA/imagenet/train
when it is there, else the synthetic folder of 51,200 written beside it), packed once into
64 tar shards under $AUTOTUNE_DATA (``autotune.workloads.shards``). The pipeline is what a
user writes with webdataset: each rank and each DataLoader worker reads its own shards, a
shuffle buffer mixes their samples, PIL decodes, and the pytorch/examples ImageNet
augmentation runs per sample. The rest is pytorch/examples' settings: ResNet-50, SGD with
momentum, batch 256, 4 workers. A stream's order is its own: no DataLoader shuffle.
"""

import webdataset as wds
from torch import nn, optim
from torchvision import transforms
from torchvision.models import resnet50

from autotune.workloads.locate import data_root
from autotune.workloads.shards import imagenet_images, imagenet_shards

DEFAULTS = dict(
    batch_size=256,  # pytorch/examples' imagenet default
    lr=0.1,  # SGD learning rate at batch 256 (Goyal et al.: 0.1 per 256)
    epochs=90,  # the recipe's declared run
    num_workers=4,  # the recipe's --workers default
    pin_memory=True,  # as the recipe's DataLoader
    samples_per_epoch=imagenet_images(data_root()),  # one pass over the shards: every image once
)
# Linear scaling holds to batch 8k with warm-up (Goyal et al.); past it, this rate is the cap.
LR_MAX = 3.2

MEAN = (0.485, 0.456, 0.406)  # ImageNet's per-channel mean
STD = (0.229, 0.224, 0.225)  # and standard deviation
SHUFFLE = 1000  # samples in each worker's shuffle buffer: a few shards' worth mixed, as webdataset's examples do


def build_dataset(root):
    augment = transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(MEAN, STD),
    ])
    shards = imagenet_shards(root)
    return (
        wds.WebDataset(shards, shardshuffle=len(shards), nodesplitter=wds.split_by_node,
                       workersplitter=wds.split_by_worker)
        .shuffle(SHUFFLE)
        .decode("pil")
        .to_tuple("jpg", "cls")
        .map_tuple(augment, int)
    )


def build_model():
    return resnet50(num_classes=1000)


def build_loss():
    return nn.CrossEntropyLoss()


def build_optimizer(params, lr):
    return optim.SGD(params, lr=lr, momentum=0.9, weight_decay=1e-4)
