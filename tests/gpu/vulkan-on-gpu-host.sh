#!/usr/bin/env bash
# vulkan-on-gpu-host.sh — issue 18 item 4 on the H200: the Vulkan backend on NVIDIA's Vulkan
# driver, held to the CPU reference and next to the CUDA backend on the same GPU in the same
# run. Needs carry/ from tests/gpu/prepare-carry.sh built where glslc was installed (then
# lib/tensord/ holds tensord-backend-vulkan.so and lib/ Debian's libvulkan.so.1: the GPU
# host has the NVIDIA driver's ICD but no loader). Appends to $OUT/summary.txt, raw output
# to $OUT/vulkan.log:
#   1. the devices the module sees (tensorctl info of a local context, vulkan:0's name);
#   2. conformance local:vulkan:0 against local:cpu, then through a tensord on loopback;
#   3. gpu-bench rows (matmul f32/f16/bf16, add, sum, softmax, ...) on vulkan:0 and cuda:0
#      side by side with the ratio vulkan/cuda (rates; above 1: Vulkan faster);
#   4. the Vulkan profile (TENSORD_VULKAN_PROFILE=1, vk_device.c: each op submitted alone,
#      its wall time per opcode, and the count of tensor vkAllocateMemory calls) of
#      gpu-bench's add, sum, softmax and cumsum f32 rows on vulkan:0, once, its top lines;
#   5. conv-bench (ResNet-50 shapes, f32) on both.
# Run after run-on-gpu-host.sh in the same device call (reuses its unpacked carry), or alone:
#     BUDGET=300 bash tests/gpu/vulkan-on-gpu-host.sh
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tensord-gpu-out}
mkdir -p "$OUT"
SUM=$OUT/summary.txt
LOG=$OUT/vulkan.log
start=$(date +%s)
BUDGET=${BUDGET:-300}
. tests/gpu/gpu-host-lib.sh
X=${TMPDIR:-/tmp}/tensord-gpu
[ -x "$X/bin/tensord" ] || unpack_carry "$X" || { echo "FAIL unpack carry" | tee -a "$SUM"; exit 1; }
use_carry "$X"
if [ ! -f "$X/lib/tensord/tensord-backend-vulkan.so" ]; then
    echo "SKIP vulkan: the carry has no tensord-backend-vulkan.so (prepare-carry.sh ran without glslc)" | tee -a "$SUM"
    exit 0
fi
# NVIDIA's ICD manifest, where the device tool's README says it is, unless the host's loader
# search finds one itself
for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json \
           /etc/vulkan/icd.d/nvidia_icd.json; do
    [ -f "$icd" ] && { export VK_DRIVER_FILES=${VK_DRIVER_FILES:-$icd}; break; }
done
echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-unset}" >>"$LOG"
T=$(mktemp -d)
TENSORD_LOG_LEVEL=info timeout "$(limit 30)" "$X/bin/conformance" --target local:vulkan:0 \
    --filter "full f32 [3,4] 3.7" >"$T/probe" 2>&1
if ! grep -q "passed" "$T/probe"; then
    { echo "FAIL vulkan: no vulkan:0 on this host"; sed 's/^/  /' "$T/probe" | head -20; } | tee -a "$SUM"
    rm -rf "$T"
    exit 1
fi
grep -i "vulkan" "$T/probe" | head -5 | sed 's/^/  /' | tee -a "$SUM"

# A driver that cannot preserve f32 subnormals says so at open (NVIDIA's does): hold it to
# the flushed reference for those cases (conformance --flush-subnormals), counted apart.
FLUSH=()
grep -q "cannot preserve f32 subnormals" "$T/probe" && FLUSH=(--flush-subnormals)
echo "== conformance local:vulkan:0 vs local:cpu ${FLUSH[*]} (every 2nd case)" | tee -a "$SUM"
timeout "$(limit 200)" "$X/bin/conformance" --target local:vulkan:0 --reference local:cpu \
    --allow-unsupported --sample 2 "${FLUSH[@]}" >"$T/conf-local" 2>&1
