#!/usr/bin/env bash
# The GPU measurements of streams and of short budgets, on a host with one GPU, in parts that each fit one
# 10-minute command. Run the parts in this order on one warm host:
#
#     bash benchmarks/streams_gpu_runs.sh OUT stream   # the data (JPEGs, then their webdataset shards), then
#                                                      # `autotune search --recipe webdataset_resnet50` at its defaults
#     bash benchmarks/streams_gpu_runs.sh OUT truth    # that search's winner through the truth benchmark
#                                                      # (TRUTH_S, default 20), beside its own settings timed by
#                                                      # hand; imagenet_resnet50's search at --time-budget 160;
#                                                      # then, in the time left, the committed imagenet_resnet50
#                                                      # profile through the truth benchmark
#     bash benchmarks/streams_gpu_runs.sh OUT minutes  # text_transformer's search at --time-budget 110, then at its
#                                                      # default budget (PART_S=600: the two may need all of it)
#     bash benchmarks/streams_gpu_runs.sh OUT hand     # `truth` in another order, without a search: the winner, the
#                                                      # imagenet_resnet50 profile, then the workload's own settings
#     bash benchmarks/streams_gpu_runs.sh OUT short    # the data, imagenet_resnet50's search at --time-budget 160,
#                                                      # then text_transformer's at 110 where the part has time
#     bash benchmarks/streams_gpu_runs.sh OUT graph    # the hand loop's CUDA graph test (pytest -m gpu), then the
#                                                      # winner (this host's, else WON's) by hand alone (its step in
#                                                      # a CUDA graph), then the committed imagenet_resnet50 profile
#                                                      # by hand, then its own settings by hand, where the part has time
#     bash benchmarks/streams_gpu_runs.sh OUT parts    # where a ResNet-50 part measurement's seconds go
#                                                      # (lab/probes/part_costs.py), on both data sets
#     bash benchmarks/streams_gpu_runs.sh OUT check    # without a search: the data, then through the truth
#                                                      # benchmark (one slice after autotune's round, TRUTH_S) the
#                                                      # stream at 15 workers, eager (the last search's winner), and
#                                                      # at 16, compiled (CHECK_MATCH: another regular expression
#                                                      # over the wide set's names); then its own settings by hand
#
# `truth` reads the winner that `stream` wrote on this host, else the one in WON (a folder holding
# recipes/webdataset_resnet50.tuned.toml: a search's answer brought from another host), else the tuned file in the
# tree. Each step's output
# goes, stamped, to OUT/<step>.log, and a step is given only the seconds left of the part's budget (PART_S, default
# 575), so one that hangs cannot take the rest. The data step is quick where the data is written already.
set -u
OUT=$(realpath -m "$1")
PART=$2
mkdir -p "$OUT"
REPO=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONUNBUFFERED=1 AUTOTUNE_DATA=/tmp/autotune-data
END=$(($(date +%s) + ${PART_S:-575}))

stamp() { while IFS= read -r line; do printf '%s %s\n' "$(date +%T)" "$line"; done; }
left() { echo $((END - $(date +%s))); }
step() {  # step NAME COMMAND...: in /tmp/runs/NAME, at most the seconds left, output to OUT/NAME.log
    local name=$1
    shift
    if [ "$(left)" -lt 10 ]; then
        echo "$(date +%T) [$name: skipped, the part's time is spent]" >>"$OUT/progress.log"
        return
    fi
    mkdir -p "/tmp/runs/$name"
    local t0=$SECONDS
    (cd "/tmp/runs/$name" && timeout "$(left)" "$@") 2>&1 | stamp >>"$OUT/$name.log"
    echo "$(date +%T) [$name: exit ${PIPESTATUS[0]}, $((SECONDS - t0)) s]" | tee -a "$OUT/$name.log" >>"$OUT/progress.log"
}
truth() {  # truth NAME RECIPE FOLDER [own]: the tuned profile in FOLDER/recipes through the truth benchmark,
    # stated against by hand; with `own`, then the workload's own settings, by hand only (the speed-up's denominator)
    step "$1" bash -c "cd '$3' && python3 '$REPO/benchmarks/truth.py' --recipe $2 --configs tuned --match '^tuned' \
        --seconds ${TRUTH_S:-20} --rounds 1 --out /tmp/runs/$1"
    cp "/tmp/runs/$1/truth.json" "$OUT/$1.json" 2>/dev/null
    [ "${4:-}" = own ] || return 0
    by_hand "$1_own" $2 "$3" '^workload' 20
}
by_hand() {  # by_hand NAME RECIPE FOLDER MATCH DEFAULT_S: FOLDER's configs matching MATCH by hand alone, for TRUTH_S
    # seconds (else DEFAULT_S)
    step "$1" bash -c "cd '$3' && python3 '$REPO/benchmarks/truth.py' --recipe $2 --configs tuned --match '$4' \
        --hand-only --seconds ${TRUTH_S:-$5} --out /tmp/runs/$1"
    cp "/tmp/runs/$1/truth.json" "$OUT/$1.json" 2>/dev/null
}
winner() {  # the folder whose recipes/ holds the webdataset winner: this host's search, else WON, else the tree
    if [ -f /tmp/runs/wds_search/recipes/webdataset_resnet50.tuned.toml ]; then echo /tmp/runs/wds_search
    else realpath -m "${WON:-$REPO}"; fi
}
data() {  # the JPEGs and their shards, written once per host before any clock starts
    step data python3 -c "from autotune.workloads.builtins.webdataset_resnet50 import build_dataset
from autotune.streams.sources import describe
print(describe(build_dataset('$AUTOTUNE_DATA')))"
}
TREE=$(cd "$REPO" && git rev-parse --short HEAD 2>/dev/null && git diff --name-only HEAD 2>/dev/null | sed 's/^/+ /')
echo "$(date +%T) $PART on $(nproc) cores, $(nvidia-smi --query-gpu=name --format=csv,noheader), commit $(echo $TREE)" \
    >>"$OUT/progress.log"

