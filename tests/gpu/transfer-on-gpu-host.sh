#!/usr/bin/env bash
# transfer-on-gpu-host.sh — issue 12 items 2 and 3 on the GPU host: remote transfers next to
# their baselines in one run, with an earlier tensord alternated against this one.
#   1. gpu-bench --transfers-only on local:cuda:0 (td_write/td_read of 64 MiB and 1 GiB,
#      pinned cudaMemcpy and pageable baselines with --raw), then through a tensord on TCP
#      loopback (cuda:0): the remote rows, server A (carry/tensord-old, when carried) and
#      server B (this tree's) alternated ROUNDS times;
#   2. tensord-bench --only P3 with each server (TCP rows: fresh uploads with the offer off
#      and with default options, downloads, and the raw TCP loopback stream in the same run).
# Needs carry/ from tests/gpu/prepare-carry.sh; carry/tensord-old is an optional older
# tensord built by the same script (same libraries). Results: $OUT/transfer.md, raw output
# $OUT/transfer.log; bounded by $BUDGET s (default 240).
#     OUT=$OUT BUDGET=240 bash tests/gpu/transfer-on-gpu-host.sh
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/tensord-transfer-out}
mkdir -p "$OUT"
MD=$OUT/transfer.md
LOG=$OUT/transfer.log
start=$(date +%s)
BUDGET=${BUDGET:-240}
ROUNDS=${ROUNDS:-2}
. tests/gpu/gpu-host-lib.sh
X=${TMPDIR:-/tmp}/tensord-gpu
[ -x "$X/bin/tensord" ] || unpack_carry "$X" || { echo "cannot unpack the carry" >&2; exit 1; }
use_carry "$X"
GPU_BENCH=$X/bin/gpu-bench
[ -x "$GPU_BENCH" ] || GPU_BENCH=$PWD/carry/gpu-bench # prepare-carry.sh puts it beside the tarball
servers=("B:$X/bin/tensord")
[ -x carry/tensord-old ] && servers=("A:$PWD/carry/tensord-old" "${servers[@]}")

echo "## gpu-bench transfers, local:cuda:0 (baselines: --raw)" | tee -a "$MD"
timeout "$(limit 60)" "$GPU_BENCH" --device local:cuda:0 --transfers-only --raw \
    2>>"$LOG" | tee -a "$MD"
for r in $(seq 1 "$ROUNDS"); do
    for s in "${servers[@]}"; do
        name=${s%%:*} bin=${s#*:}
        [ "$(limit 60)" -le 5 ] && break 2
        if ! start_tensord "$bin" "$OUT/server-$name.log" --devices cuda:0,cpu; then
            echo "server $name did not start" | tee -a "$MD"
            continue
        fi
        echo "## round $r, server $name: gpu-bench transfers, tensord://$SERVER_ADDR/cuda:0" | tee -a "$MD"
        timeout "$(limit 60)" "$GPU_BENCH" --device "tensord://$SERVER_ADDR/cuda:0" \
            --transfers-only 2>>"$LOG" | tee -a "$MD"
        stop_tensord
    done
done
for s in "${servers[@]}"; do
    name=${s%%:*} bin=${s#*:}
    [ "$(limit 60)" -le 5 ] && break
    echo "## server $name: tensord-bench --only P3 (cpu tensors; TCP rows against the raw TCP stream)" | tee -a "$MD"
    timeout "$(limit 90)" "$X/bin/tensord-bench" --only P3 --tensord "$bin" 2>>"$LOG" |
        grep -E "tcp|raw" | tee -a "$MD"
done
exit 0
