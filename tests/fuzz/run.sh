#!/usr/bin/env bash
# Build the libFuzzer targets with clang (ASan + UBSan + fuzzer coverage) in build-fuzz/
# (or $TD_FUZZ_BUILD) and run each for TD_FUZZ_SECONDS (default 30) on its checked-in
# corpus: wire (message decoder), infer (op validator and shape inference, then small
# accepted ops executed on a local CPU session), graph (graph definition decoder and
# validator, then small valid graphs run with td__graph_exec), onnx (the ONNX model loader,
# then one run of small models that load); tests/fuzz/fuzz_exec.h says
# what "small" is. Hand-made seeds: tests/fuzz/gen_seeds.py. New inputs go to a scratch
# copy; a crash leaves its input in the build directory and fails the script: add it to
# tests/fuzz/corpus/TARGET/ as a regression input once fixed. TD_NINJA_JOBS=N limits the
# build's parallel jobs.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${TD_FUZZ_SECONDS:-30}
dir=${TD_FUZZ_BUILD:-build-fuzz}
if [ ! -f "$dir/build.ninja" ]; then
    CC=clang meson setup "$dir" -Dfuzz=true -Dcuda=disabled -Dtests=disabled \
        -Db_sanitize=address,undefined -Db_lundef=false --buildtype=debugoptimized >/dev/null
fi
ninja -C "$dir" ${TD_NINJA_JOBS:+-j "$TD_NINJA_JOBS"} tests/fuzz/fuzz-wire tests/fuzz/fuzz-infer tests/fuzz/fuzz-graph \
    tests/fuzz/fuzz-onnx
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
for t in wire infer graph onnx; do
    work="$dir/corpus-$t"
    rm -rf "$work" && mkdir -p "$work"
    cp tests/fuzz/corpus/$t/* "$work/" 2>/dev/null || true
    echo "== fuzz-$t for ${secs} s"
    (cd "$dir" && "tests/fuzz/fuzz-$t" -max_total_time="$secs" -max_len=4096 \
        -print_final_stats=1 "corpus-$t" ../tests/fuzz/corpus/$t 2>&1 | tail -5)
done
