#!/usr/bin/env bash
# attn-on-gpu-host.sh — issue 13's attention target on the GPU host: the CUDA backend's fused
# f16/bf16 attention kernel (backends/gpu/gpu_attention.cu) and its f32 kernel
# (backends/gpu/gpu_attention_f32.cu) checked and timed in one device call of about 5
# minutes, with carry/ from tests/gpu/prepare-carry.sh:
#   1. attn-check: per case max |err| against an f32 reference (f64 for f32), where, the
#      bound, the CPU's own error, NaNs, two runs bit-identical (tests/gpu/attn_check.c);
#   2. conformance --filter attention on local:cuda:0 against local:cpu (native cases, and
#      the masked / other-head-dim cases the lowering takes), with the per-op table;
#   3. that the native kernels ran (TENSORD_GPU_PROFILE=1 lists the op by name; the lowering
#      would list matmul and softmax's steps instead), bf16 and f32;
#   4. attn-bench next to bench/attn_torch.py ([8, 16, 2048, 64], causal and not): tensord
#      bf16, f16 and f32 (fused), f32 through the lowering (TENSORD_GPU_ATTN_F32=0) and the
#      f32 kernel's other tile configurations (TENSORD_GPU_ATTN_F32=2..4); PyTorch f32 and
#      bf16; plus head dim 128 ([8, 8, 2048, 128]) in bf16 and f32;
#   5. compute-sanitizer memcheck and racecheck over attn-check's small cases.
#   6. (bits) the timing variants that claim the default's bits (TENSORD_GPU_ATTN_VARIANT 1 2
#      3 6 7-13) against the default, case by case (attn-check --bits-only), and 14's count
#      of differing cases.
# ATTN_SECTIONS picks sections (default: all): check conformance profile bench bits sanitizer;
# ATTN_SECTIONS="bits bench" times and compares the variants alone (about 2 minutes);
# ATTN_VARIANTS, ATTN_BITS_VARIANTS and ATTN_F32_CFGS narrow the lists that are timed or
# compared (a short device call).
# Writes $OUT/summary.txt (appended) and raw logs $OUT/attn-*.log.
#     lead: carry ["carry"], command: bash tests/gpu/attn-on-gpu-host.sh
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tensord-gpu-out}
mkdir -p "$OUT"
SUM=$OUT/summary.txt
start=$(date +%s)
BUDGET=${BUDGET:-300}
HOST_LD=${LD_LIBRARY_PATH:-}
. tests/gpu/gpu-host-lib.sh
X=${TMPDIR:-/tmp}/tensord-gpu
unpack_carry "$X" || { echo "FAIL unpack carry" | tee -a "$SUM"; exit 1; }
use_carry "$X"
SECTIONS=" ${ATTN_SECTIONS:-check conformance profile bench bits sanitizer} "
has() { [[ $SECTIONS == *" $1 "* ]]; }
py() { timeout "$(limit "$1")" env PYTHONUNBUFFERED=1 LD_LIBRARY_PATH="$HOST_LD" python3 "${@:2}"; }
rcall=0
{
    echo "== attention on the GPU ($(date -u +%FT%TZ), $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/  gpu: /'
} | tee -a "$SUM"

# ---- 1. attn-check ----
if has check; then
timeout "$(limit 110)" "$X/bin/attn-check" --device local:cuda:0 --reference local:cpu \
    >"$OUT/attn-check.log" 2>&1
rc=$?
[ $rc -ne 0 ] && rcall=1
{
    echo "-- attn-check (rc $rc): $(grep -m1 '^attn-check:' "$OUT/attn-check.log" || echo 'no summary line')"
    grep -E '^(FAIL|ok  ) ' "$OUT/attn-check.log" | awk '{ $1 = $1; print }' |
        sed -E 's/; bad .*//' | cut -c1-230 | sed 's/^/  /'
    grep -E '^     first mismatch' "$OUT/attn-check.log" | head -8 | sed 's/^/  /'
    grep -vE '^(FAIL|ok  |attn-check:|     first)' "$OUT/attn-check.log" | head -8 | sed 's/^/  ! /'
} | tee -a "$SUM"
fi

