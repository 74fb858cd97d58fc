#!/usr/bin/env bash
# share-on-gpu-host.sh — issue 17's GPU sharing on the GPU host: aggregate training
# throughput of N = 1, 2, 4, 8, 16 concurrent fashion-mnist processes (MLP, hidden 1024,
# batch 256, 1 epoch) through one tensord on cuda:0, next to N independent local:cuda:0
# processes, and checks that every client's summary line (accuracy, final loss, epochs; not
# the seconds) equals the solo run's: sessions sharing a GPU must not change each other's
# bits. SERIES (default "default local 16 1") says what runs, in that order: an entry
# "local" is the N independent local:cuda:0 processes, any other a tensord series with that
# --device-workers ("default": the server's default, 4 per GPU; 1: the one worker of
# before issue 17, for contrast; 16: a worker per client).
#
# Aggregate throughput, two ways: "wall" = N x training images / seconds from the launch of
# the N processes to the last one's exit (start-up, data loading and evaluation included);
# "epochs" = the sum of the processes' own "epoch 1/1 ... R img/s" rates (the training
# epoch alone, as if all N overlapped fully). Ratios against the solo remote run (N = 1 of
# the first series) and against the N local processes.
#
# Needs carry/tensord-gpu.tar.xz (bin/tensord, bin/fashion-mnist) and carry/fashion-mnist/
# (tests/gpu/prepare-carry.sh). Appends a table to $OUT/summary.txt and every run's output
# to $OUT/smoke.log. Bounded by BUDGET seconds (default 150): a step that would start with
# less than MIN_STEP seconds left is skipped and said so.
#     BUDGET=150 bash tests/gpu/share-on-gpu-host.sh
# Knobs (environment): NS ("1 2 4 8 16"), SERIES ("default local 16 1"), HIDDEN (1024),
# BATCH (256), EPOCHS (1), FASHION_MNIST_BIN, FASHION_MNIST_DATA, STEP_LIMIT (60: seconds
# one group of N processes may take), DEVICE (cuda:0) and FM_EXTRA (more trainer flags,
# e.g. "--limit-train 6000 --limit-test 1000"): with DEVICE=cpu the script's own logic can
# be tried on a machine without a GPU.
# Exit status: 0 when every run finished and every summary matched, else 1.
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
OUT=${OUT:-/tmp/tensord-gpu-out}
mkdir -p "$OUT"
SUM=$OUT/summary.txt
LOG=$OUT/smoke.log
note() { echo "$*" | tee -a "$SUM"; }
start=$(date +%s)
BUDGET=${BUDGET:-150}
MIN_STEP=${MIN_STEP:-10}
. tests/gpu/gpu-host-lib.sh
X=${TMPDIR:-/tmp}/tensord-gpu
[ -x "$X/bin/tensord" ] || unpack_carry "$X" || { note "FAIL unpack carry"; exit 1; }
use_carry "$X" "$LOG"
FM_BIN=${FASHION_MNIST_BIN:-$X/bin/fashion-mnist}
FM_DATA=${FASHION_MNIST_DATA:-$ROOT/carry/fashion-mnist}
NS=${NS:-1 2 4 8 16}
RUNS=${SERIES:-default local 16 1}
STEP_LIMIT=${STEP_LIMIT:-60}
DEVICE=${DEVICE:-cuda:0}
# shellcheck disable=SC2206 # FM_EXTRA is a list of flags
FM=(--model mlp --hidden "${HIDDEN:-1024}" --batch "${BATCH:-256}" --epochs "${EPOCHS:-1}"
    --data "$FM_DATA" ${FM_EXTRA:-})
T=$(mktemp -d)
SERVER_PID=""
trap 'stop_tensord; rm -rf "$T"' EXIT
FAILED=0

if [ ! -d "$FM_DATA" ]; then
    note "SKIP GPU sharing: no Fashion-MNIST data at $FM_DATA"
    exit 1
fi

