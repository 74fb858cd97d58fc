#!/usr/bin/env bash
# memops-on-gpu-host.sh — issue 13's memory-bound GPU targets on one call: the layer-norm row
# kernels (gpu_nn.cu) and the one-pass cumsum tiles (gpu_scan.cu) checked against the CPU
# and timed next to PyTorch on the same GPU, same run.
#
# Run here first (builds the carry: release tree with the CUDA module, no Vulkan, only the
# carried targets):
#     BUILD=build VULKAN=disabled ONLY_CARRY=1 NINJA_JOBS=2 tests/gpu/prepare-carry.sh
# then on the GPU host from the repository root (device tool, carry ["carry"]):
#     bash tests/gpu/memops-on-gpu-host.sh            # BUDGET=240 (seconds) by default
# SCAN_VARIANTS (default "0 1 3 4") are the TENSORD_GPU_SCAN_VARIANT values checked and timed;
# conformance of cum also runs under 5 (3's test aid) when 3 is among them.
# Appends to $OUT/summary.txt (read first); raw output in $OUT/memops.log, the conformance
# logs in $OUT/conformance-*.log, Nsight Compute (when time is left) in $OUT/ncu-memops.txt.
#
#  1. conformance on local:cuda:0 against local:cpu, cases whose name contains "norm"
#     (layer/rms/group/batch norm, forward and backward: the row kernels k_nn_row and
#     k_nn_rowv, the group kernel) and "cum" (cumsum, cumprod: k_lines, k_scan_tiles), the
#     latter again under each other scan variant (1: k_scan_lookback; 3, 4: k_scan_chain with
#     tiles of 512 and 256 threads; 5: 3 with tile 0's inclusive prefix only); then scan-check
#     (tests/gpu/scan_check.c: cumsum of f32 lines of 1 to 2^28 elements twice, bit for bit,
#     and against a long double reference) under each variant;
#  2. layer norm [8192, 4096] f32 (affine, no affine, backward dx; bench/nn_bench.c next to
#     bench/nn_torch.py) and cumsum over 2^28 f32 (1 GiB; gpu-bench --cumsum-only next to
#     gpu_torch.py --cumsum-only), tensord and PyTorch alternated three times each, the
#     cumsum row under each of SCAN_VARIANTS (rows ..._v0, ..._v1, ...: the tree of tile
#     totals, the ordered look-back, the chained scans) in each round; per row the median of
#     the three runs' medians, and x/PT = PyTorch's time / tensord's;
#  3. where the time goes: tensord's per-op GPU time (TENSORD_GPU_PROFILE=1, each op timed
#     by two events) next to PyTorch's kernels timed by CUDA events (20 back-to-back ops);
#  4. if at least 45 s are left: ncu (SpeedOfLight, Occupancy, LaunchStats, memory workload,
#     warp states: where the cumsum tiles' warps stall) on the layer-norm row kernels and one
#     cumsum tile kernel of each variant.
# Exit status: 0 when every step passed.
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/tensord-gpu-out}
mkdir -p "$OUT"
SUM=$OUT/summary.txt
LOG=$OUT/memops.log
start=$(date +%s)
BUDGET=${BUDGET:-240}
SCAN_VARIANTS=${SCAN_VARIANTS:-0 1 3 4}
cum_variants=$SCAN_VARIANTS
case " $SCAN_VARIANTS " in *" 3 "*) cum_variants="$SCAN_VARIANTS 5" ;; esac
HOST_LD=${LD_LIBRARY_PATH:-} # PyTorch runs with the host's libraries, not the carried ones
. tests/gpu/gpu-host-lib.sh
note() { echo "$*" | tee -a "$SUM"; }
failures=0
step() { # name rc
    if [ "$2" -ne 0 ]; then note "FAIL $1 (exit $2)"; failures=$((failures + 1)); fi
}
[ -x carry/gpu-bench ] || { note "FAIL carry/gpu-bench missing (run tests/gpu/prepare-carry.sh here first)"; exit 1; }
# always a fresh unpack of this carry (a warm machine may hold another branch's binaries
# in the other scripts' directory)
X=${TMPDIR:-/tmp}/tensord-gpu-memops
unpack_carry "$X" || { note "FAIL unpack carry"; exit 1; }
unset LD_LIBRARY_PATH
use_carry "$X"
note "== memops (issue 13: layer norm, cumsum) $(date -u +%H:%M:%S) UTC on $(nvidia-smi -L 2>/dev/null | head -1)"
py() { # seconds script args...
    timeout "$(limit "$1")" env PYTHONUNBUFFERED=1 LD_LIBRARY_PATH="$HOST_LD" python3 "${@:2}"
}

