#!/usr/bin/env bash
# The open GPU measurements on a host with one GPU, in parts that each fit one 10-minute command.
#
#     bash benchmarks/one_gpu_runs.sh OUT feed     # the GPU tests while the data set is written, then where a hybrid-
#                                                  # decode loader's time goes (lab/probes/hybrid_feed.py, FEED_CONFIGS),
#                                                  # then mnist_cnn's search at its defaults
#     bash benchmarks/one_gpu_runs.sh OUT close    # after a `search` part (SEARCH_ONLY=1) on the same host: mnist_cnn's
#                                                  # search at its defaults, the ImageNet winner through the truth
#                                                  # benchmark (TRUTH_S, default 20), the GPU tests GPU_TESTS names
#                                                  # (default: all), then the hybrid probe's FEED_CONFIGS while the
#                                                  # part's time lasts. On H100 hosts (2026-12-06): mnist 450 s
#                                                  # before the compile-cost rule, 102 s after it; a compiled
#                                                  # winner's truth row ran past 243 s (a non-compiled one: 196 s);
#                                                  # all GPU tests 171 s. So: mnist and the winner in one part, the
#                                                  # tests and the probes in a `tests` part
#     bash benchmarks/one_gpu_runs.sh OUT tests    # all GPU tests, the hybrid probe with the real compiled step
#                                                  # (FEED_CONFIGS), then each JPEG decoder (NVIMGCODEC_PATH)
#     bash benchmarks/one_gpu_runs.sh OUT where    # the hybrid probe beside the real compiled step, its device's
#                                                  # streams traced (FEED_CONFIGS)
#     bash benchmarks/one_gpu_runs.sh OUT engines  # each JPEG decoder on the device, idle and beside busy SMs
#                                                  # (lab/probes/decode_engines.py; nvImageCodec from NVIMGCODEC_PATH)
#     bash benchmarks/one_gpu_runs.sh OUT small    # mnist_cnn's search at its defaults, text_transformer's at
#                                                  # --time-budget 110, then imagenet_resnet50's in what is left
#     bash benchmarks/one_gpu_runs.sh OUT first    # GPU tests, both decode paths on 5 cores and the gpu path on
#                                                  # all cores (truth benchmark), the Adadelta MNIST search
#     bash benchmarks/one_gpu_runs.sh OUT search   # autotune search --recipe imagenet_resnet50, default options
#                                                  # (GPU_TESTS=expr: those GPU tests first, beside the data set),
#                                                  # then through the truth benchmark its winner, the workload's own
#                                                  # settings and the sweep's best rows (TRUTH_S seconds each)
#     bash benchmarks/one_gpu_runs.sh OUT check    # the whole hand sweep, by hand alone (SWEEP_S seconds a row,
#                                                  # default 20; at 15, 7 minutes on an H200 host), then the winner (this
#                                                  # host's last search, else the committed one) through the truth
#                                                  # benchmark while the part's time lasts
#     bash benchmarks/one_gpu_runs.sh OUT sweep    # the check part's hand sweep, the winner and the own settings,
#                                                  # all by hand alone (SWEEP_S seconds a row). At SWEEP_S 15 on an
#                                                  # H200 host: the data set 25 s, the sweep 481 s, the winner 79 s,
#                                                  # the own settings 48 s: more than one 585 s part (call 77 left
#                                                  # the own settings to a call of their own)
#     bash benchmarks/one_gpu_runs.sh OUT winner   # the winner through the truth benchmark (TRUTH_S, default 30),
#                                                  # then the own settings, then the truth rows TRUTH_MATCH finds
#                                                  # (default "^0 |^8 "); WINNER_ONLY=1: the winner alone
#     bash benchmarks/one_gpu_runs.sh OUT final    # autotune search --recipe text_transformer, GPU tests, the hand
#                                                  # sweep's best row, the ImageNet search on 5 cores with what is left
#     bash benchmarks/one_gpu_runs.sh OUT cores5   # the ImageNet search on 5 cores (--cpus 5), then its winner and
#                                                  # both decode paths through the truth benchmark on those 5 cores
#     bash benchmarks/one_gpu_runs.sh OUT speed    # benchmarks/speed.py (the README's mnist_cnn and cifar10 rows),
#                                                  # then the workload's own ImageNet settings through the truth
#                                                  # benchmark with a 60 s hand loop, then autotune diagnose
#     bash benchmarks/one_gpu_runs.sh OUT truth    # the truth benchmark's five default configs whose names
#                                                  # TRUTH_MATCH finds (default: all; two rounds each, between
#                                                  # three hand slices of whole epochs' worth), TRUTH_S seconds
#                                                  # of hand loop each (default 30; the first slice may run on to
#                                                  # an epoch's worth for up to 3x that, the others as it did).
#                                                  # On H200 hosts, with an epoch's worth a slice: the own
#                                                  # settings 226-305 s, 0 workers 108-138 s, 8 workers
#                                                  # 262-334 s, 15 workers 181-242 s, 16 workers 297-336 s
#                                                  # (the longest on the stop rule that weighs noise): four
#                                                  # parts, "own|^0 ", "^8 ", "^15 " and "^16 " ("^8 |^15 "
#                                                  # took 587 s of 590 once); at PART_S 585, 420, 400 and 390
#                                                  # they took 434 s (data set included), 329, 226 and 310 s
#     bash benchmarks/one_gpu_runs.sh OUT diagnose # autotune diagnose --recipe imagenet_resnet50 (the data set first
#                                                  # on a fresh host): 43-54 s on H200 hosts, before the stop rule
#                                                  # that weighs noise; past 100 s on 2c63ab4 (call 74)
#     bash benchmarks/one_gpu_runs.sh OUT probe    # the workload's own ImageNet settings batch by batch
#                                                  # (lab/probes/loader_probe.py), pinned and not, around the
#                                                  # truth benchmark's own row with a 60 s hand loop
#
# The synthetic ImageNet folder (51,200 JPEGs) is written once per host, under /tmp, while the GPU tests run;
# later parts on the same host reuse it. Each step's output goes, stamped, to OUT/<step>.log, and a step is
# given only the seconds left of the part's budget (PART_S, default 570), so one that hangs cannot take the rest.
set -u
OUT=$(realpath -m "$1")
PART=$2
mkdir -p "$OUT"
REPO=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONUNBUFFERED=1 AUTOTUNE_DATA=/tmp/autotune-data
END=$(($(date +%s) + ${PART_S:-570}))
NCPU=$(nproc)

