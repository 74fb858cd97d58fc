# lib.sh — helpers shared by the fashion-mnist shell tests (sourced, not run).
# Provides: $TRAINER, $DATA, $TMP (removed on exit), fail, expect_error, start_server,
# vulkan_run.

TRAINER=${1:?usage: $0 PATH-TO-fashion-mnist}
DATA=${FASHION_MNIST_DATA:-/usr/share/datasets/fashion-mnist}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/fm-test.XXXXXX")
SERVER_PIDS=()

cleanup() {
    local pid
    for pid in "${SERVER_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# expect_error CODE NEEDLE... -- CMD...: CMD must exit with CODE and its stderr must contain
# every NEEDLE (fixed strings).
expect_error() {
    local code=$1
    shift
    local needles=()
    while [[ $1 != -- ]]; do
        needles+=("$1")
        shift
    done
    shift
    local rc=0
    "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
    if [[ $rc -ne $code ]]; then
        cat "$TMP/out" "$TMP/err" >&2
        fail "'$*' exited with $rc, expected $code"
    fi
    local n
    for n in "${needles[@]}"; do
        if ! grep -qF -- "$n" "$TMP/err"; then
            cat "$TMP/err" >&2
            fail "stderr of '$*' lacks '$n'"
        fi
    done
    echo "ok: '$*' -> exit $code: $(head -c 300 "$TMP/err" | head -n 1)"
}

# start_server [LISTEN]: run $TENSORD_BIN --listen LISTEN (default 127.0.0.1:0, a free
# loopback port); sets SERVER_ADDR from its "listening on ADDR" line.
start_server() {
    : "${TENSORD_BIN:?TENSORD_BIN is not set (run through meson test)}"
    TENSORD_BIN=${TD_TEST_TENSORD:-$TENSORD_BIN} # tests/run.sh's ThreadSanitizer pass
    local log="$TMP/server${#SERVER_PIDS[@]}.log"
    : >"$log" # exists before the first sed below, however late the child opens it
    "$TENSORD_BIN" --listen "${1:-127.0.0.1:0}" >"$log" 2>&1 &
    local pid=$!
    SERVER_PIDS+=("$pid")
    SERVER_ADDR=
    local i
    for ((i = 0; i < 200; i++)); do
        SERVER_ADDR=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$log" | head -n 1)
        [[ -n $SERVER_ADDR ]] && return 0
        if ! kill -0 "$pid" 2>/dev/null; then
            cat "$log" >&2
            fail "tensord exited before listening"
        fi
        sleep 0.05
    done
    cat "$log" >&2
    fail "tensord did not print 'listening on ADDR' within 10 s"
}

# vulkan_run OUT ARGS...: the trainer on local:vulkan:0 with ARGS, stdout into OUT and stderr
# into OUT.err; exits 77 (skipped) on a host without vulkan:0, fails on any other error.
vulkan_run() {
    local out=$1 rc=0
    shift
    "$TRAINER" --device local:vulkan:0 "$@" >"$out" 2>"$out.err" || rc=$?
    if [[ $rc -ne 0 ]] && grep -qF "unknown device 'vulkan:0'" "$out.err"; then
        echo "skipped: no vulkan:0 on this host"
        exit 77
    fi
    [[ $rc -eq 0 ]] || fail "local:vulkan:0 run failed: $(cat "$out.err")"
}
