#!/usr/bin/env bash
# run-on-gpu-host.sh — the whole CUDA check on the GPU host, in one invocation.
#
# Prepared here by tests/gpu/prepare-carry.sh (carry/ holds the binaries, the Debian shared
# libraries and the Fashion-MNIST files); run on the GPU host from the repository root:
#     bash tests/gpu/run-on-gpu-host.sh
# through the device tool with carry: ["carry"]. Logs go to $OUT (default
# /tmp/tensord-gpu-out), 8 files (the device tool returns at most 8):
#     summary.txt            one line per step with its result; read this first
#     host.txt               nvidia-smi, OS, library resolution of the carried binaries, and
#                            the module's backend ABI (it must load: TD_BACKEND_ABI_VERSION)
#     conformance-local.log  every op on local:cuda:0 vs local:cpu, plus the 200 GiB OOM check
#                            (each native SOFTMAX/LOG_SOFTMAX is also held to its lowering on
#                            cuda:0); then the same with TENSORD_FORCE_LOWERING=1 (every
#                            session lowers composites: lowered cuda:0 vs lowered cpu)
#     conformance-hip-gemm.log matmul cases with the HIP backend's GEMM kernel (nvcc-built)
#     conformance-remote.log the same through a tensord on 127.0.0.1 (session cuda:0), then
#                            through a second tensord started with TENSORD_FORCE_LOWERING=1
#     server.log             both tensords' logs (device lines, failures)
#     fashion-mnist.log      2 epochs on local:cuda:0, remote cuda:0 and local:cpu
#     smoke.log              tensorctl info, and the client-api / e2e / engine-lowering suites
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

# ---- 0. the module loads under this engine's backend ABI (engine/device.c refuses others) ----
{
    echo "== backend ABI: td_backend_abi exported by the carried modules"
    for m in "$X/lib/tensord/tensord-backend-cuda.so" "$X/lib/hip-gemm/tensord-backend-cuda.so"; do
        echo "-- $m"; nm -D --defined-only "$m" 2>&1 | grep -E 'td_backend_(abi|entry)'
    done
    echo "== TENSORD_LOG_LEVEL=debug conformance --require-backend cuda (no cases)"
    TENSORD_LOG_LEVEL=debug timeout "$(limit 30)" "$X/bin/conformance" --require-backend cuda \
        --target local:cuda:0 --filter no-such-case 2>&1
} >>"$OUT/host.txt" 2>&1
abi=$(grep -a -m1 -oE 'backend cuda: loaded from .*' "$OUT/host.txt")
refused=$(grep -a -m1 -oE 'backend module .* refused: .*' "$OUT/host.txt")
[ -n "$abi" ] && [ -z "$refused" ]
result "cuda module loads (${refused:-${abi:-no 'loaded' line: see host.txt}})" $?

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

# ---- 1a. the same with TENSORD_FORCE_LOWERING=1: every session (the cpu reference too)
# lowers SOFTMAX/LOG_SOFTMAX to MAX, SUB, EXP, SUM, DIV (LOG, SUB), so the composites' cases
# compare cuda:0's lowering with the CPU's under the ops' ordinary bounds.
L=$X/conformance-local-lowered.log
TENSORD_FORCE_LOWERING=1 timeout "$(limit 140)" "$X/bin/conformance" --target local:cuda:0 >"$L" 2>&1
rc=$?
result "conformance local:cuda:0, TENSORD_FORCE_LOWERING=1 ($(grep -m1 '^conformance ' "$L" | sed 's/^conformance //'))" $rc
{ echo; echo "======== TENSORD_FORCE_LOWERING=1 conformance --target local:cuda:0"; cat "$L"; } \
    >>"$OUT/conformance-local.log"
rm -f "$L"
# native kernels held to their lowering on cuda:0 (step 1's second session)
n=$(grep -c '^FAIL .*\(native kernel vs its lowering\|lowered run on the target\)' "$OUT/conformance-local.log")
note "    native vs lowered on local:cuda:0 (step 1's lowering session): $n failing case(s)"

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
# Memory limits off: by default a session may hold 50 % of the host's RAM and a tenant 75 %
# (server/config.h), so the 200 GiB OOM check would stop at the session quota (TD_EQUOTA)
# and never reach cuda:0's allocator, which is what it checks.
start_tensord "$X/bin/tensord" "$OUT/server.log" --max-session-bytes 0 --max-tenant-bytes 0
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
    result "tensorctl info $ADDR" $?
    grep -a -iE 'cuda' "$OUT/smoke.log" | head -3 | sed 's/^/    /' | tee -a "$SUM"
fi
if [ -n "${SERVER_PID:-}" ]; then
    stop_tensord
    echo "tensord exit status: $SERVER_STATUS" >>"$OUT/server.log"
fi

# ---- 4b. a second tensord with TENSORD_FORCE_LOWERING=1 (all its sessions lower
# composites); the client's reference stays native ----
S2=$X/server-lowered.log
export TENSORD_FORCE_LOWERING=1
start_tensord "$X/bin/tensord" "$S2"
unset TENSORD_FORCE_LOWERING
ADDR=$SERVER_ADDR
if [ -z "$ADDR" ]; then
    result "tensord (TENSORD_FORCE_LOWERING=1) start (see server.log)" 1
else
    note "tensord (TENSORD_FORCE_LOWERING=1) listening on $ADDR (pid $SERVER_PID)"
    L=$X/conformance-remote-lowered.log
    timeout "$(limit 140)" "$X/bin/conformance" --target "tensord://$ADDR/cuda:0" >"$L" 2>&1
    rc=$?
    result "conformance tensord://$ADDR/cuda:0, server TENSORD_FORCE_LOWERING=1 ($(grep -m1 '^conformance ' "$L" | sed 's/^conformance //'))" $rc
    { echo; echo "======== conformance --target tensord://$ADDR/cuda:0 (server TENSORD_FORCE_LOWERING=1)"; cat "$L"; } \
        >>"$OUT/conformance-remote.log"
    rm -f "$L"
    stop_tensord
    echo "tensord (TENSORD_FORCE_LOWERING=1) exit status: $SERVER_STATUS" >>"$S2"
fi
{ echo; echo "======== tensord with TENSORD_FORCE_LOWERING=1"; cat "$S2"; } >>"$OUT/server.log" 2>/dev/null
rm -f "$S2"

# ---- 5. Fashion-MNIST on the CPU, for the accuracy and time side by side ----
fm "local:cpu" "local:cpu" 60

# ---- 6. smoke: the carried criterion suites (CPU paths, their own servers) ----
for t in test-client-api test-e2e-compute test-e2e-info test-engine-lowering; do
    echo "== $t" >>"$OUT/smoke.log"
    timeout "$(limit 30)" "$X/bin/$t" >>"$OUT/smoke.log" 2>&1
    result "smoke $t" $?
done

note "done in $(($(date +%s) - start)) s, $failures failed step(s); logs in $OUT"
[ "$failures" -eq 0 ]
