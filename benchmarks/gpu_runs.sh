#!/usr/bin/env bash
# Every GPU measurement quoted in README.md, docs/ and lab/results/, in one go.
#
#     bash benchmarks/gpu_runs.sh RESULTS_DIR [PART...]
#
# PART is any of bench, diagnose, gputests, noparity, plancache, scaleout (default: all of them).
#
# On a host with two GPUs, phase 1 runs side by side on separate GPUs and separate
# halves of the CPU cores (taskset), so neither perturbs the other's numbers:
#   GPU 0, cores 0..n/2-1:  benchmarks/speed.py (three fresh searches, then every loop in one process);
#   GPU 1, cores n/2..n-1:  autotune diagnose for both built-ins, the GPU tests, and a search with
#                           --no-parity-check whose winner is then put through the parity check.
# Phase 2 uses the whole host: cuDNN's plan cache shown (benchmarks/plan_cache.py), the same mnist_cnn
# study on one GPU, then with --gpus 0,1, then the two-GPU test. With one GPU, phase 1's two parts
# run one after the other, then the plan cache; the scale-out part is skipped.
# Each step's output goes to its own log in RESULTS_DIR; progress.log says what ended when.
# Of a run, lab/results/ keeps a README (commit, command, date, hardware), the summary logs and
# the tuned files; study files, trial-process logs, progress.log and nvidia-smi.csv stay out of the
# repository (lab/results/h200/README.md).
set -u
R=$(realpath -m "$1")
mkdir -p "$R"
REPO=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONUNBUFFERED=1
NCPU=$(nproc)
NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())")
shift
PARTS=${*:-bench diagnose gputests noparity plancache scaleout}

log() { echo "[$(date +%T)] $*" | tee -a "$R/progress.log"; }

# Each output line starts with the seconds since its command started (to within the ~0.1 s Python takes to start).
STAMP='import sys, time
t0 = time.monotonic()
for line in iter(sys.stdin.buffer.readline, b""):  # line by line as it comes, not in read-ahead blocks
    sys.stdout.write("%7.2f  %s" % (time.monotonic() - t0, line.decode("utf-8", "replace")))
    sys.stdout.flush()'

# `timed NAME SECONDS CMD...`: runs CMD with a time limit, output to $R/NAME.log (stamped), wall time appended.
timed() {
    local name=$1 limit=$2
    shift 2
    local t0 t1
    t0=$(date +%s.%N)
    timeout "$limit" "$@" 2>&1 | python3 -u -c "$STAMP" >"$R/$name.log"
    local rc=${PIPESTATUS[0]}
    t1=$(date +%s.%N)
    local wall
    wall=$(python3 -c "print(f'{$t1 - $t0:.1f}')")
    echo "[wall ${wall} s, exit ${rc}]" >>"$R/$name.log"
    log "$name: exit $rc, wall $wall s"
    return $rc
}

benchmark() {
    want bench || return 0
    timed speed 1500 python3 "$REPO/benchmarks/speed.py" --out "$R/bench" --trials 30 --budget 150
}

want() { [[ " $PARTS " == *" $1 "* ]]; }

side() {
    if want diagnose; then
        mkdir -p "$R/diagnose"
        (cd "$R/diagnose" && timed diagnose_mnist_cnn 240 python3 -m autotune diagnose --recipe mnist_cnn)
        (cd "$R/diagnose" && timed diagnose_cifar10_resnet18 300 python3 -m autotune diagnose --recipe cifar10_resnet18)
    fi
    want gputests && (cd "$REPO" && timed pytest_gpu 600 python3 -m pytest -p no:cacheprovider -m gpu -v tests/test_loop.py tests/test_diagnose.py tests/test_parity.py tests/test_workload.py)
    want noparity || return 0
    # A search without the parity check, then the check on what it chose. If the default learning-rate
    # rule happens to keep the winner honest, the same again with the rate left unscaled.
    local variant
    for variant in linear none; do
        mkdir -p "$R/noparity_$variant"
        cd "$R/noparity_$variant" || return
        timed "noparity_${variant}_search" 420 python3 -m autotune search --recipe mnist_cnn --trials 30 --time-budget 150 --no-parity-check --lr-scaling "$variant" || break
        timed "noparity_${variant}_show" 60 python3 -m autotune show --recipe mnist_cnn
        timed "noparity_${variant}_check" 300 python3 "$REPO/benchmarks/parity_of_profile.py" --recipe mnist_cnn || break  # rejected: shown
    done
}

plancache() {
    want plancache || return 0
    timed plan_cache 300 python3 "$REPO/benchmarks/plan_cache.py" --recipe mnist_cnn --batch-size 1024
}

# The same fresh mnist_cnn study on one GPU, then on two, SCALEOUT_PAIRS times (default 1): the
# pairs show how much the ratio moves from run to run.
scaleout() {
    want scaleout || return 0
    local n suffix
    for n in $(seq 1 "${SCALEOUT_PAIRS:-1}"); do
        suffix=$([ "$n" = 1 ] || echo "_$n")
        mkdir -p "$R/one_gpu$suffix" "$R/two_gpus$suffix"
        (cd "$R/one_gpu$suffix" && timed "one_gpu$suffix" 900 python3 -m autotune search --recipe mnist_cnn --trials 40 --study one-gpu)
        (cd "$R/two_gpus$suffix" && timed "two_gpus$suffix" 900 python3 -m autotune search --recipe mnist_cnn --trials 40 --study two-gpus --gpus 0,1)
        (cd "$R/two_gpus$suffix" && timed "two_gpus_show$suffix" 60 python3 -m autotune show --recipe mnist_cnn)
    done
    (cd "$REPO" && timed pytest_gpu_scaleout 600 python3 -m pytest -p no:cacheprovider -m gpu -v tests/test_scaleout.py)
}

log "start: $PARTS; $NGPU GPUs, $NCPU CPU cores, $(python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0))')"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv >"$R/nvidia-smi.csv" 2>&1
if [ "$NGPU" -ge 2 ]; then
    HALF=$((NCPU / 2))
    (export CUDA_VISIBLE_DEVICES=0 && taskset -cp "0-$((HALF - 1))" $BASHPID >/dev/null && benchmark) &
    A=$!
    (export CUDA_VISIBLE_DEVICES=1 && taskset -cp "$HALF-$((NCPU - 1))" $BASHPID >/dev/null && side) &
    B=$!
    wait $A $B
    log "phase 1 done"
    plancache
    scaleout
else
    benchmark
    side
    plancache
fi
log "all done"
touch "$R/DONE"
