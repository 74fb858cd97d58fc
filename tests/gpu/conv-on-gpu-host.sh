#!/usr/bin/env bash
# conv-on-gpu-host.sh — issue 13's conv target on the GPU host: the CUDA backend's f16/bf16
# and f32 implicit-GEMM convolution (backends/gpu/gpu_conv.cu) checked and timed in one short
# device call (BUDGET 60 s wall), with carry/ from tests/gpu/prepare-carry.sh:
#   1. conformance --filter conv on local:cuda:0 against local:cpu (CONV in every float dtype:
#      f16/bf16 take the kernel; also CONV_TRANSPOSE and CONV_WEIGHT_GRAD), default variant,
#      and again with TENSORD_GPU_CONV_F32=1 (f32 CONV on the FFMA kernel);
#   2. conv-bench (five ResNet-50 layers, batch 32) in bf16 next to bench/conv_torch.py for
#      TENSORD_GPU_CONV_VARIANT 0 (auto), 3 (128x64), 6 (channels-last off: the element
#      gather), 7 (split-K off) and 5 (the old im2col + cuBLAS path); variant 0 runs with
#      TENSORD_GPU_CONV_TRACE=1, whose lines (path, tile, split, M, N, K per launch) show
#      that the kernel ran;
#      f32 (TF32 off) for each TENSORD_GPU_CONV_F32 in CONV_F32_MODES (default "0 1": im2col +
#      cuBLAS, the FFMA kernel traced; 2, 3: the FFMA kernel with BM 128, 64);
#   3. compute-sanitizer memcheck and racecheck over conformance's conv cases (with
#      TENSORD_GPU_CONV_F32=1: both kernels).
# Writes $OUT/summary.txt (appended) and raw logs $OUT/conv-*.log.
#     lead: carry ["carry"], command: bash tests/gpu/conv-on-gpu-host.sh
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tensord-gpu-out}
mkdir -p "$OUT"
SUM=$OUT/summary.txt
start=$(date +%s)
BUDGET=${BUDGET:-60}
HOST_LD=${LD_LIBRARY_PATH:-}
. tests/gpu/gpu-host-lib.sh
X=${TMPDIR:-/tmp}/tensord-gpu
# unpack again unless this very tarball is already unpacked (a warm host may hold an older one)
sum=$(sha256sum carry/tensord-gpu.tar.xz 2>/dev/null | cut -c1-16)
if [ ! -x "$X/bin/conv-bench" ] || [ "$(cat "$X/.carry-sum" 2>/dev/null)" != "$sum" ]; then
    unpack_carry "$X" && echo "$sum" >"$X/.carry-sum" || { echo "FAIL unpack carry" | tee -a "$SUM"; exit 1; }
fi
use_carry "$X"
py() { timeout "$(limit "$1")" env PYTHONUNBUFFERED=1 LD_LIBRARY_PATH="$HOST_LD" python3 "${@:2}"; }
rcall=0
{
    echo "== conv on the GPU ($(date -u +%FT%TZ), $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/  gpu: /'
} | tee -a "$SUM"

# ---- 1. conformance ----
for f32 in 0 1; do
    TENSORD_GPU_CONV_F32=$f32 timeout "$(limit 12)" "$X/bin/conformance" --target local:cuda:0 \
        --reference local:cpu --filter conv --table >"$OUT/conv-conformance-f32-$f32.log" 2>&1
    rc=$?
    [ $rc -ne 0 ] && rcall=1
    {
        echo "-- conformance --filter conv, TENSORD_GPU_CONV_F32=$f32 (rc $rc): $(grep -m1 '^conformance ' "$OUT/conv-conformance-f32-$f32.log" || tail -1 "$OUT/conv-conformance-f32-$f32.log")"
        grep -E '^FAIL ' "$OUT/conv-conformance-f32-$f32.log" | head -8 | cut -c1-300 | sed 's/^/  /'
    } | tee -a "$SUM"
done

