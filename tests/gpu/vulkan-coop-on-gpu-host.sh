#!/usr/bin/env bash
# vulkan-coop-on-gpu-host.sh — issue 18's "matmul as a tiled shader (cooperative matrix where
# the device has it, measured)" on the H200: f16 MATMUL on VK_NV_cooperative_matrix
# (backends/vulkan/shaders/matmul_coop.comp) against TENSORD_VULKAN_NO_COOP=1 (matmul.comp)
# and the CUDA backend on the same GPU in the same run. Needs carry/ from
# tests/gpu/prepare-carry.sh built where glslc was installed (as vulkan-on-gpu-host.sh).
# Appends to $OUT/summary.txt, raw output to $OUT/vulkan-coop.log:
#   1. vulkan:0's cooperative matrix log line (which variant, or why none);
#   2. every matmul conformance case on local:vulkan:0 against local:cpu, cooperative
#      matrices on and off (--table: the worst fraction of the tolerance);
#      The conv cases likewise (the f16 convolutions' GEMMs take the same shader);
#   3. gpu-bench --matmul-only (f32, tf32, f16, bf16 at 4096 and 8192) on vulkan:0 with
#      cooperative matrices, without, and on cuda:0, side by side (TFLOP/s).
# About 2 minutes (BUDGET, default 150 s, caps every step). Alone, with the carry:
#     bash tests/gpu/vulkan-coop-on-gpu-host.sh
# (BENCH_ARGS replaces gpu-bench's arguments, e.g. "--matmul-only --quick" for a dry run on
# lavapipe with TMPDIR/tensord-gpu/ holding links to a build's binaries.)
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tensord-gpu-out}
mkdir -p "$OUT"
SUM=$OUT/summary.txt
LOG=$OUT/vulkan-coop.log
start=$(date +%s)
BUDGET=${BUDGET:-150}
. tests/gpu/gpu-host-lib.sh
X=${TMPDIR:-/tmp}/tensord-gpu
[ -x "$X/bin/tensord" ] || unpack_carry "$X" || { echo "FAIL unpack carry" | tee -a "$SUM"; exit 1; }
use_carry "$X"
if [ ! -f "$X/lib/tensord/tensord-backend-vulkan.so" ]; then
    echo "SKIP vulkan-coop: the carry has no tensord-backend-vulkan.so (prepare-carry.sh ran without glslc)" | tee -a "$SUM"
    exit 0
fi
for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json \
           /etc/vulkan/icd.d/nvidia_icd.json; do
    [ -f "$icd" ] && { export VK_DRIVER_FILES=${VK_DRIVER_FILES:-$icd}; break; }
done
echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-unset}" >>"$LOG"
export TENSORD_LOG_LEVEL=info
T=$(mktemp -d)

echo "== vulkan cooperative matrix (f16 matmul)" | tee -a "$SUM"
timeout "$(limit 30)" "$X/bin/conformance" --target local:vulkan:0 \
    --filter "matmul f16 [3,4] [4,5]" >"$T/probe" 2>&1
cat "$T/probe" >>"$LOG"
if ! grep -q "passed" "$T/probe"; then
    { echo "FAIL vulkan: no vulkan:0 on this host"; sed 's/^/  /' "$T/probe" | head -20; } | tee -a "$SUM"
    rm -rf "$T"
    exit 1
fi
grep -E "vulkan:0.*cooperative matrix|^device vulkan:0" "$T/probe" | sed 's/^/  /' | tee -a "$SUM"

