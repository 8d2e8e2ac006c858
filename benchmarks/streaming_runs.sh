#!/usr/bin/env bash
# The streaming (ImageNet-class) measurements and the layout's speed check, on a host with two GPUs.
#
#     bash benchmarks/streaming_runs.sh OUT truth   # GPU0: truth benchmark; GPU1: GPU tests, mnist search, speed.py
#     bash benchmarks/streaming_runs.sh OUT search  # GPU0: imagenet search, default options; GPU1: truth benchmark
#     bash benchmarks/streaming_runs.sh OUT final   # GPU0: imagenet search; GPU1: truth benchmark, then diagnose
#     bash benchmarks/streaming_runs.sh OUT winner  # GPU0: the search's winner through the truth benchmark, then
#                                                   # autotune diagnose; GPU1: the hand-timed sweep (bf16+CL)
#
# Each side gets its own GPU and its own half of the cores (taskset), so neither perturbs the other's
# numbers: GPU0 with cores 0..15 is the 16-core host the streaming issue measured on. The synthetic
# ImageNet folder (51,200 JPEGs) is written first, with every core. Logs go to OUT/<side>.log.
set -u
OUT=$(realpath -m "$1")
PART=$2
mkdir -p "$OUT"
REPO=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONUNBUFFERED=1 AUTOTUNE_DATA=/tmp/autotune-data
NCPU=$(nproc)
HALF=$((NCPU / 2))
A="taskset -c 0-$((HALF - 1))"
B="taskset -c $HALF-$((NCPU - 1))"
stamp() { while IFS= read -r line; do printf '%s %s\n' "$(date +%T)" "$line"; done; }
side() {  # side NAME GPU COMMAND...: run in a folder of its own, on that GPU, output stamped into OUT/NAME.log
    local name=$1 gpu=$2
    shift 2
    mkdir -p "/tmp/$name"
    (cd "/tmp/$name" && CUDA_VISIBLE_DEVICES=$gpu "$@") 2>&1 | stamp >>"$OUT/$name.log"
}

python3 -c "from autotune.workloads.imagenet import imagenet_folder; print(len(imagenet_folder('$AUTOTUNE_DATA')))" \
    2>&1 | stamp >>"$OUT/data.log"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >>"$OUT/data.log"

case $PART in
truth)
    side gpu0 0 bash -c "$A python3 $REPO/benchmarks/truth.py --out /tmp/gpu0/truth --seconds 30;
        cp /tmp/gpu0/truth/truth.json $OUT/truth.json" &
    side gpu1 1 bash -c "cd $REPO && $B timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider;
        cd /tmp/gpu1 && $B timeout 180 python3 -m autotune search --recipe mnist_cnn;
        cp recipes/mnist_cnn.tuned.toml $OUT/mnist_cnn.tuned.toml;
        $B timeout 230 python3 $REPO/benchmarks/speed.py --out /tmp/gpu1/bench --trials 30 \
            --budget 90 --searches mnist_cnn@bs128,cifar10_resnet18@bs128" &
    wait
    ;;
search)
    side gpu0 0 bash -c "$A timeout 590 python3 -m autotune search --recipe imagenet_resnet50;
        cp recipes/imagenet_resnet50.tuned.toml $OUT/ ; $A python3 -m autotune show --recipe imagenet_resnet50" &
    side gpu1 1 bash -c "$B timeout 560 python3 $REPO/benchmarks/truth.py --out /tmp/gpu1/truth --seconds 30;
        cp /tmp/gpu1/truth/truth.json $OUT/truth.json" &
    wait
    ;;
final)
    side gpu0 0 bash -c "$A timeout 540 python3 -m autotune search --recipe imagenet_resnet50;
        cp recipes/imagenet_resnet50.tuned.toml $OUT/" &
    side gpu1 1 bash -c "$B timeout 420 python3 $REPO/benchmarks/truth.py --out /tmp/gpu1/truth --seconds 30;
        cp /tmp/gpu1/truth/truth.json $OUT/truth.json;
        $B timeout 110 python3 -m autotune diagnose --recipe imagenet_resnet50" &
    wait
    ;;
winner)
    side gpu0 0 bash -c "cd $REPO && $A python3 benchmarks/truth.py --configs tuned --seconds 30 --out /tmp/gpu0/winner;
        cd /tmp/gpu0 && $A timeout 240 python3 -m autotune diagnose --recipe imagenet_resnet50" &
    side gpu1 1 bash -c "$B timeout 400 python3 $REPO/benchmarks/truth.py --configs sweep --match bf16 --seconds 30 \
        --out /tmp/gpu1/sweep; cp /tmp/gpu1/sweep/truth.json $OUT/sweep.json" &
    wait
    ;;
esac
