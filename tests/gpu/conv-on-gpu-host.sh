#!/usr/bin/env bash
# conv-on-gpu-host.sh — issue 13's conv target on the GPU host: the CUDA backend's f16/bf16
# implicit-GEMM convolution (backends/gpu/gpu_conv.cu) checked and timed in one device call
# of about 3 minutes, with carry/ from tests/gpu/prepare-carry.sh:
#   1. conformance --filter conv on local:cuda:0 against local:cpu (CONV in every float dtype:
#      f16/bf16 take the kernel; also CONV_TRANSPOSE and CONV_WEIGHT_GRAD), with the table;
#      once more with TENSORD_GPU_CONV_VARIANT=4 (64x64 tiles: more partial tiles);
#   2. that the kernel ran: TENSORD_GPU_CONV_TRACE=1 prints one line per launch (tile, M, N,
#      K), and TENSORD_GPU_PROFILE=1 the conv op's GPU time;
#   3. conv-bench (five ResNet-50 layers, batch 32) in f32 and bf16 next to bench/conv_torch.py,
#      bf16 for each TENSORD_GPU_CONV_VARIANT (0 auto, 1 128x128, 2 64x128, 3 128x64, 4
#      64x64, 5 the old im2col + cuBLAS path);
#   4. compute-sanitizer memcheck and racecheck over conformance's conv cases.
# Writes $OUT/summary.txt (appended) and raw logs $OUT/conv-*.log.
#     lead: carry ["carry"], command: bash tests/gpu/conv-on-gpu-host.sh
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tensord-gpu-out}
mkdir -p "$OUT"
SUM=$OUT/summary.txt
start=$(date +%s)
BUDGET=${BUDGET:-200}
HOST_LD=${LD_LIBRARY_PATH:-}
. tests/gpu/gpu-host-lib.sh
X=${TMPDIR:-/tmp}/tensord-gpu
[ -x "$X/bin/conv-bench" ] || unpack_carry "$X" || { echo "FAIL unpack carry" | tee -a "$SUM"; exit 1; }
use_carry "$X"
py() { timeout "$(limit "$1")" env PYTHONUNBUFFERED=1 LD_LIBRARY_PATH="$HOST_LD" python3 "${@:2}"; }
rcall=0
{
    echo "== conv on the GPU ($(date -u +%FT%TZ), $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/  gpu: /'
} | tee -a "$SUM"

# ---- 1. conformance ----
for v in 0 4; do
    TENSORD_GPU_CONV_VARIANT=$v timeout "$(limit 45)" "$X/bin/conformance" --target local:cuda:0 \
        --reference local:cpu --filter conv --table >"$OUT/conv-conformance-$v.log" 2>&1
    rc=$?
    [ $rc -ne 0 ] && rcall=1
    {
        echo "-- conformance --filter conv, TENSORD_GPU_CONV_VARIANT=$v (rc $rc): $(grep -m1 '^conformance ' "$OUT/conv-conformance-$v.log" || tail -1 "$OUT/conv-conformance-$v.log")"
        grep -E '^FAIL ' "$OUT/conv-conformance-$v.log" | head -12 | cut -c1-300 | sed 's/^/  /'
        [ $v = 0 ] && grep -E '^ *conv' "$OUT/conv-conformance-$v.log" | grep -vE '^(FAIL|ok) ' | head -4 | sed 's/^/  table: /'
    } | tee -a "$SUM"
done

# ---- 2. the kernel ran ----
TENSORD_GPU_CONV_TRACE=1 TENSORD_GPU_PROFILE=1 timeout "$(limit 30)" "$X/bin/conv-bench" \
    local:cuda:0 1 bf16 >"$OUT/conv-trace.log" 2>&1
{
    echo "-- TENSORD_GPU_CONV_TRACE=1 conv-bench bf16 (one line per implicit-GEMM launch; none: it did not run):"
    echo "  launches: $(grep -c 'conv: implicit gemm' "$OUT/conv-trace.log")"
    grep 'conv: implicit gemm' "$OUT/conv-trace.log" | sort | uniq -c | head -6 | sed 's/^/  /'
    grep -E '^ +(conv|op) ' "$OUT/conv-trace.log" | head -3 | sed 's/^/  profile: /'
} | tee -a "$SUM"

# ---- 3. benchmarks next to PyTorch ----
T=$(mktemp -d)
timeout "$(limit 40)" "$X/bin/conv-bench" local:cuda:0 5 f32 >"$T/conv-f32" 2>&1
py 40 bench/conv_torch.py 5 cuda f32 >"$T/torch-f32" 2>&1
py 40 bench/conv_torch.py 5 cuda bf16 >"$T/torch-bf16" 2>&1
for v in 0 1 2 3 4 5; do
    TENSORD_GPU_CONV_VARIANT=$v timeout "$(limit 25)" "$X/bin/conv-bench" local:cuda:0 5 bf16 \
        >"$T/conv-bf16-v$v" 2>&1
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
    pair "conv2d ResNet-50 shapes, batch 32, f32 (TF32 off; im2col + cuBLAS)" "$T/conv-f32" "$T/torch-f32"
    for v in 0 1 2 3 4 5; do
        pair "bf16, TENSORD_GPU_CONV_VARIANT=$v (0 auto, 1 128x128, 2 64x128, 3 128x64, 4 64x64, 5 im2col)" \
            "$T/conv-bf16-v$v" "$T/torch-bf16"
    done
    grep -h -iE 'error|fail' "$T"/* | head -5 | sed 's/^/  ! /'
} | tee -a "$SUM"
rm -rf "$T"

# ---- 4. out-of-bounds accesses and races (compute-sanitizer, conformance's conv cases) ----
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$CS" ]; then
    for tool in memcheck racecheck; do
        timeout "$(limit 40)" "$CS" --tool "$tool" --error-exitcode 9 "$X/bin/conformance" \
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
