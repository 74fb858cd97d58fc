#!/usr/bin/env bash
# --save / --load through the trainer: a saved model evaluates to the same accuracy with
# --eval-only, and broken or mismatched files are rejected with a message naming the file
# and the problem (exit 1).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SMALL=(--data "$DATA" --limit-train 1000 --limit-test 1000 --hidden 32 --seed 3)
"$TRAINER" "${SMALL[@]}" --epochs 1 --save "$TMP/m.safetensors" >"$TMP/train.out" ||
    fail "training failed: $(cat "$TMP/train.out")"
"$TRAINER" "${SMALL[@]}" --load "$TMP/m.safetensors" --eval-only >"$TMP/eval.out" ||
    fail "--eval-only failed: $(cat "$TMP/eval.out")"
trained=$(tail -n 1 "$TMP/train.out")
evaluated=$(tail -n 1 "$TMP/eval.out")
[[ ${trained%%  seconds:*} == "${evaluated%%  seconds:*}" ]] ||
    fail "eval-only summary '$evaluated' differs from training summary '$trained'"
echo "ok: save + --eval-only reproduce '${trained%%  seconds:*}'"

# The file layout: 8-byte little-endian header length, padded to 8, tensors w1 b1 w2 b2.
size=$(stat -c %s "$TMP/m.safetensors")
hlen=$(od -An -t u8 -N 8 "$TMP/m.safetensors" | tr -d ' ')
(( hlen % 8 == 0 )) || fail "header length $hlen is not a multiple of 8"
(( size == 8 + hlen + 4 * (784 * 32 + 32 + 32 * 10 + 10) )) || fail "file size $size is wrong"
header=$(head -c $((8 + hlen)) "$TMP/m.safetensors" | tail -c "$hlen")
for t in w1 b1 w2 b2; do
    grep -qF "\"$t\":{\"dtype\":\"F32\"" <<<"$header" || fail "header lacks $t: $header"
done

EVAL=("$TRAINER" --data "$DATA" --limit-test 100 --eval-only)

# Model shape differs from the file's.
expect_error 1 "$TMP/m.safetensors: w1: shape [784, 32] in file, model needs [784, 256]" -- \
    "${EVAL[@]}" --load "$TMP/m.safetensors"

# Truncated below the 8-byte length field.
head -c 5 "$TMP/m.safetensors" >"$TMP/short.safetensors"
expect_error 1 "$TMP/short.safetensors" "shorter than the 8-byte header length" -- \
    "${EVAL[@]}" --hidden 32 --load "$TMP/short.safetensors"

# Header length claims more bytes than the file has.
head -c 40 "$TMP/m.safetensors" >"$TMP/cut.safetensors"
expect_error 1 "$TMP/cut.safetensors" "header length $hlen exceeds the file (32 bytes" -- \
    "${EVAL[@]}" --hidden 32 --load "$TMP/cut.safetensors"

# Data cut short: the offsets no longer fit.
head -c $((size - 4)) "$TMP/m.safetensors" >"$TMP/data.safetensors"
expect_error 1 "$TMP/data.safetensors" "out of range" -- \
    "${EVAL[@]}" --hidden 32 --load "$TMP/data.safetensors"

# le64 N: N as 8 little-endian bytes.
le64() {
    local i
    for ((i = 0; i < 8; i++)); do
        printf "\\x$(printf %02x $((($1 >> (8 * i)) & 255)))"
    done
}
# make_file PATH JSON DATA_BYTES: a safetensors file with that header and zero data.
make_file() {
    { le64 ${#2}; printf '%s' "$2"; head -c "$3" /dev/zero; } >"$1"
}

# dtype differs from the model's.
make_file "$TMP/f64.safetensors" \
    '{"w1":{"dtype":"F64","shape":[784,32],"data_offsets":[0,200704]}}' 200704
expect_error 1 "$TMP/f64.safetensors: w1: dtype F64 in file, model needs F32" -- \
    "${EVAL[@]}" --hidden 32 --load "$TMP/f64.safetensors"

# A tensor the model needs is missing.
make_file "$TMP/nob2.safetensors" \
    '{"w1":{"dtype":"F32","shape":[784,32],"data_offsets":[0,100352]},"b1":{"dtype":"F32","shape":[32],"data_offsets":[100352,100480]},"w2":{"dtype":"F32","shape":[32,10],"data_offsets":[100480,101760]}}' \
    101760
expect_error 1 "$TMP/nob2.safetensors: b2: missing" -- \
    "${EVAL[@]}" --hidden 32 --load "$TMP/nob2.safetensors"

# Not JSON, unknown dtype, size that does not match dtype * shape.
make_file "$TMP/json.safetensors" '{"w1":{"dtype":"F32",' 0
expect_error 1 "$TMP/json.safetensors: header is not valid JSON" -- \
    "${EVAL[@]}" --hidden 32 --load "$TMP/json.safetensors"
make_file "$TMP/dt.safetensors" '{"w1":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}}' 4
expect_error 1 "$TMP/dt.safetensors" 'unknown dtype "F33"' -- \
    "${EVAL[@]}" --hidden 32 --load "$TMP/dt.safetensors"
make_file "$TMP/sz.safetensors" '{"w1":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}' 8
expect_error 1 "$TMP/sz.safetensors" "hold 8 bytes, but dtype F32 and its shape need 12" -- \
    "${EVAL[@]}" --hidden 32 --load "$TMP/sz.safetensors"
# Weights holding NaN or inf load (exit 0), with a warning per tensor naming the file, the
# tensor and the count; a clean file gives none.
"${EVAL[@]}" --hidden 32 --load "$TMP/m.safetensors" >/dev/null 2>"$TMP/clean.err" ||
    fail "--eval-only of the saved model failed: $(cat "$TMP/clean.err")"
! grep -q warning "$TMP/clean.err" || fail "a clean file warns: $(cat "$TMP/clean.err")"
grep -qF '"w1":{"dtype":"F32","shape":[784,32],"data_offsets":[0,100352]}' <<<"$header" ||
    fail "w1 is not the first tensor: $header"
grep -qF '"b2":{"dtype":"F32","shape":[10],"data_offsets":[101760,101800]}' <<<"$header" ||
    fail "b2 is not the last tensor: $header"
cp "$TMP/m.safetensors" "$TMP/nan.safetensors"
printf '\x00\x00\xc0\x7f' | dd of="$TMP/nan.safetensors" bs=1 seek=$((8 + hlen)) conv=notrunc status=none
printf '\x00\x00\x80\x7f' | dd of="$TMP/nan.safetensors" bs=1 seek=$((size - 4)) conv=notrunc status=none
expect_error 0 "warning: $TMP/nan.safetensors: w1 holds 1 NaN or infinite value of 25088" \
    "warning: $TMP/nan.safetensors: b2 holds 1 NaN or infinite value of 10" -- \
    "${EVAL[@]}" --hidden 32 --load "$TMP/nan.safetensors"
! grep -qE ': (b1|w2) holds' "$TMP/err" || fail "a finite tensor was warned about: $(cat "$TMP/err")"

echo "ok: all save/load cases"
