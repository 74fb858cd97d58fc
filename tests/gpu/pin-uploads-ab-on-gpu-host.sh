#!/usr/bin/env bash
# pin-uploads-ab-on-gpu-host.sh — issue 12 on the GPU host: remote td_write/td_read of cuda:0
# tensors over TCP loopback through this tree's tensord with the pinned upload pool (the
# default: server/pinpool.h) and with TENSORD_PIN_UPLOADS=0 (the worker stages each chunk),
# alternated ROUNDS times with the same client (gpu-bench --transfers-only), after the local
# pinned/pageable baselines (--raw). Needs carry/tensord-gpu.tar.xz (prepare-carry.sh) and
# carry/gpu-bench. Results: $OUT/pin-uploads-ab.md; bounded by $BUDGET s (default 120).
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
ROUNDS=${ROUNDS:-2}
. tests/gpu/gpu-host-lib.sh
gpu_host_setup pin-uploads-ab 120 || exit 1
echo "## pinned-upload A/B ($(date -u +%FT%TZ)); local baselines first (--raw)" | tee -a "$MD"
timeout "$(limit 40)" "$GPU_BENCH" --device local:cuda:0 --transfers-only --raw 2>&1 | tee -a "$MD"
for r in $(seq 1 "$ROUNDS"); do
    for pin in 1 0; do
        [ "$(limit 30)" -le 5 ] && break 2
        if TENSORD_PIN_UPLOADS=$pin start_tensord "$X/bin/tensord" "$OUT/server-pin$pin.log" \
            --devices cuda:0,cpu; then
            echo "## round $r, TENSORD_PIN_UPLOADS=$pin: gpu-bench transfers, tensord://$SERVER_ADDR/cuda:0" | tee -a "$MD"
            timeout "$(limit 40)" "$GPU_BENCH" --device "tensord://$SERVER_ADDR/cuda:0" \
                --transfers-only 2>&1 | tee -a "$MD"
            stop_tensord
            echo "server exit status after SIGTERM: $SERVER_STATUS" | tee -a "$MD"
        else
            echo "server (pin $pin) did not start: $(tail -2 "$OUT/server-pin$pin.log")" | tee -a "$MD"
        fi
    done
done
echo "pinned-upload A/B done in $(($(date +%s) - start)) s" | tee -a "$MD"
exit 0