stamp() { while IFS= read -r line; do printf '%s %s\n' "$(date +%T)" "$line"; done; }
left() { echo $((END - $(date +%s))); }
step() {  # step NAME COMMAND...: in its own folder under /tmp, at most the seconds left, output to OUT/NAME.log
    local name=$1
    shift
    # An earlier part's result in the step's folder must not be copied back as this one's where the step fails
    # early or is skipped (the folder itself stays: a search's study and tuned file there are what later parts read).
    rm -f "/tmp/runs/$name/truth.json"
    if [ "$(left)" -lt 10 ]; then
        echo "$(date +%T) [$name: skipped, the part's time is spent]" >>"$OUT/progress.log"
        return
    fi
    mkdir -p "/tmp/runs/$name"
    local t0=$SECONDS
    (cd "/tmp/runs/$name" && timeout "$(left)" "$@") 2>&1 | stamp >>"$OUT/$name.log"
    echo "$(date +%T) [$name: exit ${PIPESTATUS[0]}, $((SECONDS - t0)) s]" | tee -a "$OUT/$name.log" >>"$OUT/progress.log"
}
DATA="python3 -c \"from autotune.workloads.imagenet import imagenet_folder; print(len(imagenet_folder('$AUTOTUNE_DATA')))\";
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv"
winner() {  # winner [SECONDS [NAME [TRUTH.PY ARGS...]]]: the winner through truth.py as step NAME (default winner):
    # the tuned file a search part wrote on this host, if there is one, else the committed one
    local seconds=${1:-30} name=${2:-winner} from=$REPO
    shift $(($# < 2 ? $# : 2))
    [ -f /tmp/runs/imagenet_search/recipes/imagenet_resnet50.tuned.toml ] && from=/tmp/runs/imagenet_search
    echo "$(date +%T) the winner from $from/recipes/imagenet_resnet50.tuned.toml" >>"$OUT/progress.log"
    step "$name" bash -c "cd '$from' && python3 '$REPO/benchmarks/truth.py' --configs tuned --seconds $seconds $* \
        --out /tmp/runs/$name"
    cp "/tmp/runs/$name/truth.json" "$OUT/$name.json" 2>/dev/null
}
budget() { local s=$(($(left) - 45)); echo $((s > 30 ? s : 30)); }  # a search's --time-budget: what is left, less its tail
# The commit, and the tracked files that differ from it: a copy of a working tree can carry edits its HEAD lacks.
TREE=$(cd "$REPO" && git rev-parse --short HEAD 2>/dev/null && git diff --name-only HEAD 2>/dev/null | sed 's/^/+ /')
echo "$(date +%T) $PART on $NCPU cores, commit $(echo $TREE)" >>"$OUT/progress.log"

case $PART in
feed)
    [ -d "$AUTOTUNE_DATA/imagenet-synthetic" ] || step data bash -c "$DATA" &
    step pytest_gpu bash -c "cd $REPO && python3 -m pytest -q -m gpu -p no:cacheprovider -rs"
    wait
    step feed bash -c "cd $REPO/lab/probes && python3 hybrid_feed.py --seconds 12 --step-ms 38 --out $OUT/feed.json \
        --configs '${FEED_CONFIGS:-cpu;share=1,workers=8;share=1,workers=8,thread;share=0.5,workers=15;share=0.5,workers=15,thread;share=0.3,workers=15,thread}'"
    step mnist bash -c "python3 -m autotune search --recipe mnist_cnn && python3 -m autotune show --recipe mnist_cnn"
    ;;
close)
    step mnist bash -c "python3 -m autotune search --recipe mnist_cnn && python3 -m autotune show --recipe mnist_cnn"
    cp /tmp/runs/mnist/recipes/mnist_cnn.tuned.toml "$OUT/" 2>/dev/null
    [ -d "$AUTOTUNE_DATA/imagenet-synthetic" ] || step data bash -c "$DATA"
    # WINNER=-: not the winner (a `winner` part with WINNER_ONLY=1 times it in a 10-minute command of its own).
    [ "${WINNER:-}" != - ] && [ -f /tmp/runs/imagenet_search/recipes/imagenet_resnet50.tuned.toml ] \
        && winner "${TRUTH_S:-20}"
    # GPU_TESTS=- and FEED_CONFIGS=-: neither (a `tests` part runs them), so the winner's row has the rest of the part.
    [ "${GPU_TESTS:-}" != - ] && step pytest_gpu bash -c "cd $REPO && python3 -m pytest -q -m gpu -p no:cacheprovider \
        -rs -k '${GPU_TESTS:-}'"
    [ "${FEED_CONFIGS:-}" != - ] && step feed bash -c "cd $REPO/lab/probes && python3 hybrid_feed.py --seconds 12 \
        --step-ms 38 --out $OUT/feed.json --configs '${FEED_CONFIGS:-share=1,workers=8;share=0.3,workers=15}'"
    ;;
