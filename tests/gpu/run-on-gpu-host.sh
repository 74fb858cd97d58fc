#!/usr/bin/env bash
# run-on-gpu-host.sh — the whole CUDA check on the GPU host, in one invocation.
#
# Prepared here by tests/gpu/prepare-carry.sh (carry/ holds the binaries, the Debian shared
# libraries and the Fashion-MNIST files); run on the GPU host from the repository root:
#     bash tests/gpu/run-on-gpu-host.sh
# through the device tool with carry: ["carry"]. Logs go to $OUT (default
# /tmp/tensord-gpu-out), at most 9 files:
#     summary.txt            one line per step with its result; read this first
#     host.txt               nvidia-smi, OS, library resolution of the carried binaries
#     conformance-local.log  every op on local:cuda:0 vs local:cpu, plus the 200 GiB OOM check
#     conformance-hip-gemm.log matmul cases with the HIP backend's GEMM kernel (nvcc-built)
#     conformance-remote.log the same through a tensord on 127.0.0.1 (session cuda:0)
#     server.log             that tensord's log (device lines, failures)
#     fashion-mnist.log      2 epochs on local:cuda:0, remote cuda:0 and local:cpu
#     smoke.log              tensorctl info, and the client-api / e2e criterion suites
# Every step has its own time limit and the whole run stops by $BUDGET (560) seconds, so one
# hang cannot eat the device tool's 600 s; the steps run most important first.
# Exit status: 0 when every step passed.
set -u -o pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/tensord-gpu-out}
mkdir -p "$OUT"
SUM=$OUT/summary.txt
: >"$SUM"
failures=0
note() { echo "$*" | tee -a "$SUM"; }
result() { # name rc
    if [ "$2" -eq 0 ]; then note "PASS $1"; else note "FAIL $1 (exit $2)"; failures=$((failures + 1)); fi
}
start=$(date +%s)
# Seconds a step may take: its own limit, capped so the whole run ends by BUDGET seconds
# (the device tool stops a command at 600 s).
BUDGET=${BUDGET:-560}
limit() {
    local left=$((BUDGET - ($(date +%s) - start)))
    [ "$left" -lt 5 ] && left=5
    echo $(($1 < left ? $1 : left))
}

# ---- unpack and environment ----
. tests/gpu/gpu-host-lib.sh
X=${TMPDIR:-/tmp}/tensord-gpu
unpack_carry "$X" || { note "FAIL unpack carry/tensord-gpu.tar.xz"; exit 1; }
DATA=$ROOT/carry/fashion-mnist

{
    echo "== nvidia-smi"; nvidia-smi 2>&1
    echo "== host"; uname -a; head -4 /etc/os-release; nproc
} >"$OUT/host.txt" 2>&1

# The host's CUDA libraries (libcudart, libcublas); the carried libcudart only as a fallback.
use_carry "$X" "$OUT/host.txt"
export TENSORD_BIN="$X/bin/tensord" TENSORCTL_BIN="$X/bin/tensorctl" TD_SOURCE_ROOT="$ROOT"
{
    echo "== LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    for f in "$X"/bin/* "$X/lib/tensord/tensord-backend-cuda.so"; do
        echo "-- ldd $f"; ldd "$f" | grep -E "not found|cudart|cublas|libtensord|libstdc|libssl" 
    done
} >>"$OUT/host.txt" 2>&1
nvidia-smi -L 2>/dev/null | head -2 | tee -a "$SUM"

# ---- 1. conformance, in-process: every op on cuda:0 against the CPU, and the OOM check ----
timeout "$(limit 140)" "$X/bin/conformance" --target local:cuda:0 --oom >"$OUT/conformance-local.log" 2>&1
rc=$?
result "conformance local:cuda:0 ($(grep -m1 '^conformance ' "$OUT/conformance-local.log" | sed 's/^conformance //'))" $rc
grep -E '^oom:' "$OUT/conformance-local.log" | sed 's/^/    local /' | tee -a "$SUM"
# On a failure, rerun the first failing case under compute-sanitizer (memcheck) for clues.
first=$(grep -m1 '^FAIL ' "$OUT/conformance-local.log" | sed -e 's/^FAIL //' -e 's/ on local:cuda:0: .*//')
if [ -n "$first" ] && command -v compute-sanitizer >/dev/null 2>&1; then
    {
        echo "== compute-sanitizer memcheck: conformance --filter '$first'"
        timeout "$(limit 60)" compute-sanitizer --tool memcheck --print-limit 20 \
            "$X/bin/conformance" --target local:cuda:0 --filter "$first"
    } >>"$OUT/conformance-local.log" 2>&1
    note "    first local failure ('$first') rerun under compute-sanitizer: see conformance-local.log"