# The summary without its timing: "test accuracy: A  final loss: L  epochs: N".
summary_of() { tail -1 "$1" | sed -n 's/^\(test accuracy: .*epochs: [0-9]*\)  seconds: .*/\1/p'; }
# img/s of the "epoch N/N  loss L  S s  R img/s" line of one run's output.
epoch_ips() {
    awk '/^epoch [0-9]+\/[0-9]+  loss [^ ]+  [0-9.]+ s  [0-9]+ img\/s/ { v = $(NF - 1) }
         END { if (v != "") print v }' "$1"
}
now() { date +%s.%N; }
# Training images per process: the whole training set unless --limit-train says less.
IMAGES=60000
for ((i = 0; i < ${#FM[@]} - 1; i++)); do
    [ "${FM[$i]}" = --limit-train ] && IMAGES=${FM[$((i + 1))]}
done

# group LABEL N DEVICE: N concurrent fashion-mnist processes on DEVICE; sets G_WALL, G_EPOCHS
# (sum of the processes' epoch img/s), G_OK (all exited 0 with a summary), and checks each
# summary against REF (set by the first solo run when empty). Outputs in $T/LABEL-N-i.
group() {
    local label=$1 n=$2 dev=$3 left secs i pids=() t0 t1 s r sum=0 v
    G_WALL="" G_EPOCHS="" G_OK=0
    left=$((BUDGET - ($(date +%s) - start)))
    if [ "$left" -lt "$MIN_STEP" ]; then
        note "SKIP $label N=$n: budget spent ($left s of $BUDGET s left)"
        return 1
    fi
    secs=$((STEP_LIMIT < left ? STEP_LIMIT : left))
    echo "== $label N=$n (limit $secs s): $FM_BIN --device $dev ${FM[*]}" >>"$LOG"
    t0=$(now)
    for i in $(seq 1 "$n"); do
        timeout -k 5 "$secs" "$FM_BIN" --device "$dev" "${FM[@]}" >"$T/$label-$n-$i" 2>&1 &
        pids+=($!)
    done
    G_OK=1
    for i in $(seq 1 "$n"); do
        wait "${pids[$((i - 1))]}"
        r=$?
        [ "$r" -eq 0 ] || { G_OK=0; note "FAIL $label N=$n client $i (exit $r): $(tail -1 "$T/$label-$n-$i")"; }
    done
    t1=$(now)
    for i in $(seq 1 "$n"); do
        { echo "-- client $i"; cat "$T/$label-$n-$i"; } >>"$LOG"
        s=$(summary_of "$T/$label-$n-$i")
        if [ -z "$s" ]; then
            G_OK=0
            continue
        fi
        if [ -z "${REF:-}" ]; then
            REF=$s
            note "reference summary ($label N=$n): $REF"
        elif [ "$s" != "$REF" ]; then
            G_OK=0
            note "FAIL $label N=$n client $i: summary '$s' differs from the solo run's '$REF'"
        fi
        v=$(epoch_ips "$T/$label-$n-$i")
        [ -n "$v" ] && sum=$((sum + v))
    done
    G_WALL=$(awk -v n="$n" -v im="$IMAGES" -v a="$t0" -v b="$t1" \
        'BEGIN { if (b > a) printf "%.0f", n * im / (b - a) }')
    G_EPOCHS=$sum
    [ "$G_OK" = 1 ] || FAILED=1
    note "$([ "$G_OK" = 1 ] && echo PASS || echo FAIL) $label N=$n:" \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s wall," \
        "$G_WALL img/s (wall), $G_EPOCHS img/s (epochs)"
    return 0
}

note "== GPU sharing on $DEVICE: N fashion-mnist (${FM[*]:0:8}) through one tensord vs N" \
     "local processes (budget $BUDGET s)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >>"$LOG" 2>&1
declare -A W E # W[series,N] / E[series,N]: wall / epochs img/s
SERIES=()
REF=""
for wk in $RUNS; do
    if [ "$wk" = local ]; then
        series="local:$DEVICE"
        SERIES+=("$series")
        for n in $NS; do
            group local "$n" "local:$DEVICE" || break
            W["$series,$n"]=$G_WALL
            E["$series,$n"]=$G_EPOCHS
        done
        continue
    fi
    series="tensord workers=$wk"
    SERIES+=("$series")
    args=()
    [ "$wk" = default ] || args=(--device-workers "$wk")
    if ! start_tensord "$X/bin/tensord" "$T/server-$wk.log" "${args[@]}"; then
        note "FAIL tensord start (${args[*]}); its log is in smoke.log"
        cat "$T/server-$wk.log" >>"$LOG"
        FAILED=1
        continue
    fi
    grep -a "worker thread" "$T/server-$wk.log" | tee -a "$SUM" >/dev/null
    for n in $NS; do
        group "remote-$wk" "$n" "tensord://$SERVER_ADDR/$DEVICE" || break
        W["$series,$n"]=$G_WALL
        E["$series,$n"]=$G_EPOCHS
    done
    stop_tensord
    [ "${SERVER_STATUS:-0}" = 0 ] || { note "FAIL tensord (${args[*]}) exited with status $SERVER_STATUS"; FAILED=1; }
    { echo "== tensord log (${args[*]:-default workers})"; cat "$T/server-$wk.log"; } >>"$LOG"
done

# ---- the table ----
ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else printf "-" }'
}
first1=${NS%% *}
{
    echo "== aggregate img/s on $DEVICE (wall: N x $IMAGES images / group wall time; epochs: sum" \
         "of the clients' epoch img/s); x one = / the series' N=$first1 (wall); x local = / N local processes (wall)"
    printf "  %-24s" "series \\ N"
    for n in $NS; do printf " %21s" "N=$n"; done
    echo
    for s in "${SERIES[@]}"; do
        printf "  %-24s" "$s"
        for n in $NS; do printf " %21s" "${W["$s,$n"]:--} / ${E["$s,$n"]:--}"; done
        echo
        if [ "$s" != "local:$DEVICE" ]; then
            printf "  %-24s" "  x one, x local"
            for n in $NS; do
                printf " %21s" "$(ratio "${W["$s,$n"]:-}" "${W["$s,$first1"]:-}"), $(ratio "${W["$s,$n"]:-}" "${W["local:$DEVICE,$n"]:-}")"
            done
            echo
        fi
    done
    echo "  issue 17 targets: 16 clients >= 4x one (x one at N=16), >= 2x 16 local processes (x local at N=16)"
} | tee -a "$SUM"
note "GPU sharing done in $(($(date +%s) - start)) s: $([ "$FAILED" = 0 ] && echo "every summary matched the solo run" || echo FAILURES above)"
exit $FAILED
