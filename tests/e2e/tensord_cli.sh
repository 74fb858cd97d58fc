#!/usr/bin/env bash
# tensord's command line, as a user meets it: --help and --version answer on stdout with
# exit 0; an unknown option, an option missing its value and a flag given a value each exit
# 2 with a message naming what was wrong and pointing at --help.
# Usage: tensord_cli.sh (TENSORD_BIN set).
set -euo pipefail
: "${TENSORD_BIN:?TENSORD_BIN is not set (run through meson test)}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$TENSORD_BIN" --help >"$tmp/out" 2>&1 || fail "--help exited $?"
grep -q -- "--listen" "$tmp/out" || fail "--help does not list --listen"
"$TENSORD_BIN" --version >"$tmp/out" 2>&1 || fail "--version exited $?"
grep -Eq '^tensord [0-9]' "$tmp/out" || fail "--version printed: $(cat "$tmp/out")"

# expect ARG NEEDLE: tensord ARG exits 2, and stderr holds NEEDLE and the --help hint
expect() {
    local rc=0
    "$TENSORD_BIN" "$1" >"$tmp/out" 2>"$tmp/err" || rc=$?
    [ "$rc" = 2 ] || fail "'$1' exited $rc, not 2"
    grep -qF -- "$2" "$tmp/err" || fail "'$1' said: $(cat "$tmp/err") (wanted: $2)"
    grep -qF -- "try 'tensord --help'" "$tmp/err" || fail "'$1' gives no --help hint"
}
expect --bogus "tensord: unknown option '--bogus'"
expect --bogus=1 "tensord: unknown option '--bogus=1'"
expect --config "tensord: option '--config' needs a value"
expect --version=1 "tensord: option '--version' takes no value"
expect --help=yes "tensord: option '--help' takes no value"
expect --vers=1 "tensord: option '--vers' takes no value"
expect -z "tensord: unknown option '-z'"
expect -q=1 "tensord: unknown option '-q'"
# an unknown short option after a good one names itself, not the good one
rc=0
"$TENSORD_BIN" --listen=unix:/nonexistent/x.sock -z=1 >"$tmp/out" 2>"$tmp/err" || rc=$?
[ "$rc" = 2 ] || fail "'--listen=... -z=1' exited $rc, not 2"
grep -qF "tensord: unknown option '-z'" "$tmp/err" || fail "'--listen=... -z=1' said: $(cat "$tmp/err")"
echo ok
