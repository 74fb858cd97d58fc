#!/usr/bin/env bash
# Bad input gets a clear error: missing data (names the file and the Debian package),
# truncated or mismatched IDX files (name the file and the problem), bad flags (usage,
# exit 2), a malformed device URI (the library's message, exit 1).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Missing data directory.
expect_error 1 "$TMP/nowhere/train-images-idx3-ubyte.gz" \
    "install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist)" \
    "--data DIR" -- "$TRAINER" --data "$TMP/nowhere"

# A data directory with copies of the real files, then broken one at a time.
fresh_dir() {
    rm -rf "$TMP/d"
    mkdir "$TMP/d"
    local f
    for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz \
        t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
        ln -s "$DATA/$f" "$TMP/d/$f"
    done
}
RUN=("$TRAINER" --data "$TMP/d" --epochs 1 --limit-train 100 --limit-test 100)
# gunzip_head FILE N: the first N decompressed bytes of FILE (head closes the pipe early).
gunzip_head() {
    { gzip -dc "$1" 2>/dev/null || true; } | head -c "$2"
}

# The gzip stream cut short.
fresh_dir
rm "$TMP/d/t10k-images-idx3-ubyte.gz"
head -c 100000 "$DATA/t10k-images-idx3-ubyte.gz" >"$TMP/d/t10k-images-idx3-ubyte.gz"
expect_error 1 "$TMP/d/t10k-images-idx3-ubyte.gz" "truncated" -- "${RUN[@]}"

# A valid gzip stream whose IDX payload is cut short.
fresh_dir
rm "$TMP/d/t10k-images-idx3-ubyte.gz"
gunzip_head "$DATA/t10k-images-idx3-ubyte.gz" 1000000 | gzip -1 >"$TMP/d/t10k-images-idx3-ubyte.gz"
expect_error 1 "$TMP/d/t10k-images-idx3-ubyte.gz" "too short" "7840016 bytes expected" -- \
    "${RUN[@]}"

# An uncompressed, truncated labels file is found without ".gz" and rejected too.
fresh_dir
rm "$TMP/d/t10k-labels-idx1-ubyte.gz"
gunzip_head "$DATA/t10k-labels-idx1-ubyte.gz" 5000 >"$TMP/d/t10k-labels-idx1-ubyte"
expect_error 1 "$TMP/d/t10k-labels-idx1-ubyte" "too short" -- "${RUN[@]}"

# Trailing bytes after the payload.
fresh_dir
rm "$TMP/d/t10k-labels-idx1-ubyte.gz"
{ gzip -dc "$DATA/t10k-labels-idx1-ubyte.gz"; printf 'x'; } | gzip -1 \
    >"$TMP/d/t10k-labels-idx1-ubyte.gz"
expect_error 1 "$TMP/d/t10k-labels-idx1-ubyte.gz" "longer than its header says" -- "${RUN[@]}"

# Labels where images belong: wrong magic number.
fresh_dir
ln -sf "$DATA/t10k-labels-idx1-ubyte.gz" "$TMP/d/t10k-images-idx3-ubyte.gz"
expect_error 1 "$TMP/d/t10k-images-idx3-ubyte.gz" "bad magic number 0x00000801" \
    "expected 0x00000803" -- "${RUN[@]}"

# Image and label counts that disagree.
fresh_dir
ln -sf "$DATA/train-labels-idx1-ubyte.gz" "$TMP/d/t10k-labels-idx1-ubyte.gz"
expect_error 1 "60000 labels" "10000 images" -- "${RUN[@]}"

# A label out of range (byte 8 is the first label).
fresh_dir
rm "$TMP/d/t10k-labels-idx1-ubyte.gz"
gzip -dc "$DATA/t10k-labels-idx1-ubyte.gz" >"$TMP/lab"
printf '\x0c' | dd of="$TMP/lab" bs=1 seek=8 conv=notrunc status=none
gzip -1 <"$TMP/lab" >"$TMP/d/t10k-labels-idx1-ubyte.gz"
expect_error 1 "$TMP/d/t10k-labels-idx1-ubyte.gz" "label 12 at index 0" -- "${RUN[@]}"

# Usage errors exit 2 and print the usage.
expect_error 2 "unknown option '--bogus'" "usage:" -- "$TRAINER" --bogus
expect_error 2 "option --graph takes no value" "usage:" -- "$TRAINER" --graph=1
expect_error 2 "option --upload-f32 takes no value" "usage:" -- "$TRAINER" --upload-f32=yes
expect_error 2 "unknown option '--bogus=1'" "usage:" -- "$TRAINER" --bogus=1
expect_error 2 "option --graph takes no value" "usage:" -- "$TRAINER" --gra=1
expect_error 2 "unknown option '-x'" "usage:" -- "$TRAINER" -x=1
expect_error 2 "unknown option '-x'" "usage:" -- "$TRAINER" --graph -x
expect_error 2 "--epochs needs an integer" -- "$TRAINER" --epochs two
expect_error 2 "--lr needs a positive number" -- "$TRAINER" --lr -1
expect_error 2 "--eval-only needs --load FILE" -- "$TRAINER" --eval-only
expect_error 2 "option --data needs a value" -- "$TRAINER" --data
expect_error 2 "--reports needs a positive integer, not '0'" "usage:" -- "$TRAINER" --reports 0
expect_error 2 "--reports needs a positive integer, not 'abc'" -- "$TRAINER" --reports abc
expect_error 2 "--reports needs a positive integer, not '-3'" -- "$TRAINER" --reports -3
expect_error 2 "--reports needs a positive integer, not '9223372036854775808'" -- \
    "$TRAINER" --reports 9223372036854775808

# More report points than steps (up to INT64_MAX): a line at every step (2000 images, batch
# 128: 16 steps), exit 0.
for n in 16 17 9223372036854775807; do
    "$TRAINER" --data "$DATA" --epochs 1 --limit-train 2000 --limit-test 100 --reports "$n" \
        >"$TMP/out" 2>"$TMP/err" || { cat "$TMP/out" "$TMP/err" >&2; fail "--reports $n failed"; }
    lines=$(grep -c '^epoch 1/1  step [0-9]*/16  loss' "$TMP/out" || true)
    [[ $lines -eq 16 ]] || fail "--reports $n: $lines progress lines, expected 16: $(cat "$TMP/out")"
    echo "ok: --reports $n: a line at each of the 16 steps"
done

# --help documents every flag.
"$TRAINER" --help >"$TMP/help" || fail "--help failed"
for flag in --device --data --epochs --batch --hidden --lr --momentum --schedule --seed \
    --limit-train --limit-test --save --load --eval-only --model --graph --offer-batches \
    --upload-f32 \
    --reports --timings --help --version; do
    grep -qF -- "$flag" "$TMP/help" || fail "--help does not mention $flag"
done

# A device the library cannot parse: its message, exit 1.
expect_error 1 "cannot connect to bogus://x" -- "$TRAINER" --data "$DATA" --limit-train 100 \
    --limit-test 100 --device bogus://x
echo "ok: all error cases"
