#!/usr/bin/env bash
# --model cnn on a small slice (1,000 training images, one epoch): the loss falls, the run
# against a real tensord prints the same summary line as in-process and saves byte-identical
# weights (conv, batch norm with its running statistics, dropout masks, Adam: all
# deterministic), --load of those weights with --eval-only reproduces the accuracy, and
# --graph is refused for the cnn.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_server
ARGS=(--data "$DATA" --model cnn --epochs 1 --limit-train 1000 --limit-test 500 --seed 3)
"$TRAINER" --device local:cpu "${ARGS[@]}" --save "$TMP/local.st" >"$TMP/local.out" ||
    fail "local cnn run failed: $(cat "$TMP/local.out")"
"$TRAINER" --device "tensord://$SERVER_ADDR/cpu" "${ARGS[@]}" --save "$TMP/remote.st" \
    >"$TMP/remote.out" || fail "remote cnn run failed: $(cat "$TMP/remote.out")"
cat "$TMP/remote.out"

summary_re='^test accuracy: 0\.[0-9]{4}  final loss: [0-9]+\.[0-9]{6}  epochs: 1  seconds: [0-9]+\.[0-9]$'
local_=$(tail -n 1 "$TMP/local.out")
remote=$(tail -n 1 "$TMP/remote.out")
[[ $local_ =~ $summary_re ]] || fail "local summary line malformed: '$local_'"
[[ ${remote%%  seconds:*} == "${local_%%  seconds:*}" ]] ||
    fail "remote and local differ: '$remote' vs '$local_'"
cmp -s "$TMP/local.st" "$TMP/remote.st" || fail "remote cnn weights differ from local"
grep -q 'model cnn conv32-conv64-fc10' "$TMP/local.out" || fail "no cnn header line"

losses=$(sed -n 's/^epoch 1\/1  step [0-9]*\/[0-9]*  loss \([0-9.]*\) .*/\1/p' "$TMP/local.out")
first=$(head -n 1 <<<"$losses")
last=$(tail -n 1 <<<"$losses")
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' ||
    fail "loss did not decrease: first $first, last $last"

acc=$(sed -n 's/^test accuracy: \([0-9.]*\) .*/\1/p' <<<"$local_")
"$TRAINER" --device local:cpu --data "$DATA" --model cnn --limit-test 500 \
    --load "$TMP/local.st" --eval-only >"$TMP/eval.out" || fail "eval-only failed"
acc2=$(sed -n 's/^test accuracy: \([0-9.]*\) .*/\1/p' <<<"$(tail -n 1 "$TMP/eval.out")")
[[ $acc == "$acc2" ]] || fail "loaded cnn weights give accuracy $acc2, trained $acc"

expect_error 2 "--graph is for --model mlp only" -- "$TRAINER" --model cnn --graph
expect_error 2 "--momentum is for --model mlp only" -- "$TRAINER" --model cnn --momentum 0.5
expect_error 2 "--hidden is for --model mlp only" -- "$TRAINER" --model cnn --hidden 64
# --save's directory is checked before the data loads and the training starts
expect_error 1 "--save $TMP/no-such-dir/w.st: cannot write there: No such file or directory" -- \
    "$TRAINER" --model cnn --save "$TMP/no-such-dir/w.st" --data "$TMP/no-data-either"
expect_error 2 "--model is mlp or cnn, not 'rnn'" -- "$TRAINER" --model rnn
expect_error 1 "local.st: w1: missing from the file" -- \
    "$TRAINER" --data "$DATA" --limit-test 10 --load "$TMP/local.st" --eval-only
echo "ok: cnn local == remote (${local_%%  seconds:*}), save/load reproduces $acc"