tests)
    [ -d "$AUTOTUNE_DATA/imagenet-synthetic" ] || step data bash -c "$DATA" &
    step pytest_gpu bash -c "cd $REPO && python3 -m pytest -q -m gpu -p no:cacheprovider -rs"
    wait
    # The real compiled step, not a GPU sleep: its kernels take the SMs the device decode needs.
    step feed bash -c "cd $REPO/lab/probes && python3 hybrid_feed.py --seconds 12 --out $OUT/feed.json --configs \
        '${FEED_CONFIGS:-cpu,real,workers=15;share=0.5,workers=15,real;share=0.25,workers=15,real;share=0.125,workers=15,real}'"
    step engines bash -c "cd $REPO/lab/probes && python3 decode_engines.py --out $OUT/engines.json"
    ;;
where)
    # Where a hybrid's time goes beside the real compiled step: the loop's thread by phase, and (trace=N) the
    # device's streams under the profiler; the uint8 host feed and two shares, the decode inline and threaded.
    [ -d "$AUTOTUNE_DATA/imagenet-synthetic" ] || step data bash -c "$DATA"
    step feed bash -c "cd $REPO/lab/probes && python3 hybrid_feed.py --seconds 12 --out $OUT/feed.json --configs \
        '${FEED_CONFIGS:-cpu,real,workers=15,trace=8;share=0.25,workers=15,real,trace=8;share=0.125,workers=15,real,trace=8;share=0.25,workers=15,real,thread}'"
    ;;
