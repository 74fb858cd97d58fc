#!/usr/bin/env bash
# conv-on-gpu-host.sh — issue 13's conv target on the GPU host: the CUDA backend's f16/bf16
# and f32 implicit-GEMM convolution (backends/gpu/gpu_conv.cu) checked and timed in one short
# device call (BUDGET 150 s wall), with carry/ from tests/gpu/prepare-carry.sh:
#   1. conformance --filter conv on local:cuda:0 against local:cpu (CONV in every float dtype:
#      f16/bf16 take the kernel; also CONV_TRANSPOSE and CONV_WEIGHT_GRAD), once for each
#      TENSORD_GPU_CONV_F32 in CONV_CONF_F32_MODES (default "0 1 4 5": im2col + cuBLAS, the
#      FFMA kernel's auto tile, its 128x64 tiles of 128 and 256 threads), then once for each
#      TENSORD_GPU_CONV_SPLIT in CONV_CONF_SPLITS (default none; e.g. "2 3 4 6": the splits
#      over K forced, so every cluster size of the split sum is checked);
#   2. conv-bench (five ResNet-50 layers, batch 32) next to bench/conv_torch.py, CONV_REPS
#      (default 11) timed runs a median: f32 (TF32 off) for each TENSORD_GPU_CONV_F32 in
#      CONV_F32_MODES (default "0 1 4 5"; 2, 3: 128x128, 64x128), in CONV_ROUNDS (default 2)
#      rounds, each with its own PyTorch run first (PyTorch's times move between runs: compare
#      within a round); the FFMA modes traced (TENSORD_GPU_CONV_TRACE=1: tile, threads, split,
#      M, N, K per launch, a check of what ran); then bf16 for each TENSORD_GPU_CONV_VARIANT
#      in CONV_VARIANTS (default "0", traced; "0 3 6 7 5" for the whole bf16 study: 3 128x64,
#      6 channels-last off, 7 split-K off, 5 the old im2col + cuBLAS path; "3s2": variant 3
#      with TENSORD_GPU_CONV_SPLIT=2, the split over K forced);
#   2b. bits: conv-bench bf16 with CONV_BENCH_BITS=1 (each layer's output hashed) for each
#      entry of CONV_BITS (default "0 8 0s2 8s2 0s6 8s6": V or VsS as in CONV_VARIANTS; 8 sums
#      a split from f32 partials in a second kernel, 0 inside a thread-block cluster), each
#      pair of entries compared: "same bits" or FAIL;
#   3. compute-sanitizer memcheck and racecheck over conformance's conv cases for each
#      TENSORD_GPU_CONV_F32 in CONV_SAN_F32_MODES (default "4 5 1": the new tiles first),
#      while at least 15 s of the budget are left.
# Writes $OUT/summary.txt (appended) and raw logs $OUT/conv-*.log.
#     lead: carry ["carry"], command: bash tests/gpu/conv-on-gpu-host.sh
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/tensord-gpu-out}
mkdir -p "$OUT"
SUM=$OUT/summary.txt
start=$(date +%s)
BUDGET=${BUDGET:-150}
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
conf() { # NAME=VALUE FILTER LOG: conformance on cuda:0 under that variable, a summary line
    env "$1" timeout "$(limit 12)" "$X/bin/conformance" --target local:cuda:0 \
        --reference local:cpu --filter "$2" --table >"$3" 2>&1
    local rc=$?
    [ $rc -ne 0 ] && rcall=1
    {
        echo "-- conformance --filter '$2', $1 (rc $rc): $(grep -m1 '^conformance ' "$3" || tail -1 "$3")"
        grep -E '^FAIL ' "$3" | head -8 | cut -c1-300 | sed 's/^/  /'
    } | tee -a "$SUM"
}
for f32 in ${CONV_CONF_F32_MODES:-0 1 4 5}; do
    conf "TENSORD_GPU_CONV_F32=$f32" conv "$OUT/conv-conformance-f32-$f32.log"
done
for sp in ${CONV_CONF_SPLITS:-}; do
    conf "TENSORD_GPU_CONV_SPLIT=$sp" 'conv ' "$OUT/conv-conformance-split-$sp.log"
done

# ---- 2. benchmarks next to PyTorch (and the traces) ----
T=$(mktemp -d)
REPS=${CONV_REPS:-11}
F32MODES=${CONV_F32_MODES:-0 1 4 5}
ROUNDS=${CONV_ROUNDS:-2}
VARS=${CONV_VARIANTS:-0}
# f32 (TF32 off on both sides), PyTorch first in each round
for r in $(seq 1 "$ROUNDS"); do
    py 12 bench/conv_torch.py "$REPS" cuda f32 >"$T/torch-f32-r$r" 2>&1
    for f32 in $F32MODES; do
        TENSORD_GPU_CONV_F32=$f32 TENSORD_GPU_CONV_TRACE=$([ "$f32" != 0 ] && echo 1) \
            timeout "$(limit 8)" "$X/bin/conv-bench" local:cuda:0 "$REPS" f32 \
            >"$T/conv-f32-$f32-r$r" 2>&1
    done
