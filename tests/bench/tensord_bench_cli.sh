#!/usr/bin/env bash
# tensord-bench's command line (bench/tensord_bench.c): an option that takes a value takes
# it as "--name value" or as "--name=value" (the rest of the argument after the first '=');
# a flag given a value, an option given an empty value or none, and an unknown option each
# exit 2 with a message naming it and the usage. Nothing here measures speed.
# Usage: tensord_bench_cli.sh PATH-TO-tensord-bench
set -euo pipefail
bench=${1:?usage: $0 PATH-TO-tensord-bench}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# --only P6 selects P6 alone (matmul and reductions in this process: no server starts)
for only in --only=P6 "--only P6"; do
    # shellcheck disable=SC2086 # "--only P6" is two arguments
    "$bench" --quick --json $only >"$tmp/out" 2>"$tmp/err" ||
        fail "--quick --json $only exited $?: $(cat "$tmp/err")"
    grep -q '"id": "P6"' "$tmp/out" || fail "$only: no P6 row in: $(cat "$tmp/out")"
    ! grep -q '"id": "P[^6]"' "$tmp/out" || fail "$only: rows of other measures in: $(cat "$tmp/out")"
    echo "ok: $only"
done

# expect NEEDLE ARGS...: tensord-bench ARGS exits 2, stderr holds NEEDLE and the usage
expect() {
    local needle=$1 rc=0
    shift
    "$bench" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
    [[ $rc == 2 ]] || fail "'$*' exited $rc, not 2: $(cat "$tmp/err")"
    grep -qF -- "$needle" "$tmp/err" || fail "'$*' said: $(cat "$tmp/err") (wanted: $needle)"
    echo "ok: $*: $(head -n 1 "$tmp/err")"
}
# values that reached their option's own check
expect "tensord-bench: --only: unknown measure 'P9' (P1 .. P7)" --only=P9
expect "tensord-bench: --p5-runs needs 1..9, not '0'" --p5-runs=0
expect "each number in 1..65536, not '4x0'" --p5-sizes=4x0
expect "tcp-offer and tcp-f32, not 'udp=1'" --p5-configs=tcp,udp=1
# a list that names nothing, and lists longer than the bench keeps (it used to cut them at
# 127 characters and name the cut piece, or run no remote configuration at all)
expect "tensord-bench: --p5-configs ',' names no configuration" --p5-configs=,
long=$(printf 'P1,%.0s' $(seq 60))
expect "tensord-bench: --only: a list of 180 characters; at most 127" --only="$long"
expect "tensord-bench: --p5-configs: a list of 180 characters; at most 127" --p5-configs "$long"
# flags given a value, options without one, an unknown option: with the usage
expect_usage() { # expect_usage NEEDLE ARGS...
    expect "$@"
    grep -qF "usage: tensord-bench" "$tmp/err" || fail "'${*:2}' printed no usage"
}
expect_usage "tensord-bench: option --json takes no value" --json=1
expect_usage "tensord-bench: option --quick takes no value" --quick=
expect_usage "tensord-bench: option --help takes no value" --help=yes
expect_usage "tensord-bench: option --only needs a value" --only=
expect_usage "tensord-bench: option --only needs a value" --only
expect_usage "tensord-bench: option --tensord needs a value" --tensord=
expect_usage "tensord-bench: unknown argument '--bogus'" --bogus=1
for h in --help -h; do
    "$bench" $h >"$tmp/out" || fail "$h exited $?"
    grep -qF -- "--only LIST" "$tmp/out" || fail "$h does not list --only"
done
echo "ok: tensord-bench command line"