engines)
    [ -d "$AUTOTUNE_DATA/imagenet-synthetic" ] || step data bash -c "$DATA"
    step engines bash -c "cd $REPO/lab/probes && python3 decode_engines.py --out $OUT/engines.json"
    ;;
small)
    # The small models' searches at their defaults (text_transformer at --time-budget 110, the issue's case), then
    # the ImageNet search with what the part has left, less its tail: does each end in its budget with an answer?
    step mnist bash -c "python3 -m autotune search --recipe mnist_cnn && python3 -m autotune show --recipe mnist_cnn"
    cp /tmp/runs/mnist/recipes/mnist_cnn.tuned.toml "$OUT/" 2>/dev/null
    step text bash -c "python3 -m autotune search --recipe text_transformer --time-budget 110 \
        && python3 -m autotune show --recipe text_transformer"
    cp /tmp/runs/text/recipes/text_transformer.tuned.toml "$OUT/" 2>/dev/null
    [ -d "$AUTOTUNE_DATA/imagenet-synthetic" ] || step data bash -c "$DATA"
    step imagenet_short bash -c "python3 -m autotune search --recipe imagenet_resnet50 --time-budget $(($(left) - 40)) \
        && python3 -m autotune show --recipe imagenet_resnet50"
    cp /tmp/runs/imagenet_short/recipes/imagenet_resnet50.tuned.toml "$OUT/imagenet_short.tuned.toml" 2>/dev/null
    ;;
first)
    step data bash -c "$DATA" &
    step pytest_gpu bash -c "cd $REPO && python3 -m pytest -q -m gpu -p no:cacheprovider -rs"
    wait
    step truth_5cores taskset -c 0-4 python3 "$REPO/benchmarks/truth.py" --configs decode --seconds 15 --out .
    cp /tmp/runs/truth_5cores/truth.json "$OUT/truth_5cores.json" 2>/dev/null
    step truth_gpu_path python3 "$REPO/benchmarks/truth.py" --configs decode --match gpu --seconds 15 --out .
    cp /tmp/runs/truth_gpu_path/truth.json "$OUT/truth_gpu_path.json" 2>/dev/null
    step adadelta bash -c "python3 -m autotune search --recipe $REPO/benchmarks/workloads/mnist_adadelta.py \
        --time-budget $(budget) && python3 -m autotune show --recipe $REPO/benchmarks/workloads/mnist_adadelta.py"
    cp "$REPO/benchmarks/workloads/mnist_adadelta.tuned.toml" "$OUT/" 2>/dev/null
    ;;
search)
    # GPU_TESTS: a pytest -k expression; those GPU tests run while the data set is written.
    [ -n "${GPU_TESTS:-}" ] && step pytest_gpu bash -c "cd $REPO && python3 -m pytest -q -m gpu -p no:cacheprovider \
        -rs -k '$GPU_TESTS'" &
    [ -d "$AUTOTUNE_DATA/imagenet-synthetic" ] || step data bash -c "$DATA"
    wait
    step imagenet_search bash -c "python3 -m autotune search --recipe imagenet_resnet50 \
        && python3 -m autotune show --recipe imagenet_resnet50"
    cp /tmp/runs/imagenet_search/recipes/imagenet_resnet50.tuned.toml "$OUT/" 2>/dev/null
    # SEARCH_ONLY=1: the rest is left to a `check` or `winner` part on this host, so the search part fits.
    [ -n "${SEARCH_ONLY:-}" ] && { echo "$(date +%T) $PART done" >>"$OUT/progress.log"; exit 0; }
    # Its winner through the truth benchmark, right after, on the same host.
    [ -f /tmp/runs/imagenet_search/recipes/imagenet_resnet50.tuned.toml ] && winner "${TRUTH_S:-20}"
    # Then what the winner is held against, while the part's time lasts: the workload's own settings, and the hand
    # sweep's rows that were best before (all cores and one less, bf16 + channels_last).
    step own python3 "$REPO/benchmarks/truth.py" --configs default --match own --seconds "${TRUTH_S:-20}" --out .
    cp /tmp/runs/own/truth.json "$OUT/own.json" 2>/dev/null
    step hand_best python3 "$REPO/benchmarks/truth.py" --configs sweep --match "^($NCPU|$((NCPU - 1))) workers, bf16" \
        --seconds "${TRUTH_S:-20}" --out .
    cp /tmp/runs/hand_best/truth.json "$OUT/hand_best.json" 2>/dev/null
    ;;
