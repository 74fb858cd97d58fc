#!/usr/bin/env bash
# bench-on-gpu-host.sh — GPU speed of tensord next to PyTorch on the same machine, same run.
# Needs carry/ from tests/gpu/prepare-carry.sh (which also copies carry/gpu-bench).
# Run on the GPU host from the repository root (device tool, carry ["carry"]):
#     bash tests/gpu/bench-on-gpu-host.sh            # NCU=1 adds the Nsight Compute reports
# Results go to $OUT (default /tmp/tensord-gpu-bench-out), at most 8 text files:
#     summary.txt         the ratio table (tensord / PyTorch speed per measure); read first
#     bench-local.txt     bench/gpu_bench.c on local:cuda:0 (with the raw transfer rows)
#     bench-hip-gemm.txt  matmul rows with the HIP backend's GEMM kernel (nvcc-built)
#     bench-remote.txt    the same through a tensord on 127.0.0.1 (session cuda:0)
#     torch.txt           bench/gpu_torch.py (PyTorch on cuda:0)
#     server.log          that tensord's log
#     ncu-tensord.txt     NCU=1: ncu on one add, one sum and one softmax of the bench sizes
#     ncu-torch.txt       through local:cuda:0 (gpu-bench --profile) and through PyTorch
#                         (gpu_torch.py --profile); sections SpeedOfLight,
#                         MemoryWorkloadAnalysis, LaunchStats; clocks left alone
# Both benchmarks time the same way (bench/gpu_bench.c says how and why): one untimed pass
# of each timed loop, then the median of 3 loops of 20 ops. Every step has a time limit and
# the whole run ends by $BUDGET (170) seconds. Exit status: 0 when every step passed.
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/tensord-gpu-bench-out}
mkdir -p "$OUT"
SUM=$OUT/summary.txt
: >"$SUM"
note() { echo "$*" | tee -a "$SUM"; }
failures=0
step() { # name rc
    if [ "$2" -ne 0 ]; then note "FAIL $1 (exit $2)"; failures=$((failures + 1)); fi
}
start=$(date +%s)
BUDGET=${BUDGET:-170}
limit() { # seconds a step may take: its own limit, capped by what is left of BUDGET
    local left=$((BUDGET - ($(date +%s) - start)))
    [ "$left" -lt 5 ] && left=5
    echo $(($1 < left ? $1 : left))
}
[ -x carry/gpu-bench ] || { note "FAIL carry/gpu-bench missing (run tests/gpu/prepare-carry.sh here first)"; exit 1; }

. tests/gpu/gpu-host-lib.sh
X=${TMPDIR:-/tmp}/tensord-gpu-bench
unpack_carry "$X" || { note "FAIL unpack carry/tensord-gpu.tar.xz"; exit 1; }
HOST_LD=${LD_LIBRARY_PATH:-} # PyTorch runs with the host's libraries, not the carried ones
unset LD_LIBRARY_PATH        # the carried ones first, then the host's CUDA (use_carry)
use_carry "$X"
nvidia-smi -L 2>/dev/null | head -1 | tee -a "$SUM"

# ---- 1. tensord in-process ----
# (--raw: the transfer rows also get raw pinned/pageable cudaMemcpy, memcpy into pinned
# memory and a loopback TCP stream, the bounds of td_write/td_read locally and remotely)
timeout "$(limit 75)" carry/gpu-bench --device local:cuda:0 --raw >"$OUT/bench-local.txt" 2>&1
step "gpu-bench local:cuda:0 (see bench-local.txt)" $?

# ---- 1b. the HIP backend's own GEMM kernel, built by nvcc into a CUDA module (no AMD GPU is
# reachable): its matmul rows beside cuBLAS's above. It ignores TF32 (always full f32).
if [ -f "$X/lib/hip-gemm/tensord-backend-cuda.so" ]; then
    TENSORD_BACKEND_DIR="$X/lib/hip-gemm" timeout "$(limit 40)" carry/gpu-bench \
        --device local:cuda:0 --matmul-only --reps 5 --rounds 2 >"$OUT/bench-hip-gemm.txt" 2>&1
    step "gpu-bench hip_gemm.cu under nvcc (see bench-hip-gemm.txt)" $?
