#!/usr/bin/env bash
# fortune-lm on a small slice of the fortunes corpus (60 kB, a 1-layer model, 30 steps):
# the validation loss falls, a run against a real tensord prints the same evaluation lines,
# samples and summary as in-process (seconds and throughput aside), --bf16 trains too, and
# bad flags are refused. Skipped (77) without the fortunes package.
set -euo pipefail
LM=${1:?usage: $0 PATH-TO-fortune-lm}
TRAINER=$LM
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$LM"
CORPUS=${FORTUNES_DATA:-/usr/share/games/fortunes}
[[ -d $CORPUS ]] || { echo "skip: $CORPUS missing (apt-get install fortunes)"; exit 77; }

start_server
ARGS=(--data "$CORPUS" --limit-bytes 60000 --steps 30 --eval-every 10 --layers 1 --dim 32
      --heads 2 --context 32 --batch 8 --sample 60 --seed 5)
"$LM" --device local:cpu "${ARGS[@]}" >"$TMP/local.out" || fail "local run failed: $(cat "$TMP/local.out")"
"$LM" --device "tensord://$SERVER_ADDR/cpu" "${ARGS[@]}" >"$TMP/remote.out" ||
    fail "remote run failed: $(cat "$TMP/remote.out")"
cat "$TMP/local.out"

summary_re='^val loss: [0-9]+\.[0-9]{6}  bits per char: [0-9]+\.[0-9]{4}  steps: 30  seconds: [0-9]+\.[0-9]$'
line=$(tail -n 1 "$TMP/local.out")
[[ $line =~ $summary_re ]] || fail "summary line malformed: '$line'"
strip() { sed -e 's/  [0-9]* tok\/s$//' -e 's/  seconds: .*//' -e '1d' "$1"; }
diff <(strip "$TMP/local.out") <(strip "$TMP/remote.out") >&2 ||
    fail "remote and local runs differ (lines above)"
grep -q '^samples:$' "$TMP/local.out" || fail "no samples"

vals=$(sed -n 's/^step [0-9]*\/30  train loss [0-9.]*  val loss \([0-9.]*\) .*/\1/p' "$TMP/local.out")
[[ $(wc -l <<<"$vals") -eq 3 ]] || fail "expected 3 evaluation lines, got: $vals"
first=$(head -n 1 <<<"$vals")
last=$(tail -n 1 <<<"$vals")
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a && b < 5.5) }' ||
    fail "validation loss did not fall below 5.5 nats: $first -> $last"

"$LM" --device local:cpu "${ARGS[@]}" --bf16 --sample 0 >"$TMP/bf16.out" ||
    fail "--bf16 run failed: $(cat "$TMP/bf16.out")"
grep -q 'bf16 matmuls' "$TMP/bf16.out" || fail "--bf16 not in the header"
bl=$(tail -n 1 "$TMP/bf16.out")
[[ $bl =~ $summary_re ]] || fail "bf16 summary malformed: '$bl'"

expect_error 2 "--heads must divide --dim" -- "$LM" --dim 10 --heads 3
expect_error 2 "option --bf16 takes no value" -- "$LM" --bf16=1
expect_error 2 "unknown option '-B'" -- "$LM" --bf16 -B=1
expect_error 2 "--layers needs an integer" -- "$LM" --layers 0
expect_error 1 "too short for --context 64" -- "$LM" --data "$CORPUS" --limit-bytes 300
echo "ok: fortune-lm local == remote: $line"