check)
    [ -d "$AUTOTUNE_DATA/imagenet-synthetic" ] || step data bash -c "$DATA"
    # The hand sweep the winner is held against (truth.py's sweep: workers 8, 12, cores-1 and cores, fp32 and
    # bf16+CL), by hand alone, back to back on this host; then the winner through the truth benchmark.
    step sweep python3 "$REPO/benchmarks/truth.py" --configs sweep --hand-only --seconds "${SWEEP_S:-20}" --out .
    cp /tmp/runs/sweep/truth.json "$OUT/sweep.json" 2>/dev/null
    winner
    ;;
winner)
    [ -d "$AUTOTUNE_DATA/imagenet-synthetic" ] || step data bash -c "$DATA"
    winner "${TRUTH_S:-30}" winner ${TRUTH_ARGS:-}  # TRUTH_ARGS: more of truth.py's options, --rounds 1 say
    [ -n "${WINNER_ONLY:-}" ] && exit  # the winner's row alone: the part ends with it, its time given back
    # What the winner is held against, and then the truth benchmark's other rows, while the part's time lasts.
    step own python3 "$REPO/benchmarks/truth.py" --configs default --match own --seconds 30 --out .
    cp /tmp/runs/own/truth.json "$OUT/own.json" 2>/dev/null
    step truth python3 "$REPO/benchmarks/truth.py" --configs default --match "${TRUTH_MATCH:-^0 |^8 }" --seconds 30 --out .
    cp /tmp/runs/truth/truth.json "$OUT/truth.json" 2>/dev/null
    ;;
final)
    step text bash -c "python3 -m autotune search --recipe text_transformer --time-budget 150 \
        && python3 -m autotune show --recipe text_transformer"
    cp /tmp/runs/text/recipes/text_transformer.tuned.toml "$OUT/" 2>/dev/null
    [ -d "$AUTOTUNE_DATA/imagenet-synthetic" ] || step data bash -c "$DATA" &
    step pytest_gpu bash -c "cd $REPO && python3 -m pytest -q -m gpu -p no:cacheprovider -rs"
    wait
    step hand_best python3 "$REPO/benchmarks/truth.py" --configs sweep --match "16 workers, bf16" --seconds 20 --out .
    cp /tmp/runs/hand_best/truth.json "$OUT/hand_best.json" 2>/dev/null
    step search_5cores bash -c "python3 -m autotune search --recipe imagenet_resnet50 --cpus 5 --time-budget $(budget) \
        && python3 -m autotune show --recipe imagenet_resnet50"
    cp /tmp/runs/search_5cores/recipes/imagenet_resnet50.tuned.toml "$OUT/imagenet_5cores.tuned.toml" 2>/dev/null
    ;;
cores5)
    [ -d "$AUTOTUNE_DATA/imagenet-synthetic" ] || step data bash -c "$DATA"
    # The search leaves about 150 s of the part for the truth benchmark's three rows after it (where an epoch's
    # worth takes at most 3x a row's 20 s, each of its slices times one, and the rows may not all fit).
    step search_5cores bash -c "python3 -m autotune search --recipe imagenet_resnet50 --cpus 5 \
        --time-budget $(($(left) - 190)) && python3 -m autotune show --recipe imagenet_resnet50"
    cp /tmp/runs/search_5cores/recipes/imagenet_resnet50.tuned.toml "$OUT/imagenet_5cores.tuned.toml" 2>/dev/null
    [ -f /tmp/runs/search_5cores/recipes/imagenet_resnet50.tuned.toml ] && step winner_5cores bash -c \
        "cd /tmp/runs/search_5cores && taskset -c 0-4 python3 $REPO/benchmarks/truth.py --configs tuned --seconds 20 \
        --out /tmp/runs/winner_5cores"
    cp /tmp/runs/winner_5cores/truth.json "$OUT/winner_5cores.json" 2>/dev/null
    step decode_5cores taskset -c 0-4 python3 "$REPO/benchmarks/truth.py" --configs decode --seconds 20 --out .
    cp /tmp/runs/decode_5cores/truth.json "$OUT/decode_5cores.json" 2>/dev/null
    ;;
