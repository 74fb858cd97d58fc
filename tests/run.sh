#!/usr/bin/env bash
# The whole test suite: installs what it needs, builds warnings-as-errors, runs every
# suite (unit, end-to-end against a real tensord, example), then builds again under
# AddressSanitizer + UndefinedBehaviorSanitizer and runs the suite once more, then runs the
# end-to-end and hostile suites against a ThreadSanitizer build of tensord.
# Exits non-zero on any failure. Set TD_SKIP_SANITIZERS=1 to skip the second pass,
# TD_SKIP_TSAN=1 to skip the third, and
# TD_FUZZ_SECONDS=N to also run each libFuzzer target (tests/fuzz/) for N seconds.
# The first pass also builds the HIP backend module (Debian's hipcc, about 650 MB
# installed the first time) and checks that it loads; TD_SKIP_HIP=1 leaves HIP out.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
hip=-Dhip=enabled
if [ "${TD_SKIP_HIP:-0}" = "1" ]; then
    hip=-Dhip=disabled
    deploy/install-deps.sh
else
    TD_EXTRA_PKGS="hipcc libamdhip64-dev" deploy/install-deps.sh
fi

configure() { # dir, extra args...
    local dir=$1; shift
    if [ -f "$dir/build.ninja" ]; then
        meson configure "$dir" "$@" >/dev/null
    else
        meson setup "$dir" "$@" >/dev/null
    fi
}

echo "== build (warnings are errors)"
# -Ddnnl=enabled (not the default auto): the f32 conv suites must run on oneDNN here, and a
# missing libdnnl-dev fails the build instead of quietly testing im2col only.
configure build-test --buildtype=debugoptimized -Dwerror=true "$hip" -Dvulkan=enabled \
    -Ddnnl=enabled
ninja -C build-test
echo "== tests"
meson test -C build-test --print-errorlogs --num-processes 2

if [ "${TD_SKIP_SANITIZERS:-0}" != "1" ]; then
    echo "== build with ASan + UBSan"
    # The GPU modules are host code around nvcc/hipcc kernels; the first pass builds and
    # loads them, the sanitizer pass skips them (under ASan they would only add minutes).
    configure build-asan --buildtype=debug -Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false -Dcuda=disabled -Dhip=disabled -Ddnnl=enabled
    ninja -C build-asan
    echo "== tests under ASan + UBSan"
    export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:halt_on_error=1"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
    # conformance-self: every small case, and one large case (> 65536 elements) in 4 (the
    # plain pass ran them all; under ASan they would take four minutes)
    export TD_CONFORMANCE_LARGE_EVERY=4
    meson test -C build-asan --print-errorlogs --num-processes 2 --timeout-multiplier 3
fi
if [ "${TD_SKIP_TSAN:-0}" != "1" ]; then
    echo "== tensord under ThreadSanitizer: the e2e and hostile suites against it"
    # Only the server is built with TSan (criterion's fixed arena does not start under TSan);
    # the suites of the first pass drive it through TD_TEST_TENSORD. tests/tsan.supp says
    # which uninstrumented libraries are suppressed and why. oneDNN is off in this build (the
    # plain and ASan passes run its conv): with it, this tensord died at the first oneDNN conv
    # with "called_from_lib suppression 'libopenblas.so.0' is matched against 2 libraries"
    # (tsan.supp's rule; 2026-12-06), and its OpenMP runtime, libgomp, is not instrumented
    # either.
    configure build-tsan --buildtype=debugoptimized -Db_sanitize=thread -Db_lundef=false -Dcuda=disabled -Dhip=disabled -Dtests=disabled -Ddnnl=disabled
    ninja -C build-tsan server/tensord
    TD_TEST_TENSORD="$PWD/build-tsan/server/tensord" \
    TSAN_OPTIONS="halt_on_error=0:exitcode=66:suppressions=$PWD/tests/tsan.supp" \
        meson test -C build-test --print-errorlogs --num-processes 2 --timeout-multiplier 4 \
            --suite e2e --suite hostile --no-rebuild
fi
if [ -n "${TD_FUZZ_SECONDS:-}" ]; then
    echo "== fuzzing, ${TD_FUZZ_SECONDS} s per target"
    TD_EXTRA_PKGS="clang libclang-rt-14-dev" deploy/install-deps.sh
    tests/fuzz/run.sh
fi
echo "== all tests passed in $(( $(date +%s) - start )) s"
