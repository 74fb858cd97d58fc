#!/usr/bin/env bash
# candidates-on-gpu-host.sh — issue 12 item 2 over TCP on the GPU host: GPU upload candidates
# as device-to-device copies (this tree's default) against host copies
# (TENSORD_CANDIDATE_COPY=host, the old way) in one call, with the profile of each remote
# run (TENSORD_TRACE_JOBS=1: the worker time per request kind, read and candidate copies).
#   1. conformance on local:cuda:0 (copy-on-write on the GPU is now a device-to-device copy)
#   2. gpu-bench --transfers-only on local:cuda:0 with --raw (pinned/pageable cudaMemcpy and
#      the raw TCP stream in the same process), then through tensord://…/cuda:0 for each
#      candidate mode, default options and --offer-off, alternated ROUNDS times (and cpu
#      tensors through the same client and server once per round)
#   3. tensord-bench P4 on cuda:0 (second upload of the same 256 MiB in a new session: bytes
#      sent, and the bytes read back must be the uploaded ones) and on cpu
#   4. conformance through a tensord (session cuda:0)
# CONFORMANCE=0 skips steps 1 and 4 (a timing-only call).
# Needs carry/ from tests/gpu/prepare-carry.sh. Results: $OUT/candidates.md (read it first),
# $OUT/conformance.log, $OUT/server-*.log; bounded by $BUDGET s (default 540).
#     OUT=$OUT bash tests/gpu/candidates-on-gpu-host.sh
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
ROUNDS=${ROUNDS:-2}
. tests/gpu/gpu-host-lib.sh
gpu_host_setup candidates 540 || exit 1
LOG=$OUT/bench-stderr.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$MD"

CONFORMANCE=${CONFORMANCE:-1} # 0: skip steps 1 and 4 (a timing-only call)
if [ "$CONFORMANCE" = 1 ]; then
    echo "## 1. conformance local:cuda:0" | tee -a "$MD"
    timeout "$(limit 150)" "$X/bin/conformance" --target local:cuda:0 >"$OUT/conformance.log" 2>&1
    echo "rc $? $(grep -m1 '^conformance ' "$OUT/conformance.log")" | tee -a "$MD"
    grep -m5 '^FAIL ' "$OUT/conformance.log" | tee -a "$MD"
fi

echo "## 2. gpu-bench transfers, local:cuda:0 (--raw baselines)" | tee -a "$MD"
timeout "$(limit 60)" "$GPU_BENCH" --device local:cuda:0 --transfers-only --raw 2>>"$LOG" | tee -a "$MD"
for r in $(seq 1 "$ROUNDS"); do
    for mode in device host; do
        [ "$(limit 60)" -le 20 ] && break 2
        SLOG=$OUT/server-$mode.log
        if ! TENSORD_TRACE_JOBS=1 TENSORD_CANDIDATE_COPY=$mode start_tensord "$X/bin/tensord" \
            "$SLOG.$r" --devices cuda:0,cpu; then
            echo "tensord ($mode) did not start" | tee -a "$MD"
            continue
        fi
        devs=cuda:0
        [ "$mode" = device ] && devs="cuda:0 cpu" # cpu tensors: a candidate is a reference
        for dev in $devs; do
            for offer in "" --offer-off; do
                [ "$(limit 60)" -le 10 ] && break 2
                echo "### round $r, candidates as $mode copies, ${offer:-default options}: tensord://$SERVER_ADDR/$dev" | tee -a "$MD"
                timeout "$(limit 60)" "$GPU_BENCH" --device "tensord://$SERVER_ADDR/$dev" \
                    --transfers-only $offer 2>>"$LOG" | tee -a "$MD"
                sleep 0.3
                grep -a "worker time" "$SLOG.$r" | tail -1 | sed 's/^.*TRACE_JOBS, count\/total)/    profile/' | tee -a "$MD"
            done
        done
        stop_tensord
    done
done

echo "## 3. tensord-bench P4 (cuda:0, then cpu)" | tee -a "$MD"
for dev in cuda:0 cpu; do
    timeout "$(limit 90)" "$X/bin/tensord-bench" --only P4 --device "$dev" --tensord "$X/bin/tensord" \
        2>>"$LOG" | grep -E "^\| P4" | tee -a "$MD"
done
grep -a "READ BACK\|differs" "$LOG" | head -3 | tee -a "$MD"

echo "## 4. conformance through tensord (cuda:0, device candidates)" | tee -a "$MD"
if [ "$CONFORMANCE" = 1 ] && start_tensord "$X/bin/tensord" "$OUT/server-conformance.log" --devices cuda:0,cpu; then
    timeout "$(limit 150)" "$X/bin/conformance" --target "tensord://$SERVER_ADDR/cuda:0" \
        >"$OUT/conformance-remote.log" 2>&1
    echo "rc $? $(grep -m1 '^conformance ' "$OUT/conformance-remote.log")" | tee -a "$MD"
    grep -m5 '^FAIL ' "$OUT/conformance-remote.log" | tee -a "$MD"
    stop_tensord
    echo "tensord exit status $SERVER_STATUS" | tee -a "$MD"
fi
echo "elapsed $(($(date +%s) - start)) s" | tee -a "$MD"
exit 0