fi

# ---- 2. PyTorch, same sizes and timing rule ----
timeout "$(limit 90)" env PYTHONUNBUFFERED=1 LD_LIBRARY_PATH="$HOST_LD" python3 bench/gpu_torch.py \
    >"$OUT/torch.txt" 2>&1
step "gpu_torch.py (see torch.txt)" $?

# ---- 3. tensord through a server on loopback ----
start_tensord "$X/bin/tensord" "$OUT/server.log"
addr=$SERVER_ADDR
if [ -n "$addr" ]; then
    timeout "$(limit 60)" carry/gpu-bench --device "tensord://$addr/cuda:0" \
        >"$OUT/bench-remote.txt" 2>&1
    step "gpu-bench tensord://$addr/cuda:0 (see bench-remote.txt)" $?
else
    step "tensord start (see server.log)" 1
fi
stop_tensord

# ---- the table: rows are the measures' names, shared by both programs ----
{
    echo
    echo "rate per measure (GB/s count bytes read + written); x/PT = PyTorch's time / tensord's"
    echo "(above 1: tensord faster)"
    awk -v L="$OUT/bench-local.txt" -v R="$OUT/bench-remote.txt" -v T="$OUT/torch.txt" '
        FILENAME == L { f = 1 } FILENAME == R { f = 2 } FILENAME == T { f = 3 }
        $3 == "ms" {
            ms[f, $1] = $2; rate[f, $1] = $4 " " $5
            if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 }
        }
        function cell(j, k) { return ((j, k) in rate) ? rate[j, k] : "-" }
        function ratio(j, k) {
            return ((j, k) in ms && (3, k) in ms && ms[j, k] > 0) ? sprintf("%.2f", ms[3, k] / ms[j, k]) : "-"
        }
        END {
            printf "%-26s %16s %16s %16s %7s %7s\n", "measure", "tensord local", "tensord remote",
                   "PyTorch", "loc/PT", "rem/PT"
            for (i = 1; i <= n; i++) {
                k = order[i]
                printf "%-26s %16s %16s %16s %7s %7s\n", k, cell(1, k), cell(2, k), cell(3, k),
                       ratio(1, k), ratio(2, k)
            }
        }' "$OUT/bench-local.txt" "$OUT/bench-remote.txt" "$OUT/torch.txt"
    echo
    grep -h '^# tf32 check' "$OUT/bench-local.txt" | sed 's/^# /tensord local: /'
    grep -h '^# tf32 check' "$OUT/torch.txt" | sed 's/^# /PyTorch: /'
} | tee -a "$SUM"

# ---- 4. optional: Nsight Compute on one add, sum and softmax, both sides ----
if [ "${NCU:-0}" = 1 ]; then
    NCU_BIN=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    if [ -z "$NCU_BIN" ]; then
        note "FAIL ncu not found"
        failures=$((failures + 1))
    else
        ncu_args=(--clock-control none --profile-from-start off --section SpeedOfLight
                  --section MemoryWorkloadAnalysis --section LaunchStats)
        timeout "$(limit 60)" "$NCU_BIN" "${ncu_args[@]}" carry/gpu-bench --device local:cuda:0 \
            --profile >"$OUT/ncu-tensord.txt" 2>&1
        step "ncu gpu-bench --profile (see ncu-tensord.txt)" $?
        timeout "$(limit 60)" env LD_LIBRARY_PATH="$HOST_LD" "$NCU_BIN" "${ncu_args[@]}" \
            python3 bench/gpu_torch.py --profile >"$OUT/ncu-torch.txt" 2>&1
        step "ncu gpu_torch.py --profile (see ncu-torch.txt)" $?
        for f in ncu-tensord ncu-torch; do
            note "$f: $(grep -c 'Section: GPU Speed Of Light' "$OUT/$f.txt") kernels profiled"
        done
    fi
fi
note "done in $(($(date +%s) - start)) s, $failures failed step(s); results in $OUT"
[ "$failures" -eq 0 ]
