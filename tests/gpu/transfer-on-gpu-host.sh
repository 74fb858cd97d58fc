#!/usr/bin/env bash
# transfer-on-gpu-host.sh — issue 12 items 2 and 3 on the GPU host: remote transfers next to
# their baselines in one run, with an earlier client library alternated against this one.
#   1. gpu-bench --transfers-only on local:cuda:0 (td_write/td_read of 64 MiB and 1 GiB,
#      pinned cudaMemcpy and pageable baselines with --raw), then through a tensord on TCP
#      loopback (cuda:0), an older client library (carry/libtensord-old.so.0, when carried)
#      and this tree's alternated ROUNDS times;
#   2. tensord-bench --only P3 with this tree's server (TCP rows: fresh uploads with the offer
#      off and with default options, downloads, and the raw TCP loopback stream in the same
#      run), the two client libraries alternated likewise.
# Needs carry/ from tests/gpu/prepare-carry.sh; carry/libtensord-old.so.0 is an optional
# older build of the client library (same dependencies), for an A/B in one call.
# Results: $OUT/transfer.md, raw output $OUT/transfer.log; bounded by $BUDGET s (default 240).
#     OUT=$OUT BUDGET=240 bash tests/gpu/transfer-on-gpu-host.sh
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/tensord-transfer-out}
ROUNDS=${ROUNDS:-2}
. tests/gpu/gpu-host-lib.sh
gpu_host_setup transfer 240 || exit 1
LOG=$OUT/transfer.log
clients=("new:")
if [ -f carry/libtensord-old.so.0 ]; then
    mkdir -p "$X/oldlib" && cp carry/libtensord-old.so.0 "$X/oldlib/libtensord.so.0"
    clients=("old:$X/oldlib" "new:")
fi

echo "## gpu-bench transfers, local:cuda:0 (baselines: --raw)" | tee -a "$MD"
timeout "$(limit 60)" "$GPU_BENCH" --device local:cuda:0 --transfers-only --raw \
    2>>"$LOG" | tee -a "$MD"
# TENSORD_TRACE_JOBS=1: each session's close line carries its worker time per request kind
# (and the device copies of reads and GPU candidates): the profile of the remote rows.
if TENSORD_TRACE_JOBS=1 start_tensord "$X/bin/tensord" "$OUT/server.log" --devices cuda:0,cpu; then
    for r in $(seq 1 "$ROUNDS"); do
        for c in "${clients[@]}"; do
            for offer in "" --offer-off; do
                name=${c%%:*} dir=${c#*:}
                [ "$(limit 60)" -le 5 ] && break 3
                echo "## round $r, client $name ${offer:-default options}: gpu-bench transfers, tensord://$SERVER_ADDR/cuda:0" | tee -a "$MD"
                LD_LIBRARY_PATH="${dir:+$dir:}$LD_LIBRARY_PATH" timeout "$(limit 60)" "$GPU_BENCH" \
                    --device "tensord://$SERVER_ADDR/cuda:0" --transfers-only $offer 2>>"$LOG" | tee -a "$MD"
                sleep 0.3
                grep -a "worker time" "$OUT/server.log" | tail -1 | sed 's/^/    /' | tee -a "$MD"
            done
        done
    done
    # the same client and server with cpu tensors (a candidate there is a reference)
    for offer in "" --offer-off; do
        [ "$(limit 60)" -le 5 ] && break
        echo "## gpu-bench transfers ${offer:-default options}, tensord://$SERVER_ADDR/cpu" | tee -a "$MD"
        timeout "$(limit 60)" "$GPU_BENCH" --device "tensord://$SERVER_ADDR/cpu" --transfers-only \
            $offer 2>>"$LOG" | tee -a "$MD"
        sleep 0.3
        grep -a "worker time" "$OUT/server.log" | tail -1 | sed 's/^/    /' | tee -a "$MD"
    done
    stop_tensord
else
    echo "tensord did not start" | tee -a "$MD"
fi
# P3 over TCP with this tree's tensord, the client libraries alternated.
for r in $(seq 1 "$ROUNDS"); do
    for c in "${clients[@]}"; do
        name=${c%%:*} dir=${c#*:}
        [ "$(limit 60)" -le 5 ] && break 2
        echo "## round $r, client $name: tensord-bench --only P3 (cpu tensors; TCP rows against the raw TCP stream)" | tee -a "$MD"
        LD_LIBRARY_PATH="${dir:+$dir:}$LD_LIBRARY_PATH" timeout "$(limit 90)" \
            "$X/bin/tensord-bench" --only P3 --tensord "$X/bin/tensord" 2>>"$LOG" |
            grep -E "tcp|raw" | tee -a "$MD"
    done
done
exit 0