# ---- 2. conformance ----
if has conformance; then
timeout "$(limit 90)" "$X/bin/conformance" --target local:cuda:0 --reference local:cpu \
    --filter attention --table >"$OUT/attn-conformance.log" 2>&1
rc=$?
[ $rc -ne 0 ] && rcall=1
{
    echo "-- conformance --filter attention (rc $rc): $(grep -m1 '^conformance ' "$OUT/attn-conformance.log" || tail -1 "$OUT/attn-conformance.log")"
    grep -E '^FAIL ' "$OUT/attn-conformance.log" | head -12 | cut -c1-300 | sed 's/^/  /'
    grep -iE 'scaled_dot_product_attention' "$OUT/attn-conformance.log" | grep -vE '^(FAIL|ok) ' | head -4 | sed 's/^/  table: /'
} | tee -a "$SUM"
fi

# ---- 3. the native kernel ran ----
if has profile; then
TENSORD_GPU_PROFILE=1 timeout "$(limit 20)" "$X/bin/attn-bench" --device local:cuda:0 \
    --dtype bf16 --reps 5 --rounds 1 >"$OUT/attn-profile.log" 2>&1
TENSORD_GPU_PROFILE=1 timeout "$(limit 20)" "$X/bin/attn-bench" --device local:cuda:0 \
    --dtype f32 --reps 5 --rounds 1 >"$OUT/attn-profile-f32.log" 2>&1
{
    echo "-- TENSORD_GPU_PROFILE=1 attn-bench bf16 (ops the GPU ran; the fused kernel is one 'scaled_dot_product_attention' row):"
    grep -E 'scaled_dot_product_attention|matmul|softmax|^ *op|exp ' "$OUT/attn-profile.log" | head -8 | sed 's/^/  /'
    echo "-- TENSORD_GPU_PROFILE=1 attn-bench f32 (the f32 kernel: one 'scaled_dot_product_attention' row, no matmul/softmax rows):"
    grep -E 'scaled_dot_product_attention|matmul|softmax|^ *op|exp ' "$OUT/attn-profile-f32.log" | head -8 | sed 's/^/  /'
} | tee -a "$SUM"
fi

# ---- 6. the variants' bits against the default's (before the benchmarks: a variant that
# fails here has a wrong time too) ----
if has bits; then
TENSORD_GPU_ATTN_VARIANT=0 timeout "$(limit 30)" "$X/bin/attn-check" --bits-only \
    >"$OUT/attn-bits-0.log" 2>&1
nb0=$(grep -c '^bits ' "$OUT/attn-bits-0.log")
{
    echo "-- TENSORD_GPU_ATTN_VARIANT bits against the default's (attn-check --bits-only, $nb0 cases)"
    [ "$nb0" -gt 0 ] || { echo "  ! default: no cases"; tail -3 "$OUT/attn-bits-0.log" | sed 's/^/  ! /'; }
} | tee -a "$SUM"
for v in ${ATTN_BITS_VARIANTS:-1 2 3 6 7 8 9 10 11 12 13 14}; do
    TENSORD_GPU_ATTN_VARIANT=$v timeout "$(limit 30)" "$X/bin/attn-check" --bits-only \
        >"$OUT/attn-bits-$v.log" 2>&1
    nb=$(grep -c '^bits ' "$OUT/attn-bits-$v.log")
    ndiff=$(diff <(grep '^bits ' "$OUT/attn-bits-0.log") <(grep '^bits ' "$OUT/attn-bits-$v.log") | grep -c '^>')
    if [ "$v" = 14 ]; then
        verdict="$ndiff of $nb cases differ (expected: 128-key tiles)"
    elif [ "$nb" -eq "$nb0" ] && [ "$nb0" -gt 0 ] && [ "$ndiff" -eq 0 ]; then
        verdict="same bits, $nb cases"
    else
        verdict="DIFFER: $ndiff of $nb cases (default $nb0)"
        rcall=1
    fi
    {
        echo "  variant $v: $verdict"
        [ "$v" != 14 ] && diff <(grep '^bits ' "$OUT/attn-bits-0.log") <(grep '^bits ' "$OUT/attn-bits-$v.log") | grep '^>' | head -3 | sed 's/^/    /'
        grep -vE '^(bits |attn-check:)' "$OUT/attn-bits-$v.log" | head -2 | sed 's/^/    ! /'
    } | tee -a "$SUM"
