#!/usr/bin/env bash
# run.sh — check the CUDA backend's host code and kernels on the CPU, without a GPU.
#
# Builds backends/gpu/*.cu and *.c (and backends/cuda/cuda_blas.c) against a CPU emulation of the CUDA runtime
# (cuda_emu.c, include/), with kernel launches rewritten into loops over blocks and threads
# (preprocess.py, kernel_emu.hpp; kernels that use __syncthreads run their threads as
# fibers) and a naive GEMM standing in for cuBLAS (cublas_emu.c). The resulting module is
# loaded as the "cuda" backend by the conformance program, which compares every op with
# the CPU backend. Math comes from the host's libm here, so this checks indexing, dispatch,
# broadcasting, reductions' partitioning, GEMM argument mapping and error paths — not the
# GPU's rounding, streams or memory pool, which only the GPU run (tests/gpu/) can check.
#
#     tests/gpu/emu/run.sh [conformance options, e.g. --filter reduce]
# Needs a build dir with the conformance program (BUILD, default build-cuda).
# GEMM=hip checks the HIP backend's own float GEMM (backends/hip/hip_gemm.cu) in place of cuBLAS.
# SANITIZE=1 builds the emulated module with AddressSanitizer (out-of-bounds kernel
# accesses become reports).
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
B=${BUILD:-build-cuda}
EMU=$ROOT/tests/gpu/emu
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/mod" "$W/lib" "$W/obj"
SAN=()
if [ "${SANITIZE:-0}" = 1 ]; then SAN=(-fsanitize=address -fno-omit-frame-pointer); fi
CXXFLAGS=(-std=c++17 -O1 -g -fPIC -D_GNU_SOURCE -Wno-unknown-pragmas "${SAN[@]}"
          -include "$EMU/kernel_emu.hpp" -I"$EMU/include" -I"$ROOT" -I"$ROOT/include")
CFLAGS=(-std=c11 -O1 -g -fPIC -D_GNU_SOURCE "${SAN[@]}" -I"$EMU/include" -I"$ROOT" -I"$ROOT/include")
pids=()
# GEMM=hip: float matmul by the HIP backend's own kernel (backends/hip/hip_gemm.cu) instead
# of cuBLAS (the naive cublas_emu.c)
BLAS_C=backends/cuda/cuda_blas.c
KERNELS=(backends/gpu/*.cu)
TF32=()
if [ "${GEMM:-cublas}" = hip ]; then
    BLAS_C=""
    KERNELS+=(backends/hip/hip_gemm.cu)
    TF32=(--tf32 off) # the HIP GEMM never uses TF32; conformance would expect it of "cuda"
fi
for cu in "${KERNELS[@]}"; do
    n=$(basename "$cu" .cu)
    python3 "$EMU/preprocess.py" "$cu" "$W/obj/$n.cpp"
    g++ "${CXXFLAGS[@]}" -c "$W/obj/$n.cpp" -o "$W/obj/$n.o" &
    pids+=($!)
done
for c in backends/gpu/gpu_backend.c $BLAS_C backends/gpu/gpu_iter.c "$EMU/cuda_emu.c"; do
    gcc "${CFLAGS[@]}" -c "$c" -o "$W/obj/$(basename "$c" .c).o"
done
for p in "${pids[@]}"; do wait "$p"; done
g++ -shared "${SAN[@]}" -o "$W/mod/tensord-backend-cuda.so" "$W"/obj/*.o -ldl -lpthread
gcc -shared -fPIC -O1 -I"$EMU/include" -I"$ROOT" "$EMU/cublas_emu.c" -o "$W/lib/libcublas.so.13"
PRELOAD=""
if [ "${SANITIZE:-0}" = 1 ]; then PRELOAD=$(gcc -print-file-name=libasan.so); fi
TENSORD_BACKEND_DIR="$W/mod" LD_LIBRARY_PATH="$W/lib" LD_PRELOAD="$PRELOAD" \
    ASAN_OPTIONS="detect_leaks=0:${ASAN_OPTIONS:-}" \
    "$B/tests/unit/backends/conformance" --target local:cuda:0 --oom "${TF32[@]}" "$@"