done
py 12 bench/conv_torch.py 5 cuda bf16 >"$T/torch-bf16" 2>&1
entry() { # V or VsS: variant V (into v), with TENSORD_GPU_CONV_SPLIT=S (into sp; else empty)
    v=${1%%s*} sp=""
    [ "$1" != "$v" ] && sp=${1#*s}
}
for e in $VARS; do
    entry "$e"
    TENSORD_GPU_CONV_VARIANT=$v TENSORD_GPU_CONV_SPLIT=$sp TENSORD_GPU_CONV_TRACE=$([ $v = 0 ] && echo 1) \
        timeout "$(limit 5)" "$X/bin/conv-bench" local:cuda:0 5 bf16 >"$T/conv-bf16-v$e" 2>&1
done
# 2b. the same bits from two ways of summing a split (pairs of CONV_BITS entries)
set -- ${CONV_BITS-0 8 0s2 8s2 0s6 8s6}
while [ $# -ge 2 ]; do
    for e in "$1" "$2"; do
        entry "$e"
        CONV_BENCH_BITS=1 TENSORD_GPU_CONV_VARIANT=$v TENSORD_GPU_CONV_SPLIT=$sp \
            TENSORD_GPU_CONV_TRACE=1 timeout "$(limit 5)" "$X/bin/conv-bench" local:cuda:0 1 bf16 \
            >"$T/bits-$e" 2>&1
    done
    a=$(grep '^bits ' "$T/bits-$1") b=$(grep '^bits ' "$T/bits-$2")
    if [ -n "$a" ] && [ "$a" = "$b" ]; then
        echo "-- bits, bf16 variants $1 and $2: same bits in $(wc -l <<<"$a") layers ($(grep -c 'cluster' "$T/bits-$1") cluster launches in $1, $(grep -c 'cluster' "$T/bits-$2") in $2)" | tee -a "$SUM"
    else
        rcall=1
        { echo "FAIL bits, bf16 variants $1 and $2 differ:"; diff <(echo "$a") <(echo "$b") | head -8 | sed 's/^/  /'; } | tee -a "$SUM"
    fi
    shift 2
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
    echo "-- TENSORD_GPU_CONV_TRACE=1: implicit-GEMM launches per mode (none: it did not run):"
    for f32 in $F32MODES; do
        [ "$f32" = 0 ] && continue
        grep -h 'conv: implicit gemm' "$T/conv-f32-$f32-r1" 2>/dev/null | sort | uniq -c | head -6 |
            sed "s/^/  f32 mode $f32: /"
    done
    grep -h 'conv: implicit gemm' "$T/conv-bf16-v0" 2>/dev/null | sort | uniq -c | head -8 | sed 's/^/  bf16 variant 0: /'
    echo "-- f32 (TF32 off), TENSORD_GPU_CONV_F32: 0 im2col + cuBLAS, 1 FFMA auto tile, 2 128x128,"
    echo "   3 64x128, 4 128x64 of 128 threads, 5 128x64 of 256 threads (compare within a round)"
    for r in $(seq 1 "$ROUNDS"); do
        for f32 in $F32MODES; do
            pair "f32 round $r, TENSORD_GPU_CONV_F32=$f32" "$T/conv-f32-$f32-r$r" "$T/torch-f32-r$r"
        done
    done
    for e in $VARS; do
        pair "bf16, TENSORD_GPU_CONV_VARIANT=$e (0 auto, 3 128x64, 6 channels-last off, 7 split-K off, 5 im2col; sS: split S)" \
            "$T/conv-bf16-v$e" "$T/torch-bf16"
    done
    grep -h -iE 'error|fail' "$T"/* | head -5 | sed 's/^/  ! /'
} | tee -a "$SUM"
rm -rf "$T"

# ---- 3. out-of-bounds accesses and races (compute-sanitizer, conformance's conv cases) ----
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$CS" ]; then
    for f32 in ${CONV_SAN_F32_MODES:-4 5 1}; do
        for tool in memcheck racecheck; do
            if [ $((BUDGET - ($(date +%s) - start))) -lt 15 ]; then
                echo "-- compute-sanitizer --tool $tool, TENSORD_GPU_CONV_F32=$f32: skipped (budget)" | tee -a "$SUM"
                continue
            fi
            log=$OUT/conv-sanitizer-$tool-f32-$f32.log
            TENSORD_GPU_CONV_F32=$f32 timeout "$(limit 12)" "$CS" --tool "$tool" --error-exitcode 9 \
                "$X/bin/conformance" --target local:cuda:0 --reference local:cpu --filter 'conv ' \
                >"$log" 2>&1
            rc=$?
            [ $rc -ne 0 ] && rcall=1
            {
                echo "-- compute-sanitizer --tool $tool conformance --filter 'conv ', TENSORD_GPU_CONV_F32=$f32 (rc $rc): $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log")"
                grep -m4 -E '^=+ +(Invalid|Error|Race|.*hazard)' "$log" | sed 's/^/  /'
            } | tee -a "$SUM"
        done
    done
else
    echo "-- compute-sanitizer: not found on this host" | tee -a "$SUM"
fi

echo "conv on the GPU done in $(($(date +%s) - start)) s (rc $rcall)" | tee -a "$SUM"
exit $rcall
