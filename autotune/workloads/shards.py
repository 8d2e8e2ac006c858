"""An ImageNet-class folder of JPEGs packed into webdataset tar shards, written once.

``imagenet_shards(root)`` packs the JPEGs ``imagenet_folder`` reads (the real
ImageNet's train split when it is under ``root/imagenet/train``, else the synthetic
folder written beside it) into tar shards ``train-000000.tar`` ... under
``root/imagenet-shards/train`` (``imagenet-synthetic-shards`` for the synthetic
ones), and returns their paths. Each sample is webdataset's layout: ``KEY.jpg``, the
file's bytes as they are (decoding stays the training loop's work), and ``KEY.cls``,
its class as text. Samples are spread over the shards in a fixed shuffled order, so
every shard holds many classes and a worker reading a few shards sees them all.

Shards are written in parallel over the machine's cores, each as a temporary file
renamed when whole: a writer killed halfway leaves no half shard under a real name,
and the next one writes them again. A marker file, written last, lists the shards.
"""

from __future__ import annotations

import io
import os
import random
import sys
import tarfile
from pathlib import Path

from autotune.workloads.datasets import building, in_parallel
from autotune.workloads.imagenet import imagenet_folder

SHARDS = 64  # webdataset's split_by_worker hands out whole shards: 64 keep 15 workers each busy with 4 or more
MARK = "AUTOTUNE_SHARDS"  # lists the shards once every one is whole
REAL_IMAGES = 1_281_167  # ImageNet-1k's train split
SYNTHETIC_IMAGES = 51_200  # imagenet.IMAGES, the synthetic folder's default


def imagenet_images(root: str | Path) -> int:
    """How many images `imagenet_shards(root)` holds (its marker says, once written), else will hold: the real
    train split's, or the synthetic folder's."""
    mark = _shard_folder(root) / MARK
    if mark.exists():
        return int(mark.read_text().split()[1])
    if (Path(root) / "imagenet" / "train").is_dir():
        return REAL_IMAGES
    return int(os.environ.get("AUTOTUNE_SYNTHETIC_IMAGENET_IMAGES", SYNTHETIC_IMAGES))


def _shard_folder(root: str | Path) -> Path:
    """Where the shards of the real ImageNet, or of the synthetic folder, go."""
    real = Path(root) / "imagenet" / "train"
    return Path(root) / ("imagenet-shards" if real.is_dir() else "imagenet-synthetic-shards") / "train"


def imagenet_shards(root: str | Path, shards: int | None = None) -> list[str]:
    """The paths of the tar shards of `root`'s ImageNet-class JPEGs, packed on first use.

    `shards`: how many to write, by default AUTOTUNE_IMAGENET_SHARDS, else 64 (never more than there are images).
    Shards already written are used as they are, however many they are.
    """
    out = _shard_folder(root)
    with building(out):
        mark = out / MARK
        if not mark.exists():  # the folder is listed only now: a million files take seconds to list
            wanted = shards or int(os.environ.get("AUTOTUNE_IMAGENET_SHARDS", SHARDS))
            write_shards(imagenet_folder(root).samples, out, wanted)
        names = mark.read_text().split()[2:]  # after "images N"
    return [str(out / name) for name in names]


def write_shards(samples: list[tuple[str, int]], out: Path, shards: int) -> list[str]:
    """Pack `samples` ((JPEG path, class) pairs) into `shards` tar files under `out`; returns their names."""
    count = max(1, min(shards, len(samples)))
    if not os.environ.get("AUTOTUNE_QUIET"):  # trial processes inherit it: the user hears it once, from the search
        print(f"autotune: packing {len(samples):,} JPEGs into {count} webdataset shards in {out} (once)",
              file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob("train-*.tar"), *out.glob(".train-*.tar.tmp")]:  # a killed writer's, of any count
        stale.unlink()
    order = list(range(len(samples)))
    random.Random(0).shuffle(order)  # a folder lists its images class by class: every shard gets many classes
    names = [f"train-{i:06d}.tar" for i in range(count)]
    jobs = [(out / name, [(f"{j:08d}", *samples[j]) for j in order[i::count]]) for i, name in enumerate(names)]
    in_parallel(_write_shard, jobs)
    (out / MARK).write_text(f"images {len(samples)}\n" + "\n".join(names) + "\n")
    return names


def _write_shard(path: Path, members: list[tuple[str, str, int]]) -> None:
    """One shard, each sample's `KEY.jpg` and `KEY.cls`; written under a temporary name, renamed when whole."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT) as tar:
        for key, image, label in members:
            _add(tar, f"{key}.jpg", Path(image).read_bytes())
            _add(tar, f"{key}.cls", str(label).encode())
    os.replace(tmp, path)


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o444, 0  # the same bytes every time it is written
    tar.addfile(info, io.BytesIO(data))