for mode in coop nocoop; do
    nc=0
    [ "$mode" = nocoop ] && nc=1
    echo "== matmul conformance local:vulkan:0 vs local:cpu ($mode: TENSORD_VULKAN_NO_COOP=$nc)" | tee -a "$SUM"
    TENSORD_VULKAN_NO_COOP=$nc timeout "$(limit 60)" "$X/bin/conformance" --target local:vulkan:0 \
        --reference local:cpu --allow-unsupported --filter matmul --table >"$T/conf-$mode" 2>&1
    echo "  exit $?" >>"$T/conf-$mode"
    { echo "-- conformance $mode"; cat "$T/conf-$mode"; } >>"$LOG"
    grep -E "^(op |matmul |conformance )|FAIL|exit" "$T/conf-$mode" | head -20 | sed 's/^/  /' | tee -a "$SUM"
    # the f16 cases alone: the worst fraction of the tolerance the tensor-core sums use
    TENSORD_VULKAN_NO_COOP=$nc timeout "$(limit 30)" "$X/bin/conformance" --target local:vulkan:0 \
        --reference local:cpu --filter "matmul f16" --table >"$T/conf16-$mode" 2>&1
    { echo "-- conformance matmul f16 $mode"; cat "$T/conf16-$mode"; } >>"$LOG"
    grep -E "^matmul |^conformance " "$T/conf16-$mode" | sed 's/^/  f16 only: /' | tee -a "$SUM"
done

# the f16 convolutions' GEMMs take the same shader (OF32 variants for the gradients)
for mode in coop nocoop; do
    nc=0
    [ "$mode" = nocoop ] && nc=1
    TENSORD_VULKAN_NO_COOP=$nc timeout "$(limit 30)" "$X/bin/conformance" --target local:vulkan:0 \
        --reference local:cpu --allow-unsupported --filter "conv" --table >"$T/conv-$mode" 2>&1
    { echo "-- conformance conv $mode"; cat "$T/conv-$mode"; } >>"$LOG"
    grep -E "^conv|^conformance |FAIL" "$T/conv-$mode" | head -10 | sed "s/^/  conv $mode: /" | tee -a "$SUM"
done

GPU_BENCH=$X/bin/gpu-bench
[ -x "$GPU_BENCH" ] || GPU_BENCH=$PWD/carry/gpu-bench
for run in vulkan-coop vulkan-nocoop cuda; do
    dev=vulkan nc=0
    [ "$run" = cuda ] && dev=cuda
    [ "$run" = vulkan-nocoop ] && nc=1
    TENSORD_VULKAN_NO_COOP=$nc timeout "$(limit 45)" "$GPU_BENCH" --device "local:$dev:0" \
        ${BENCH_ARGS:---matmul-only --reps 3 --rounds 2} >"$T/bench-$run" 2>&1
    echo "  exit $?" >>"$T/bench-$run"
    { echo "== gpu-bench --matmul-only local:$dev:0 ($run)"; cat "$T/bench-$run"; } >>"$LOG"
done
{
    echo "== gpu-bench matmul on the same GPU (TFLOP/s): Vulkan with cooperative matrices, without, CUDA"
    awk 'FILENAME ~ /nocoop$/ { if ($3 == "ms") off[$1] = $4; next }
         FILENAME ~ /cuda$/ { if ($3 == "ms") cu[$1] = $4; next }
         $1 !~ /^#/ && $3 == "ms" {
             r1 = ($1 in off) && off[$1] > 0 ? sprintf("%.2f", $4 / off[$1]) : "-"
             r2 = ($1 in cu) && cu[$1] > 0 ? sprintf("%.3f", $4 / cu[$1]) : "-"
             printf "  %-20s coop %8s  no-coop %8s  cuda %8s  coop/no-coop %6s  coop/cuda %6s\n",
                    $1, $4, ($1 in off) ? off[$1] : "-", ($1 in cu) ? cu[$1] : "-", r1, r2 }' \
        "$T/bench-vulkan-nocoop" "$T/bench-cuda" "$T/bench-vulkan-coop"
    grep -h -E "failed|exit [1-9]" "$T"/bench-* | head -10 | sed 's/^/  /'
} | tee -a "$SUM"
rm -rf "$T"
echo "vulkan cooperative matrix on the GPU host done in $(($(date +%s) - start)) s" | tee -a "$SUM"
