#!/usr/bin/env bash
# p5-timings-on-gpu-host.sh — where a P5 epoch's time goes on cuda:0, client and server side
# (issue 12: every miss explained with a profile). For each size, alternated RUNS times:
# the trainer on local:cuda:0, through a tensord on loopback TCP, and through one on a unix
# socket, two epochs each with `fashion-mnist --timings` (the client thread's wall time per
# phase: batches, uploads, recording, loss reads), both servers with TENSORD_TRACE_JOBS=1
# (worker time per request kind, one line per session at its end).
# Run on the GPU host from the repository root (device tool; carry/tensord-gpu.tar.xz and
# the Fashion-MNIST files in carry/fashion-mnist):
#     OUT=$OUT bash tests/gpu/p5-timings-on-gpu-host.sh   # SIZES="1024x256 4096x256" RUNS=2
# Extra trainer flags in TRAIN_ARGS (e.g. --graph); extra client environment in CLIENT_ENV
# (e.g. TENSORD_WRITE_COPY_MAX=0); EPOCHS (default 2) a run, every epoch after the first
# reported (and their sum when EPOCHS > 2). TRAINERS (default "fashion-mnist") names the carried
# trainer binaries to alternate, each row labelled with its name (an A/B of two builds); a
# name may carry flags after "+" ("fashion-mnist+--upload-f32": that binary with that flag;
# more flags with more "+"). SERVER_ENV_B (e.g. TENSORD_SHM_WRITE_WAIT=1) starts a second
# unix server with that environment, run after the first as "unixb" (an A/B of a server
# setting in one call); B_TCP=1 makes that second server a TCP one, "tcpb", and
# TRANSPORTS (default "tcp unix") picks which of the first two servers' rows run. Results
# in $OUT/timings.txt; servers' logs in $OUT/server-{tcp,unix,unixb,tcpb}.log. Bounded by BUDGET seconds (default 240).
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/tensord-p5-timings}
mkdir -p "$OUT"
. tests/gpu/gpu-host-lib.sh
X=/tmp/tensord-p5-carry
unpack_carry "$X" || { echo "cannot unpack the carry" >&2; exit 1; }
use_carry "$X" "$OUT/libs.txt"
DATA=$PWD/carry/fashion-mnist
SIZES=${SIZES:-"1024x256 4096x256 1024x2048 4096x2048"}
RUNS=${RUNS:-2}
EPOCHS=${EPOCHS:-2} # epochs a run; the first is left out
DEV=${DEV:-cuda:0} # DEV=cpu tries the script on a machine without a GPU
BUDGET=${BUDGET:-240}
start=$(date +%s)
T=$OUT/timings.txt
: >"$T"
srv() { # name listen-address [environment]
    # shellcheck disable=SC2086 # $3 is a list
    env TENSORD_TRACE_JOBS=1 ${3:-} "$X/bin/tensord" --listen "$2" --log-level info \
        >"$OUT/listen-$1" 2>"$OUT/server-$1.log" &
    echo $! >"$OUT/pid-$1"
    for _ in $(seq 50); do grep -q "^listening on" "$OUT/listen-$1" && break; sleep 0.1; done
}
sock=$(mktemp -u /tmp/tensord-p5t-XXXXXX.sock)
srv tcp 127.0.0.1:0
srv unix "unix:$sock"
sockb=$(mktemp -u /tmp/tensord-p5tb-XXXXXX.sock)
SERVERS="tcp unix"
ROWS="local ${TRANSPORTS:-tcp unix}"
if [ -n "${SERVER_ENV_B:-}" ]; then
    if [ "${B_TCP:-0}" = 1 ]; then B=tcpb addr=127.0.0.1:0; else B=unixb addr=unix:$sockb; fi
    srv $B "$addr" "$SERVER_ENV_B"
    SERVERS="tcp unix $B"
    ROWS="$ROWS $B"
fi
tcp=$(sed -n 's/^listening on //p' "$OUT/listen-tcp" | head -1)
tcpb=$(sed -n 's/^listening on //p' "$OUT/listen-tcpb" 2>/dev/null | head -1)
uri() { # row label -> the trainer's --device
    case $1 in
    local) echo "local:$DEV" ;;
    tcp) echo "tensord://$tcp/$DEV" ;;
    tcpb) echo "tensord://$tcpb/$DEV" ;;
    unix) echo "unix:$sock/$DEV" ;;
    unixb) echo "unix:$sockb/$DEV" ;;
    esac
}
seed=100
train() { # label device batch hidden trainer (one seed a round: equal loss lines)
    # shellcheck disable=SC2086 # CLIENT_ENV and TRAIN_ARGS are lists
    local bin=${5%%+*} flags=""
    [ "$bin" != "$5" ] && flags=${5#*+} && flags=${flags//+/ }
    # shellcheck disable=SC2086 # flags is a list
    env ${CLIENT_ENV:-} timeout 60 "$X/bin/$bin" --device "$2" --data "$DATA" --epochs "$EPOCHS" \
        --batch "$3" --hidden "$4" --seed "$seed" --limit-test 1000 --timings ${TRAIN_ARGS:-} $flags \
        >"$OUT/run.log" 2>&1
    local rc=$?
    # every epoch after the first (the first pays CUDA's start-up); EPOCHS > 2 also prints
    # their sum, "epochs 2-E: MS ms" (less at the mercy of one hiccup than a 20 ms epoch)
    grep -E "^epoch $EPOCHS/$EPOCHS  loss|timings epoch ([2-9]|[1-9][0-9])" "$OUT/run.log" |
        sed "s|^|$5 $1 b$3 h$4: |" | tee -a "$T"
    [ "$EPOCHS" -gt 2 ] && awk -v l="$5 $1 b$3 h$4" -v e="$EPOCHS" '
        /timings epoch/ && $4 != "1:" { s += $5 } END { printf "%s: epochs 2-%d: %.1f ms\n", l, e, s }' \
        "$OUT/run.log" | tee -a "$T"
    # a failed run (a flag the trainer refuses, a lost server) is a row saying so
    [ $rc -eq 0 ] || echo "$5 $1 b$3 h$4: FAILED (exit $rc): $(grep -m1 -E '^fashion-mnist: [^0-9]' "$OUT/run.log" || tail -1 "$OUT/run.log")" | tee -a "$T"
}
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null) TRAIN_ARGS='${TRAIN_ARGS:-}' CLIENT_ENV='${CLIENT_ENV:-}' SERVER_ENV_B='${SERVER_ENV_B:-}'" | tee -a "$T"
for s in $SIZES; do
    for _ in $(seq "$RUNS"); do
        [ $(($(date +%s) - start)) -gt "$BUDGET" ] && { echo "budget spent" | tee -a "$T"; break 2; }
        seed=$((seed + 1))
        for tr in ${TRAINERS:-fashion-mnist}; do
            for row in $ROWS; do
                train "$row" "$(uri "$row")" "${s%x*}" "${s#*x}" "$tr"
            done
        done
    done
done
for n in $SERVERS; do
    kill -TERM "$(cat "$OUT/pid-$n")"
    wait "$(cat "$OUT/pid-$n")"
    echo "-- $n server: worker time per session" | tee -a "$T"
    grep -a "worker time" "$OUT/server-$n.log" | sed 's/.*count\/total): //' | cut -c1-400 | tee -a "$T"
done
rm -f "$sock" "$sockb"
