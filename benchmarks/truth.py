"""Does autotune's number survive ground truth? Its measurement of a config beside a loop timed by hand.

    python benchmarks/truth.py --recipe imagenet_resnet50 --out /tmp/truth
    python benchmarks/truth.py --recipe imagenet_resnet50 --configs sweep --seconds 30
    python benchmarks/truth.py --recipe imagenet_resnet50 --configs tuned
    python benchmarks/truth.py --recipe webdataset_resnet50 --configs tuned
    taskset -c 0-4 python benchmarks/truth.py --configs decode   # both decode paths on 5 cores

For each config, autotune measures it as a search states a finalist's number: in
`--rounds` trial processes (``autotune.procs.pool.TrialPool``), each started afresh,
with the search's windows, the median of their rates (a search's default is 2 rounds,
``SearchOptions.rounds``). In processes of their own, started afresh as a user's
training script is (not this one, which ran the rows before), a plain PyTorch loop
written out in ``truthbench/loop.py`` (no autotune code in it: a DataLoader, autocast, channels_last, SGD)
warms up, skips twice the batches its workers can prefetch, and is timed, epochs and
their start-up included, the device synchronised only at the ends: for `--seconds` (at
least 30 by default) in `--rounds` + 1 slices, one before each of autotune's
measurements and one after the last, each warmed up and past its backlog anew, and
each stretched to whole epochs' worth of batches where the first can reach it within
three times the row's `--seconds` (so it crosses epoch boundaries as often as a training
run does in as many batches; ``more_batches``, ``slice_limit``). Why
slices in fresh processes, interleaved: on H200 hosts one config's rate moved by a
third between processes started a minute apart (a loader's CPU per sample from 3.3 to
4.4 ms, ``lab/probes/heritage.py``), so a single process on either side is one
draw of the host's state, not the config's rate. Slices that disagree by more than the
tolerance show a host that moved, and such a row says so instead of passing for a
measurement error; ``--no-bracket`` times the hand loop in one piece, after.
The table gives both numbers and their ratio; every number is from this run.
Under each row, both are split the same way: the rate within epochs, and what an
epoch boundary costs beyond it (the hand loop's from when it received each batch),
so a ratio off 1 shows which of the two parts autotune has wrong; and the hand
loop's rate per 5 s, which shows a host whose cores slow under sustained load.

A ``decode = gpu`` config's hand loop is written out the same way: workers read each
file's bytes, and batch k+1 is decoded and augmented on a side stream while batch
k trains. The one autotune function it calls is the per-batch decode itself
(``autotune.loop.device_decode.decode_batch``): what is checked is the measurement
of a loop, not the arithmetic of a crop, which the CPU tests compare with
torchvision's. A ``device_normalize`` config's hand loop gives its workers the pipeline up to
ToTensor, then PILToTensor, and divides by 255 and normalises on the device itself. A
hybrid decode config's (``decode_share`` below 1) gives its workers the same split by
sample index as autotune's loader, each batch's host half made by the pipeline (up to
uint8 pixels, finished on the device, where it ends in ToTensor and Normalize, as
autotune's does) and its device half decoded on the side stream.
A ``placement = device`` config's hand loop reads the data set once into tensors on the device and slices a
fresh permutation of it each epoch (``truthbench/data.py``, ``OnDevice``), for a workload whose samples are the
same at every read (DETERMINISTIC_TRANSFORM).
A ``cuda_graph`` config's hand loop captures its step whole in a CUDA graph, as PyTorch's
documentation writes it (static input and target, three eager steps on a side stream, the
capture, then a copy and a replay a batch; ``truthbench/loop.py``, ``Graphed``); on a CPU,
or for a workload that computes its own loss, it runs eager, and its row says so.

A stream (a workload whose data set is an IterableDataset: webdataset_resnet50) is read
by its hand loop as it comes, with no sampler and no shuffle; its pass is the workload's
`samples_per_epoch` in batches (its epochs end where its workers run out, as a training
run's do), and the time to its first batch (workers started, shards opened, a shuffle
buffer filled) is stated apart from the rates, beside autotune's. A device_normalize
config's workers get a copy of the stream whose last stage, `.map_tuple(augment, ...)`,
runs the augmentation up to ToTensor, then PILToTensor, written out in ``truthbench/data.py``. A
``decode = gpu`` config's stream is the user's stages up to its decode, then each sample's
JPEG bytes and class (``truthbench/data.py``, ``jpeg_stream``); a hybrid's workers decode the
JPEGs whose CRC-32 falls above the share with PIL, as autotune's hybrid splits a stream:

    python benchmarks/truth.py --recipe webdataset_resnet50 --configs tuned
"""

from __future__ import annotations

# This script's folder is first on sys.path when it runs, so its package is found from any working folder.
from truthbench.cli import main

if __name__ == "__main__":
    main(__doc__)
