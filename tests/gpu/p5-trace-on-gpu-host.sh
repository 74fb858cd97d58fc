#!/usr/bin/env bash
# p5-trace-on-gpu-host.sh — profile of P5's remote TCP epochs on cuda:0 (issue 12: every miss
# explained with a profile). One trainer per configuration, two epochs (the second is the
# one P5 times), against a tensord with TENSORD_TRACE_JOBS=1 (worker time per request kind
# in each session's close line): default candidates (device copies), host copies
# (TENSORD_CANDIDATE_COPY=host), and local:cuda:0 for the baseline.
# Run on the GPU host from the repository root (device tool, carry with tensord-gpu.tar.xz
# and the Fashion-MNIST files in carry/fashion-mnist):
#     OUT=$OUT bash tests/gpu/p5-trace-on-gpu-host.sh     # SIZES="4096x256 1024x2048"
# (RUNS=N trainer runs per size, each its own seed; MODES="device" one candidate mode;
# LOCAL=0 no local runs — e.g. P5's order of sizes against one server, to see whether a
# server that has served earlier sessions slows down)
# Results on stdout and in $OUT/trace.txt.
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/tensord-p5-trace}
mkdir -p "$OUT"
. tests/gpu/gpu-host-lib.sh
X=/tmp/tensord-p5-carry
unpack_carry "$X" || { echo "cannot unpack the carry" >&2; exit 1; }
use_carry "$X" "$OUT/libs.txt"
DATA=$PWD/carry/fashion-mnist
SIZES=${SIZES:-"4096x256 1024x2048 128x256"}
DEV=${DEV:-cuda:0} # DEV=cpu tries the script on a machine without a GPU
T=$OUT/trace.txt
: >"$T"
RUNS=${RUNS:-1}     # trainer runs per size, each with its own seed (P5's fresh batches)
MODES=${MODES:-"device host"}
LOCAL=${LOCAL:-1}   # 0: no local:$DEV runs
seed=7 # the last run's (each run adds one first); train runs in a pipeline's subshell, so the callers count
train() { # device batch hidden seed
    "$X/bin/fashion-mnist" --device "$1" --data "$DATA" --epochs 2 --batch "$2" --hidden "$3" \
        --seed "$4" 2>&1 | grep -E "^epoch 2/2  loss" | sed "s|^|$1 b$2 h$3 seed $4: |"
}
for mode in $MODES; do
    log=$OUT/server-$mode.log
    extra=()
    [ "$mode" = host ] && extra=(TENSORD_CANDIDATE_COPY=host)
    env TENSORD_TRACE_JOBS=1 "${extra[@]}" "$X/bin/tensord" --listen 127.0.0.1:0 --log-level info >"$OUT/listen-$mode" 2>"$log" &
    pid=$!
    for _ in $(seq 50); do grep -q "^listening on" "$OUT/listen-$mode" && break; sleep 0.1; done
    addr=$(sed -n 's/^listening on //p' "$OUT/listen-$mode" | head -1)
    echo "== candidates: $mode ($addr)" | tee -a "$T"
    for s in $SIZES; do
        for _ in $(seq "$RUNS"); do
            seed=$((seed + 1))
            train "tensord://$addr/$DEV" "${s%x*}" "${s#*x}" "$seed" | tee -a "$T"
        done
    done
    kill -TERM $pid; wait $pid
    grep -a "worker time" "$log" | sed 's/.*count\/total): //' | tee -a "$T"
done
[ "$LOCAL" = 0 ] && exit 0
echo "== local" | tee -a "$T"
for s in $SIZES; do
    seed=$((seed + 1))
    train "local:$DEV" "${s%x*}" "${s#*x}" "$seed" | tee -a "$T"
done
