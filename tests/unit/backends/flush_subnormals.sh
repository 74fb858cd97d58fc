#!/usr/bin/env bash
# flush_subnormals.sh CONFORMANCE [TENSORD] (default $TENSORD_BIN): conformance --flush-subnormals against a target that
# really flushes: a tensord whose threads run with x86's FTZ/DAZ bits
# (TENSORD_TEST_FLUSH_SUBNORMALS=1), its cpu device over a unix socket. Cases of the ops
# below must fail without the flag (so the target does flush and the plain check sees it)
# and pass with it, some only through the flushed reference. Skipped (77) off x86, where
# the test setting does nothing.
set -uo pipefail
case "$(uname -m)" in x86_64|i?86) ;; *) echo "not x86: nothing to check"; exit 77 ;; esac
conf=$1 tensord=${2:-${TENSORD_BIN:?TENSORD_BIN is not set (run through meson test)}}
T=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$T"' EXIT
TENSORD_TEST_FLUSH_SUBNORMALS=1 "$tensord" --listen "unix:$T/s.sock" --no-shm \
    --log-level warn 2>"$T/server.log" &
pid=$!
for _ in $(seq 100); do [ -S "$T/s.sock" ] && break; sleep 0.1; done
[ -S "$T/s.sock" ] || { echo "tensord did not start"; cat "$T/server.log"; exit 1; }
grep -q "TENSORD_TEST_FLUSH_SUBNORMALS=1" "$T/server.log" || { echo "no flush warning"; cat "$T/server.log"; exit 1; }
# IEEE arithmetic, casts and the ops that test for zero: there FTZ/DAZ on the CPU computes
# what a flushing GPU does. (Not the library functions such as log, whose bit tricks on a
# subnormal input come out differently under DAZ; max/min are in: under DAZ they compare a
# subnormal as zero but pass it through unflushed, as NVIDIA's driver does, which the check
# accepts element by element; and not f64, which DAZ flushes too while
# NVIDIA's Vulkan driver flushes f32 only: --flush-subnormals takes f32 and bf16.)
prc=0 frc=0 n=0
for f in "add f32" "mul f32" "div f32" "maximum f32" "minimum bf16" "cast f32" "cast bf16" \
         "norm f32" "all f32" "clamp f32" "relu bf16"; do
    args=(--target "unix:$T/s.sock/cpu" --filter "$f")
    plain=$("$conf" "${args[@]}" 2>&1) || prc=$((prc + 1))
    flushed=$("$conf" "${args[@]}" --flush-subnormals 2>&1) || { frc=$((frc + 1)); grep '^FAIL' <<<"$flushed" | head -5; }
    k=$(grep -o '[0-9]* passed only with f32/bf16 subnormals flushed' <<<"$flushed" | cut -d' ' -f1)
    echo "$f: plain $(grep -o '[0-9]* passed, [0-9]* failed' <<<"$plain"); flushed $(grep -o '[0-9]* passed, [0-9]* failed' <<<"$flushed"), ${k:-0} through the flushed reference"
    n=$((n + ${k:-0}))
done
[ "$prc" -gt 0 ] || { echo "the flushing target passed every plain check: the test setting did not flush"; exit 1; }
[ "$frc" -eq 0 ] || { echo "--flush-subnormals did not accept the flushing target ($frc filters failed)"; exit 1; }
[ "$n" -gt 0 ] || { echo "no case needed the flushed reference"; exit 1; }
echo "ok: $prc of the filters fail the plain check; with --flush-subnormals all pass, $n cases through the flushed reference"