tail -3 "$T/conf-local" | tee -a "$SUM"
cat "$T/conf-local" >>"$LOG"
if start_tensord "$X/bin/tensord" "$T/server.log" --devices vulkan:0; then
    echo "== conformance through tensord (vulkan:0) vs local:cpu" | tee -a "$SUM"
    timeout "$(limit 240)" "$X/bin/conformance" --target "tensord://$SERVER_ADDR/vulkan:0" \
        --reference local:cpu --allow-unsupported --sample 4 "${FLUSH[@]}" >"$T/conf-remote" 2>&1
    tail -2 "$T/conf-remote" | tee -a "$SUM"
    cat "$T/conf-remote" >>"$LOG"
    stop_tensord
else
    { echo "FAIL tensord --devices vulkan:0 did not start"; tail -5 "$T/server.log"; } | tee -a "$SUM"
fi

# gpu-bench travels beside the tarball (prepare-carry.sh copies it to carry/gpu-bench)
GPU_BENCH=$X/bin/gpu-bench
[ -x "$GPU_BENCH" ] || GPU_BENCH=$PWD/carry/gpu-bench
# side by side: gpu-bench rows, same names on both devices; ratio of rates vulkan / cuda
for d in vulkan cuda; do
    timeout "$(limit 120)" "$GPU_BENCH" --device "local:$d:0" --reps 5 --rounds 3 \
        >"$T/bench-$d" 2>&1
    { echo "== gpu-bench local:$d:0"; cat "$T/bench-$d"; } >>"$LOG"
done
{
    echo "== gpu-bench on the same H200: Vulkan next to CUDA (rates; v/c above 1: Vulkan faster)"
    awk 'NR == FNR { if ($1 !~ /^#/ && $3 == "ms") c[$1] = $4; next }
         $1 !~ /^#/ && $3 == "ms" && ($1 in c) && c[$1] > 0 {
             printf "  %-32s vulkan %10s  cuda %10s %s  v/c %.2f\n", $1, $4, c[$1], $5, $4 / c[$1] }' \
        "$T/bench-cuda" "$T/bench-vulkan"
    grep -h '^# .*failed' "$T/bench-vulkan" | head -10 | sed 's/^/  vulkan /'
} | tee -a "$SUM"
# 4: where the Vulkan rows' time goes (needs 30 s of the budget left, else skipped)
if [ $((BUDGET - ($(date +%s) - start))) -ge 30 ]; then
    TENSORD_VULKAN_PROFILE=1 timeout "$(limit 60)" "$GPU_BENCH" --device local:vulkan:0 \
        --only add_f32,sum_f32,softmax,cumsum --reps 3 --rounds 1 >"$T/prof" 2>&1
    { echo "== vulkan profile (TENSORD_VULKAN_PROFILE=1) of gpu-bench add, sum, softmax, cumsum f32"
      grep -v '^#' "$T/prof" | grep ' ms ' | head -6 | sed 's/^/  /'
      grep -A 9 '^tensord vulkan profile' "$T/prof" | sed 's/^/  /'
      grep -h '^# .*failed' "$T/prof" | head -4 | sed 's/^/  /'; } | tee -a "$SUM"
    { echo "== vulkan profile run"; cat "$T/prof"; } >>"$LOG"
else
    echo "SKIP vulkan profile: under 30 s of the budget left" | tee -a "$SUM"
fi
for d in vulkan cuda; do
    timeout "$(limit 90)" "$X/bin/conv-bench" "local:$d:0" 3 f32 >"$T/conv-$d" 2>&1
    { echo "== conv-bench local:$d:0"; cat "$T/conv-$d"; } >>"$LOG"
done
{
    echo "== conv2d ResNet-50 shapes, batch 32, f32 (ms; c/v above 1: Vulkan faster)"
    awk 'NR == FNR { if ($1 == "tensord") { k = $2 " " $3 " " $4; for (i = 1; i <= NF; i++) if ($i == "ms") c[k] = $(i - 1) } next }
         $1 == "tensord" { k = $2 " " $3 " " $4; for (i = 1; i <= NF; i++) if ($i == "ms") v = $(i - 1)
                           if (k in c) printf "  %-32s vulkan %9s ms  cuda %9s ms  c/v %.2f\n", k, v, c[k], c[k] / v }' \
        "$T/conv-cuda" "$T/conv-vulkan"
} | tee -a "$SUM"
rm -rf "$T"
echo "vulkan on the GPU host done in $(($(date +%s) - start)) s" | tee -a "$SUM"