# ---- 2. benchmarks next to PyTorch (and the trace of variant 0) ----
T=$(mktemp -d)
py 12 bench/conv_torch.py 5 cuda bf16 >"$T/torch-bf16" 2>&1
VARS=${CONV_VARIANTS:-0 3 6 7 5}
# f32 (TF32 off on both sides): im2col + cuBLAS (0) and the FFMA kernel (1 traced, 2, 3)
py 12 bench/conv_torch.py 5 cuda f32 >"$T/torch-f32" 2>&1
F32MODES=${CONV_F32_MODES:-0 1}
for f32 in $F32MODES; do
    TENSORD_GPU_CONV_F32=$f32 TENSORD_GPU_CONV_TRACE=$([ $f32 = 1 ] && echo 1) \
        timeout "$(limit 8)" "$X/bin/conv-bench" local:cuda:0 5 f32 >"$T/conv-f32-$f32" 2>&1
done
for v in $VARS; do
    TENSORD_GPU_CONV_VARIANT=$v TENSORD_GPU_CONV_TRACE=$([ $v = 0 ] && echo 1) \
        timeout "$(limit 5)" "$X/bin/conv-bench" local:cuda:0 5 bf16 >"$T/conv-bf16-v$v" 2>&1
done
for f in "$T"/*; do echo "== $(basename "$f")"; cat "$f"; done >"$OUT/conv-bench.log"
# side by side: rows keyed by their first three words after "tensord"/"torch"; x/PT =
# PyTorch's time / tensord's (above 1: tensord faster)
pair() { # title ours theirs
    echo "-- $1"
    awk 'NR == FNR { if ($1 !~ /^#/) { sub(/^(tensord|torch) +/, ""); t[$1 " " $2 " " $3] = $0 } next }
         $1 !~ /^#/ { line = $0; sub(/^(tensord|torch) +/, "", line); split(line, f, / +/);
                      key = f[1] " " f[2] " " f[3]; if (!(key in t)) next
                      n = split(t[key], g, / +/); for (i = 1; i <= n; i++) if (g[i] == "ms") pm = g[i - 1]
                      m = split(line, h, / +/); for (i = 1; i <= m; i++) if (h[i] == "ms") om = h[i - 1]
                      printf "  %-36s tensord %10s ms   PyTorch %10s ms   x/PT %.2f\n", key, om, pm, pm / om }' \
        "$3" "$2"
}
{
    echo "-- TENSORD_GPU_CONV_TRACE=1 (variant 0): implicit-GEMM launches (none: it did not run):"
    grep -h 'conv: implicit gemm' "$T/conv-bf16-v0" "$T/conv-f32-1" 2>/dev/null | sort | uniq -c | head -14 | sed 's/^/  /'
    for f32 in $F32MODES; do
        pair "f32 (TF32 off), TENSORD_GPU_CONV_F32=$f32 (0 im2col + cuBLAS, 1 FFMA implicit GEMM, 2 BM 128, 3 BM 64)" \
            "$T/conv-f32-$f32" "$T/torch-f32"
    done
    for v in $VARS; do
        pair "bf16, TENSORD_GPU_CONV_VARIANT=$v (0 auto, 3 128x64, 6 channels-last off, 7 split-K off, 5 im2col)" \
            "$T/conv-bf16-v$v" "$T/torch-bf16"
    done
    grep -h -iE 'error|fail' "$T"/* | head -5 | sed 's/^/  ! /'
} | tee -a "$SUM"
rm -rf "$T"

# ---- 3. out-of-bounds accesses and races (compute-sanitizer, conformance's conv cases) ----
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$CS" ]; then
    for tool in memcheck racecheck; do
        TENSORD_GPU_CONV_F32=1 timeout "$(limit 12)" "$CS" --tool "$tool" --error-exitcode 9 "$X/bin/conformance" \
            --target local:cuda:0 --reference local:cpu --filter 'conv ' \
            >"$OUT/conv-sanitizer-$tool.log" 2>&1
        rc=$?
        [ $rc -ne 0 ] && rcall=1
        {
            echo "-- compute-sanitizer --tool $tool conformance --filter 'conv ' (rc $rc): $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/conv-sanitizer-$tool.log")"
            grep -m4 -E '^=+ +(Invalid|Error|Race|.*hazard)' "$OUT/conv-sanitizer-$tool.log" | sed 's/^/  /'
        } | tee -a "$SUM"
    done
else
    echo "-- compute-sanitizer: not found on this host" | tee -a "$SUM"
fi

echo "conv on the GPU done in $(($(date +%s) - start)) s (rc $rcall)" | tee -a "$SUM"
exit $rcall