done
fi

# ---- 4. benchmarks next to PyTorch ----
if has bench; then
T=$(mktemp -d)
for dt in bf16 f16 f32; do
    timeout "$(limit 45)" "$X/bin/attn-bench" --device local:cuda:0 --dtype "$dt" >"$T/attn-$dt" 2>&1
done
timeout "$(limit 30)" "$X/bin/attn-bench" --device local:cuda:0 --dtype bf16 --dim 128 --heads 8 \
    >"$T/attn-bf16-d128" 2>&1
timeout "$(limit 30)" "$X/bin/attn-bench" --device local:cuda:0 --dtype f32 --dim 128 --heads 8 \
    >"$T/attn-f32-d128" 2>&1
# TENSORD_GPU_ATTN_F32 (gpu_attention_f32.cu): 0 = the lowering, 2..4 = other tiles
TENSORD_GPU_ATTN_F32=0 timeout "$(limit 30)" "$X/bin/attn-bench" --device local:cuda:0 \
    --dtype f32 >"$T/f32cfg-0" 2>&1
for v in ${ATTN_F32_CFGS:-2 3 4}; do
    TENSORD_GPU_ATTN_F32=$v timeout "$(limit 20)" "$X/bin/attn-bench" --device local:cuda:0 \
        --dtype f32 >"$T/f32cfg-$v" 2>&1
    TENSORD_GPU_ATTN_F32=$v timeout "$(limit 20)" "$X/bin/attn-bench" --device local:cuda:0 \
        --dtype f32 --dim 128 --heads 8 >"$T/f32cfg-$v-d128" 2>&1
done
# TENSORD_GPU_ATTN_VARIANT (gpu_attention.cu): other block cuts and pipelines; the default
# (0) timed first and last (var-00, var-99) for the drift between runs
for v in ${ATTN_VARIANTS:-0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 0}; do
    n=$(printf '%02d' "$v")
    [ -e "$T/var-$n" ] && n=99
    TENSORD_GPU_ATTN_VARIANT=$v timeout "$(limit 20)" "$X/bin/attn-bench" --device local:cuda:0 \
        --dtype bf16 --reps 10 --rounds 5 >"$T/var-$n" 2>&1
    { [ "$v" -le 4 ] || [ "$v" -ge 7 ]; } && [ "$n" != 99 ] &&
        TENSORD_GPU_ATTN_VARIANT=$v timeout "$(limit 20)" "$X/bin/attn-bench" \
            --device local:cuda:0 --dtype bf16 --dim 128 --heads 8 >"$T/var-$n-d128" 2>&1