speed)
    # SPEED_ARGS: which searches and how long (speed.py --help); by default all three, 100 s each.
    step speed python3 "$REPO/benchmarks/speed.py" --out /tmp/runs/speed ${SPEED_ARGS:---trials 30 --budget 100}
    cp /tmp/runs/speed/bench.json "$OUT/speed.json" 2>/dev/null
    step data bash -c "$DATA"
    # The workload's own settings with the hand loop timed twice as long: does its rate drift past 30 s?
    step own_60s python3 "$REPO/benchmarks/truth.py" --configs default --match own --seconds 60 --out .
    cp /tmp/runs/own_60s/truth.json "$OUT/own_60s.json" 2>/dev/null
    step diagnose python3 -m autotune diagnose --recipe imagenet_resnet50
    ;;
probe)
    step host bash -c "lscpu; cat /sys/fs/cgroup/cpu.max 2>/dev/null; grep MHz /proc/cpuinfo | sort | uniq -c"
    [ -d "$AUTOTUNE_DATA/imagenet-synthetic" ] || step data bash -c "$DATA"
    step probe_pinned python3 "$REPO/lab/probes/loader_probe.py" --seconds 50 --out "$OUT/probe_pinned.json"
    step probe_unpinned python3 "$REPO/lab/probes/loader_probe.py" --no-pin --seconds 40 \
        --out "$OUT/probe_unpinned.json"
    step own_60s python3 "$REPO/benchmarks/truth.py" --configs default --match own --seconds 60 --out .
    cp /tmp/runs/own_60s/truth.json "$OUT/own_60s.json" 2>/dev/null
    step probe_again python3 "$REPO/lab/probes/loader_probe.py" --seconds 40 --out "$OUT/probe_again.json"
    ;;
truth)
    [ -d "$AUTOTUNE_DATA/imagenet-synthetic" ] || step data bash -c "$DATA"
    step truth python3 "$REPO/benchmarks/truth.py" --configs default --match "${TRUTH_MATCH:-.}" \
        --seconds "${TRUTH_S:-30}" --out .
    cp /tmp/runs/truth/truth.json "$OUT/truth.json" 2>/dev/null
    ;;
sweep)
    [ -d "$AUTOTUNE_DATA/imagenet-synthetic" ] || step data bash -c "$DATA"
    # The hand sweep, the winner (this host's last search, else the committed one) and the workload's own settings,
    # all by hand alone (SWEEP_S seconds a row), back to back; a `winner` part after it adds autotune's measurement.
    step sweep python3 "$REPO/benchmarks/truth.py" --configs sweep --hand-only --seconds "${SWEEP_S:-20}" --out .
    cp /tmp/runs/sweep/truth.json "$OUT/sweep.json" 2>/dev/null
    winner "${SWEEP_S:-20}" winner_hand --hand-only
    step own_hand python3 "$REPO/benchmarks/truth.py" --configs default --match own --hand-only \
        --seconds "${SWEEP_S:-20}" --out .
    cp /tmp/runs/own_hand/truth.json "$OUT/own_hand.json" 2>/dev/null
    ;;
diagnose)
    [ -d "$AUTOTUNE_DATA/imagenet-synthetic" ] || step data bash -c "$DATA"
    step diagnose python3 -m autotune diagnose --recipe imagenet_resnet50
    ;;
*)
    echo "unknown part $PART: feed, where, close, first, search, check, sweep, winner, final, cores5, speed, probe, truth or diagnose" >&2
    exit 2
    ;;
esac
echo "$(date +%T) $PART done" >>"$OUT/progress.log"