case $PART in
stream)
    data
    step wds_search bash -c "python3 -m autotune search --recipe webdataset_resnet50 \
        && python3 -m autotune show --recipe webdataset_resnet50"
    cp /tmp/runs/wds_search/recipes/webdataset_resnet50.tuned.toml "$OUT/" 2>/dev/null
    ;;
truth)
    data
    truth wds_truth webdataset_resnet50 "$(winner)" own
    # Each of the rest only where the part has the time it takes: one cut short says nothing.
    if [ "$(left)" -ge 220 ]; then
        step imagenet160 bash -c "python3 -m autotune search --recipe imagenet_resnet50 --time-budget 160 \
            && python3 -m autotune show --recipe imagenet_resnet50"
        cp /tmp/runs/imagenet160/recipes/imagenet_resnet50.tuned.toml "$OUT/imagenet160.tuned.toml" 2>/dev/null
    fi
    [ "$(left)" -lt 200 ] || truth imagenet_truth imagenet_resnet50 "$REPO"
    ;;
hand)
    data
    truth wds_truth webdataset_resnet50 "$(winner)"
    [ "$(left)" -lt 200 ] || truth imagenet_truth imagenet_resnet50 "$REPO"
    [ "$(left)" -lt 100 ] || by_hand wds_truth_own webdataset_resnet50 "$(winner)" '^workload' 20
    ;;
check)
    data
    step wds_check python3 "$REPO/benchmarks/truth.py" --recipe webdataset_resnet50 --configs wide --no-bracket \
        --match "${CHECK_MATCH:-^(15 workers, bf16\+CL, uint8 normalized|16 workers, bf16\+CL, uint8, compiled)}" \
        --seconds "${TRUTH_S:-30}" --rounds 1 --out /tmp/runs/wds_check
    cp /tmp/runs/wds_check/truth.json "$OUT/wds_check.json" 2>/dev/null
    step wds_own python3 "$REPO/benchmarks/truth.py" --recipe webdataset_resnet50 --configs default --hand-only \
        --match "^workload's own" --seconds "${TRUTH_S:-30}" --out /tmp/runs/wds_own
    cp /tmp/runs/wds_own/truth.json "$OUT/wds_own.json" 2>/dev/null
    ;;
short)
    data
    step imagenet160 bash -c "python3 -m autotune search --recipe imagenet_resnet50 --time-budget 160 \
        && python3 -m autotune show --recipe imagenet_resnet50"
    cp /tmp/runs/imagenet160/recipes/imagenet_resnet50.tuned.toml "$OUT/imagenet160.tuned.toml" 2>/dev/null
    [ "$(left)" -lt 130 ] || step text110 python3 -m autotune search --recipe text_transformer --time-budget 110
    cp /tmp/runs/text110/recipes/text_transformer.tuned.toml "$OUT/text110.tuned.toml" 2>/dev/null
    ;;
graph)
    data
    step gpu_test python3 -m pytest -q -o addopts= -m gpu -p no:cacheprovider "$REPO/tests/benchmarks/test_scripts.py" -k graph
    by_hand wds_graph webdataset_resnet50 "$(winner)" '^tuned' 15
    [ "$(left)" -lt 90 ] || by_hand imagenet_hand imagenet_resnet50 "$REPO" '^tuned' 15
    [ "$(left)" -lt 70 ] || by_hand wds_own_hand webdataset_resnet50 "$(winner)" '^workload' 15
    ;;
minutes)
    step text110 bash -c "python3 -m autotune search --recipe text_transformer --time-budget 110"
    cp /tmp/runs/text110/recipes/text_transformer.tuned.toml "$OUT/text110.tuned.toml" 2>/dev/null
    step text_default bash -c "python3 -m autotune search --recipe text_transformer"
    cp /tmp/runs/text_default/recipes/text_transformer.tuned.toml "$OUT/text_default.tuned.toml" 2>/dev/null
    ;;
parts)
    data
    export TORCHINDUCTOR_CACHE_DIR=/tmp/runs/parts_cache
    step parts_imagenet python3 "$REPO/lab/probes/part_costs.py" --recipe imagenet_resnet50 --workers 15 \
        --repeat 2 --out /tmp/runs/parts_imagenet.json
    step parts_recompile python3 "$REPO/lab/probes/part_costs.py" --recipe imagenet_resnet50 --only "compiled$" \
        --out /tmp/runs/parts_recompile.json
    step parts_wds python3 "$REPO/lab/probes/part_costs.py" --recipe webdataset_resnet50 --workers 15,8 \
        --batches 256,1024 --repeat 1 --only "loader.*(bs=256|bs=1024.*held)" --out /tmp/runs/parts_wds.json
    cp /tmp/runs/parts_*.json "$OUT/" 2>/dev/null
    ;;
*)
    echo "unknown part $PART: stream, truth, hand, check, short, graph, minutes or parts" >&2
    exit 2
    ;;
esac
