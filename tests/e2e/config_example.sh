#!/usr/bin/env bash
# deploy/tensord.conf.example, as README's deployment steps install it: tensord starts with
# it, keeps its default memory limits (the example must not switch a limit off), and the
# example mentions every key tensord's parser knows (server/config.c's list of known keys,
# as its "unknown key" error names them). Usage: config_example.sh (TENSORD_BIN set).
set -euo pipefail
: "${TENSORD_BIN:?TENSORD_BIN is not set (run through meson test)}"
: "${TD_SOURCE_ROOT:?TD_SOURCE_ROOT is not set (run through meson test)}"
example="$TD_SOURCE_ROOT/deploy/tensord.conf.example"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Every key the parser accepts appears in the example (as a setting or a commented one).
printf 'no_such_key = 1\n' >"$tmp/bad.conf"
if "$TENSORD_BIN" --config "$tmp/bad.conf" --listen 127.0.0.1:0 >"$tmp/bad.out" 2>&1; then
    echo "FAIL: an unknown key was accepted"; exit 1
fi
keys=$(sed -n "s/.*(known: \([^)]*\)).*/\1/p" "$tmp/bad.out" | tr -d ' ' | tr ',' ' ')
[ -n "$keys" ] || { echo "FAIL: no key list in: $(cat "$tmp/bad.out")"; exit 1; }
missing=""
for k in $keys; do
    grep -Eq "^#?$k = " "$example" || missing="$missing $k"
done
[ -z "$missing" ] || { echo "FAIL: keys not in the example:$missing"; exit 1; }

# It starts, and the per-session limit is the default (not 'no limit').
"$TENSORD_BIN" --config "$example" --listen 127.0.0.1:0 >"$tmp/out" 2>"$tmp/err" &
pid=$!
for _ in $(seq 100); do grep -q 'listening on' "$tmp/out" "$tmp/err" 2>/dev/null && break; sleep 0.1; done
kill -TERM "$pid"; wait "$pid" || true
grep -q 'listening on' "$tmp/out" "$tmp/err" || { echo "FAIL: no 'listening on'"; cat "$tmp/err"; exit 1; }
line=$(grep -h 'bytes per session' "$tmp/out" "$tmp/err" | head -1)
case "$line" in
    *"bytes per session: no limit"*) echo "FAIL: the example disables the session limit: $line"; exit 1 ;;
    *"bytes per session: "*) ;;
    *) echo "FAIL: no session limit in the start-up line: $line"; exit 1 ;;
esac
echo "ok: $(echo $keys | wc -w) keys documented; $line"
