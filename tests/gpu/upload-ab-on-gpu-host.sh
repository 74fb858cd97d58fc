#!/usr/bin/env bash
# upload-ab-on-gpu-host.sh — issue 12 item 3 on the GPU host: remote td_write/td_read of
# cuda:0 tensors through this tree's tensord and through an older server
# (carry/tensord-server-old.tar.xz: its bin/tensord and lib/tensord/ modules), alternated
# ROUNDS times in one call with the same client (gpu-bench --transfers-only over TCP
# loopback), plus the local pinned/pageable baselines (--raw). Made for the change that
# copies a received payload's slices straight into the CUDA backend's pinned staging
# (backend buffer_write_fill) instead of flattening them into host memory first.
# Needs carry/tensord-gpu.tar.xz (tests/gpu/prepare-carry.sh) and the old server tarball.
# Results: $OUT/upload-ab.md; bounded by $BUDGET s (default 120).
#     carry ["carry/tensord-gpu.tar.xz", "carry/tensord-server-old.tar.xz", "carry/gpu-bench"]
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
ROUNDS=${ROUNDS:-2}
. tests/gpu/gpu-host-lib.sh
gpu_host_setup upload-ab 120 || exit 1
OLD=$X/old-server
rm -rf "$OLD" && mkdir -p "$OLD" && tar -C "$OLD" -xJf carry/tensord-server-old.tar.xz ||
    { echo "cannot unpack carry/tensord-server-old.tar.xz" | tee -a "$MD"; exit 1; }
echo "## upload A/B ($(date -u +%FT%TZ)); local baselines first (--raw)" | tee -a "$MD"
timeout "$(limit 40)" "$GPU_BENCH" --device local:cuda:0 --transfers-only --raw 2>&1 | tee -a "$MD"
for r in $(seq 1 "$ROUNDS"); do
    for which in old new; do
        [ "$(limit 30)" -le 5 ] && break 2
        if [ "$which" = old ]; then bin=$OLD/bin/tensord mods=$OLD/lib/tensord
        else bin=$X/bin/tensord mods=$X/lib/tensord; fi
        if TENSORD_BACKEND_DIR=$mods start_tensord "$bin" "$OUT/server-$which.log" --devices cuda:0,cpu; then
            echo "## round $r, server $which: gpu-bench transfers, tensord://$SERVER_ADDR/cuda:0" | tee -a "$MD"
            timeout "$(limit 40)" "$GPU_BENCH" --device "tensord://$SERVER_ADDR/cuda:0" \
                --transfers-only 2>&1 | tee -a "$MD"
            stop_tensord
        else
            echo "server $which did not start: $(tail -2 "$OUT/server-$which.log")" | tee -a "$MD"
        fi
    done
done
echo "upload A/B done in $(($(date +%s) - start)) s" | tee -a "$MD"
exit 0