done
py 60 bench/attn_torch.py --device cuda >"$T/torch" 2>&1
py 40 bench/attn_torch.py --device cuda --dim 128 --heads 8 >"$T/torch-d128" 2>&1
for f in "$T"/*; do echo "== $(basename "$f")"; cat "$f"; done >"$OUT/attn-bench.log"
{
    echo "-- attention [8, 16, 2048, 64] on cuda:0 (ms; x/PT = PyTorch's time / tensord's, bf16 for f16)"
    awk '$1 ~ /^attention_/ { if (FILENAME ~ /torch/) pt[$1] = $2; else me[$1] = $2 }
         END { for (r in me) { p = r; sub(/^attention_f16/, "attention_bf16", p)
                 printf "  tensord %-24s %9s ms   PyTorch %-24s %9s ms   x/PT %.2f\n", r, me[r], p, pt[p], (me[r] > 0 && pt[p] > 0) ? pt[p] / me[r] : 0 } }' \
        "$T/attn-bf16" "$T/attn-f16" "$T/attn-f32" "$T/torch" | sort
    echo "-- head dim 128 ([8, 8, 2048, 128])"
    grep -h '^attention_bf16' "$T/attn-bf16-d128" | sed 's/^/  tensord /'
    grep -h '^attention_bf16' "$T/torch-d128" | sed 's/^/  PyTorch /'
    grep -h '^attention_f32' "$T/attn-f32-d128" | sed 's/^/  tensord /'
    grep -h '^attention_f32' "$T/torch-d128" | sed 's/^/  PyTorch /'
    echo "-- TENSORD_GPU_ATTN_F32 (f32; 0 = the lowering; default 1: d64 128 queries x 64 keys, d128 128 x 32; 2 = 64 x 64, 3 = 128 x 32, 4 = 64 x 32)"
    for f in "$T"/f32cfg-*; do grep -h '^attention_f32' "$f" | sed "s|^|  $(basename "$f") |"; done
    echo "-- TENSORD_GPU_ATTN_VARIANT (bf16, --reps 10 --rounds 5; var-00 and var-99: the default, first and last; d64: 1 = 64-query blocks, 2 = Q from shared memory, 3 = both, 4 = 64-query blocks and 128-key tiles, 5 = 32-key tiles, 6 = the first measured version (branches in the tile); d128: 2 = 128-query blocks with Q from shared memory, 3 = Q from shared memory, 4 = as 2 with 32-key tiles; k_attention2, d64 (d128 as 1 m16 tile a warp): 7 = the default's cut, 1 barrier a tile, base + immediate addresses, 8 = 7 with 3 K/V buffers, 9 = 8 warps (256 queries; d128 128), 10 = 9 with 3 buffers, 11 = 8 warps of 1 m16 tile (128 queries, 2 blocks an SM), 12 = 7 with 128-key copies computed as two 64-key tiles, 13 = 12 with 3 buffers, 14 = 128-key tiles, Q from shared memory (other bits))"
    for f in "$T"/var-*; do grep -h '^attention_bf16' "$f" | sed "s|^|  $(basename "$f") |"; done
    grep -h -iE 'error|fail' "$T"/* | head -5 | sed 's/^/  ! /'
} | tee -a "$SUM"
rm -rf "$T"
fi
# ---- 5. out-of-bounds accesses and races (compute-sanitizer, small cases) ----
if has sanitizer; then
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$CS" ]; then
    # ATTN_SAN_VARIANTS: TENSORD_GPU_ATTN_VARIANT values to check (default: the default, 0)
    for sv in ${ATTN_SAN_VARIANTS:-0}; do
    for tool in memcheck racecheck; do
        lg=$OUT/attn-sanitizer-$tool.log
        [ "$sv" != 0 ] && lg=$OUT/attn-sanitizer-$tool-var$sv.log
        TENSORD_GPU_ATTN_VARIANT=$sv timeout "$(limit 40)" "$CS" --tool "$tool" --error-exitcode 9 \
            "$X/bin/attn-check" --max-ls 20000 >"$lg" 2>&1
        rc=$?
        [ $rc -ne 0 ] && rcall=1
        {
            echo "-- compute-sanitizer --tool $tool attn-check --max-ls 20000, variant $sv (rc $rc): $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$lg")"
            grep -m4 -E '^=+ +(Invalid|Error|Race|.*hazard)' "$lg" | sed 's/^/  /'
        } | tee -a "$SUM"
    done
    done
else
    echo "-- compute-sanitizer: not found on this host" | tee -a "$SUM"
fi
fi

echo "attention on the GPU done in $(($(date +%s) - start)) s (rc $rcall)" | tee -a "$SUM"
exit $rcall
