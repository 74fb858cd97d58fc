#!/usr/bin/env bash
# pinned-on-gpu-host.sh — issue 12 item 3 on the GPU host: td_write/td_read of 64 MiB and
# 1 GiB to cuda:0 from pageable memory and from a td_host_alloc buffer (pinned pages on a
# local context; the session's shared-memory region, pinned by the server at its first large
# transfer, on a unix socket), locally, through a tensord on a unix socket and over TCP
# loopback, next to raw pinned/pageable cudaMemcpy and the raw TCP stream (gpu-bench --raw),
# alternated ROUNDS times; locally the pageable rows also with STAGE_SETS staging pairs
# (TENSORD_GPU_STAGE_SETS). gpu-bench checks every read against what was written.
# Needs carry/tensord-gpu.tar.xz (tests/gpu/prepare-carry.sh) and carry/gpu-bench.
# Results: $OUT/pinned.md; bounded by $BUDGET s (default 150).
#     OUT=$OUT bash tests/gpu/pinned-on-gpu-host.sh
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
ROUNDS=${ROUNDS:-2}
STAGE_SETS=${STAGE_SETS:-2 8} # the pageable rows again with these staging pairs (default 4 above)
. tests/gpu/gpu-host-lib.sh
gpu_host_setup pinned 150 || exit 1
SOCK=${TMPDIR:-/tmp}/tensord-pinned.sock
rc=0
echo "## pinned host buffers ($(date -u +%FT%TZ)); ROUNDS=$ROUNDS" | tee -a "$MD"
for r in $(seq 1 "$ROUNDS"); do
    [ "$(limit 40)" -le 10 ] && break
    echo "### round $r: local:cuda:0 (--raw: the pinned/pageable cudaMemcpy and TCP bounds)" | tee -a "$MD"
    timeout "$(limit 40)" "$GPU_BENCH" --device local:cuda:0 --transfers-only --raw 2>&1 |
        grep -v '^#' | tee -a "$MD" || rc=1
    for sets in $STAGE_SETS; do
        echo "### round $r: local:cuda:0, TENSORD_GPU_STAGE_SETS=$sets (pageable rows)" | tee -a "$MD"
        TENSORD_GPU_STAGE_SETS=$sets timeout "$(limit 30)" "$GPU_BENCH" --device local:cuda:0 \
            --transfers-only 2>&1 | grep -E '^td_(write|read)_[0-9]' | tee -a "$MD" || rc=1
    done
    rm -f "$SOCK"
    "$X/bin/tensord" --listen "unix:$SOCK" --devices cuda:0,cpu --shm-max-bytes 2147483648 \
        >"$OUT/server-unix.log" 2>&1 &
    upid=$!
    for _ in $(seq 1 100); do [ -S "$SOCK" ] && break; sleep 0.1; done
    for offer in "" --offer-off; do
        echo "### round $r: unix:$SOCK/cuda:0 (shared memory; host buffer in the region) $offer" | tee -a "$MD"
        timeout "$(limit 40)" "$GPU_BENCH" --device "unix:$SOCK/cuda:0" --transfers-only \
            --shm-host-bytes 1100000000 $offer 2>&1 | grep -v '^# device' | tee -a "$MD" || rc=1
    done
    kill -TERM "$upid" 2>/dev/null
    wait "$upid" 2>/dev/null
    if start_tensord "$X/bin/tensord" "$OUT/server-tcp.log" --devices cuda:0,cpu; then
        echo "### round $r: tensord://$SERVER_ADDR/cuda:0 (TCP loopback)" | tee -a "$MD"
        timeout "$(limit 40)" "$GPU_BENCH" --device "tensord://$SERVER_ADDR/cuda:0" \
            --transfers-only 2>&1 | grep -v '^# device' | tee -a "$MD" || rc=1
        stop_tensord
    else
        echo "tcp server did not start: $(tail -2 "$OUT/server-tcp.log")" | tee -a "$MD"
        rc=1
    fi
done
grep -i 'error\|pinned\|warn' "$OUT/server-unix.log" | tail -3
echo "pinned done in $(($(date +%s) - start)) s, rc $rc" | tee -a "$MD"
exit $rc