fi

# ---- 1b. the HIP backend's own GEMM kernel (backends/hip/hip_gemm.cu, built by nvcc into a
# CUDA module in place of cuBLAS): every matmul case against the CPU. No AMD GPU is
# reachable, so this is where that kernel's numbers are checked on a GPU at all.
if [ -f "$X/lib/hip-gemm/tensord-backend-cuda.so" ]; then
    TENSORD_BACKEND_DIR="$X/lib/hip-gemm" timeout "$(limit 60)" "$X/bin/conformance" \
        --target local:cuda:0 --filter matmul --tf32 off >"$OUT/conformance-hip-gemm.log" 2>&1
    rc=$?
    result "hip_gemm.cu under nvcc, matmul cases ($(grep -m1 '^conformance ' "$OUT/conformance-hip-gemm.log" | sed 's/^conformance //'))" $rc
fi

# ---- 2. Fashion-MNIST in-process on the GPU ----
fm() { # label device seconds
    echo "== $1: fashion-mnist --device $2 --epochs 2" >>"$OUT/fashion-mnist.log"
    timeout "$(limit "$3")" "$X/bin/fashion-mnist" --device "$2" --epochs 2 --data "$DATA" \
        >>"$OUT/fashion-mnist.log" 2>&1
    local r=$?
    result "fashion-mnist $1: $(grep -a 'test accuracy' "$OUT/fashion-mnist.log" | tail -1)" $r
}
: >"$OUT/fashion-mnist.log"
fm "local:cuda:0" "local:cuda:0" 90

# ---- 3. a tensord on loopback; conformance through it ----
start_tensord "$X/bin/tensord" "$OUT/server.log"
ADDR=$SERVER_ADDR
if [ -z "$ADDR" ]; then
    result "tensord start (see server.log)" 1
else
    note "tensord listening on $ADDR (pid $SERVER_PID)"
    timeout "$(limit 140)" "$X/bin/conformance" --target "tensord://$ADDR/cuda:0" --oom \
        >"$OUT/conformance-remote.log" 2>&1
    rc=$?
    result "conformance tensord://$ADDR/cuda:0 ($(grep -m1 '^conformance ' "$OUT/conformance-remote.log" | sed 's/^conformance //'))" $rc
    grep -E '^oom:' "$OUT/conformance-remote.log" | sed 's/^/    remote /' | tee -a "$SUM"
    # ---- 4. Fashion-MNIST on the server's GPU ----
    fm "remote cuda:0" "tensord://$ADDR/cuda:0" 90
    {
        echo "== tensorctl info $ADDR"
        timeout "$(limit 20)" "$X/bin/tensorctl" info "$ADDR"
    } >"$OUT/smoke.log" 2>&1
fi

# ---- 5. Fashion-MNIST on the CPU, for the accuracy and time side by side ----
fm "local:cpu" "local:cpu" 60

# ---- 6. smoke: the carried criterion suites (CPU paths, their own servers) ----
for t in test-client-api test-e2e-compute test-e2e-info; do
    echo "== $t" >>"$OUT/smoke.log"
    timeout "$(limit 30)" "$X/bin/$t" >>"$OUT/smoke.log" 2>&1
    result "smoke $t" $?
done

if [ -n "${SERVER_PID:-}" ]; then
    stop_tensord
    echo "tensord exit status: $SERVER_STATUS" >>"$OUT/server.log"
fi
note "done in $(($(date +%s) - start)) s, $failures failed step(s); logs in $OUT"
[ "$failures" -eq 0 ]