# ---- 1. conformance against the CPU ----
fvs=(norm:0)
for v in $cum_variants; do fvs+=("cum:$v"); done
for fv in "${fvs[@]}"; do
    f=${fv%:*} v=${fv#*:}
    TENSORD_GPU_SCAN_VARIANT=$v timeout "$(limit 40)" "$X/bin/conformance" \
        --target local:cuda:0 --filter "$f" >"$OUT/conformance-$f-v$v.log" 2>&1
    rc=$?
    note "conformance local:cuda:0 --filter $f (scan variant $v): $(grep -m1 '^conformance ' "$OUT/conformance-$f-v$v.log" | sed 's/^conformance //') (exit $rc)"
    grep -m5 '^FAIL' "$OUT/conformance-$f-v$v.log" | cut -c1-300 | tee -a "$SUM"
    step "conformance --filter $f (scan variant $v)" $rc
done
for v in $SCAN_VARIANTS; do
    TENSORD_GPU_SCAN_VARIANT=$v timeout "$(limit 40)" "$X/bin/scan-check" --device local:cuda:0 \
        >"$OUT/scan-check-v$v.log" 2>&1
    rc=$?
    note "scan-check (scan variant $v): $(tail -1 "$OUT/scan-check-v$v.log") (exit $rc)"
    grep -m5 '^FAIL' "$OUT/scan-check-v$v.log" | cut -c1-300 | tee -a "$SUM"
    step "scan-check (scan variant $v)" $rc
done

# ---- 2. speed next to PyTorch, alternated ----
T=$(mktemp -d)
for i in 1 2 3; do
    timeout "$(limit 30)" "$X/bin/nn-bench" --device local:cuda:0 >"$T/ln-td-$i" 2>&1
    step "nn-bench run $i" $?
    py 40 bench/nn_torch.py --device cuda >"$T/ln-pt-$i" 2>&1
    step "nn_torch.py run $i" $?
    for v in $SCAN_VARIANTS; do
        TENSORD_GPU_SCAN_VARIANT=$v timeout "$(limit 30)" carry/gpu-bench --device local:cuda:0 \
            --cumsum-only >"$T/cs-td$v-$i" 2>&1
        step "gpu-bench --cumsum-only (scan variant $v) run $i" $?
        sed -i -E "s/^(cumsum[A-Za-z0-9_]*) /\1_v$v /" "$T/cs-td$v-$i"
    done
    py 40 bench/gpu_torch.py --cumsum-only >"$T/cs-pt-$i" 2>&1
    step "gpu_torch.py --cumsum-only run $i" $?
done
for f in "$T"/*; do { echo "== $(basename "$f")"; cat "$f"; } >>"$LOG"; done
# "name median-ms runs" for every row name of the files (lines "NAME X ms ...")
medians() {
    awk '$3 == "ms" && $1 !~ /^#/ {
             v[$1] = v[$1] " " $2; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
         END { for (i = 1; i <= n; i++) {
                   k = order[i]; m = split(v[k], a, " ")
                   for (x = 1; x <= m; x++) for (y = x + 1; y <= m; y++)
                       if (a[y] + 0 < a[x] + 0) { t = a[x]; a[x] = a[y]; a[y] = t }
                   printf "%s %s %d\n", k, a[int((m + 1) / 2)], m } }' "$@"
}
medians "$T"/ln-td-* "$T"/cs-td* >"$T/td.med"
medians "$T"/ln-pt-* "$T"/cs-pt-* >"$T/pt.med"
{
    echo "== speed on cuda:0, median of 3 alternated runs (each run: its own median of timed loops)"
    echo "   x/PT = PyTorch's time / tensord's (above 1: tensord faster; target >= 0.9)"
    awk 'NR == FNR { pt[$1] = $2; next }
         { k = $1; sub(/_v[0-9]+$/, "", k) # row NAME_vN (scan variant N): PyTorch row NAME
           r = (k in pt && $2 > 0) ? sprintf("%.2f", pt[k] / $2) : "-"
           printf "  %-28s tensord %9s ms   PyTorch %9s ms   x/PT %s   (%d runs)\n", $1, $2,
                  (k in pt) ? pt[k] : "-", r, $3 }' "$T/pt.med" "$T/td.med"
    echo "  rates, tensord then PyTorch (each run):"
    grep -h -E '^(layer_norm|cumsum)' "$T"/ln-td-* "$T"/cs-td* | awk '{printf "    tensord %-28s %s ms %s %s\n", $1, $2, $4, $5}'
    grep -h -E '^(layer_norm|cumsum)' "$T"/ln-pt-* "$T"/cs-pt-* | awk '{printf "    PyTorch %-28s %s ms %s %s\n", $1, $2, $4, $5}'
} | tee -a "$SUM"

# ---- 3. kernel time: tensord's per-op GPU time, PyTorch's kernels by CUDA events ----
TENSORD_GPU_PROFILE=1 timeout "$(limit 30)" "$X/bin/nn-bench" --device local:cuda:0 --reps 5 \
    --rounds 1 >"$T/prof-ln" 2>&1
step "nn-bench TENSORD_GPU_PROFILE=1" $?
for v in $SCAN_VARIANTS; do
    echo "== scan variant $v" >>"$T/prof-cs"
    TENSORD_GPU_SCAN_VARIANT=$v TENSORD_GPU_PROFILE=1 timeout "$(limit 30)" carry/gpu-bench \
        --device local:cuda:0 --cumsum-only --reps 5 --rounds 1 >>"$T/prof-cs" 2>&1
    step "gpu-bench --cumsum-only TENSORD_GPU_PROFILE=1 (scan variant $v)" $?
done
cat >"$T/ev.py" <<'EOF'
import torch
import torch.nn.functional as F
dev = "cuda"
g = torch.Generator().manual_seed(1)
x = (torch.randn(8192, 4096, generator=g) * 2 + 0.5).to(dev)
dy = torch.randn(8192, 4096, generator=g).to(dev)
w = (torch.randn(4096, generator=g) * 0.1 + 1).to(dev)
b = (torch.randn(4096, generator=g) * 0.1).to(dev)
xg = x.clone().requires_grad_(True)
c = torch.rand(1 << 28, device=dev) * 2 - 1
def bwd():
    y = F.layer_norm(xg, (4096,), w, b, 1e-5)
    return torch.autograd.grad(y, xg, dy)[0]
def ev(name, fn, nbytes, n=20):
    fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n):
        fn()
    e.record()
    e.synchronize()
    ms = s.elapsed_time(e) / n
    print("torch-events %-28s %9.4f ms %8.1f GB/s" % (name, ms, nbytes / ms / 1e6))
mb = 8192 * 4096 * 4
ev("layer_norm_f32", lambda: F.layer_norm(x, (4096,), w, b, 1e-5), 2 * mb)
ev("layer_norm_f32_noaffine", lambda: F.layer_norm(x, (4096,), None, None, 1e-5), 2 * mb)
ev("layer_norm_backward_dx_f32", bwd, 3 * mb)
ev("cumsum_f32_268435456", lambda: torch.cumsum(c, 0), 2 * (1 << 28) * 4)
EOF
py 40 "$T/ev.py" >"$T/ev" 2>&1
step "PyTorch CUDA-event timing" $?
{
    echo "== kernel time (tensord: TENSORD_GPU_PROFILE=1 per-op GPU time, each op waited for;"
    echo "   PyTorch: CUDA events around 20 back-to-back ops, so launch gaps included)"
    grep -h -E 'profile:|^  op |layer_norm|cumsum|^  var |^== scan' "$T/prof-ln" "$T/prof-cs" | sed 's/^/  /'
    sed 's/^/  /' "$T/ev"
} | tee -a "$SUM"
for f in prof-ln prof-cs ev; do { echo "== $f"; cat "$T/$f"; } >>"$LOG"; done

# ---- 4. Nsight Compute on the kernels, if time is left ----
left=$((BUDGET - ($(date +%s) - start)))
NCU_BIN=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ "${NCU:-1}" = 1 ] && [ "$left" -ge 45 ] && [ -n "$NCU_BIN" ]; then
    ncu_args=(--clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats
              --section MemoryWorkloadAnalysis --section WarpStateStats)
    # nn-bench --reps 1 --rounds 1: two launches of each row (untimed, timed); the first three
    # matching launches are layer norm affine, affine, no affine
    timeout "$(limit 40)" "$NCU_BIN" "${ncu_args[@]}" -k 'regex:k_nn_row' -c 6 \
        "$X/bin/nn-bench" --device local:cuda:0 --reps 1 --rounds 1 >"$OUT/ncu-memops.txt" 2>&1
    step "ncu nn-bench" $?
    for v in $SCAN_VARIANTS; do
        TENSORD_GPU_SCAN_VARIANT=$v timeout "$(limit 40)" "$NCU_BIN" "${ncu_args[@]}" \
            -k 'regex:k_scan_(tiles|lookback|chain)' -c 1 carry/gpu-bench --device local:cuda:0 \
            --cumsum-only --reps 1 --rounds 1 >>"$OUT/ncu-memops.txt" 2>&1
        step "ncu gpu-bench --cumsum-only (scan variant $v)" $?
    done
    {
        echo "== ncu (kernel: duration, DRAM throughput, achieved occupancy, registers)"
        grep -E 'Context [0-9]+, Stream|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per Thread|Theoretical Occupancy|Warp Cycles Per Issued|stall|Stall' \
            "$OUT/ncu-memops.txt" | sed -E 's/^ +/  /' | cut -c1-160 | head -120
    } | tee -a "$SUM"
else
    note "ncu skipped (NCU=${NCU:-1}, ${left} s left, ncu: ${NCU_BIN:-not found})"
fi
rm -rf "$T"
note "memops done in $(($(date +%s) - start)) s, $failures failed step(s)"
[ "$failures" -eq 0 ]
