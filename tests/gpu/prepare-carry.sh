#!/usr/bin/env bash
# prepare-carry.sh — build a release tree with the CUDA backend module and pack into carry/
# (git-ignored) everything tests/gpu/run-on-gpu-host.sh needs on the GPU host.
#
# Run here (a Debian 12 build machine with nvcc), from anywhere in the repo:
#     tests/gpu/prepare-carry.sh            # NINJA_JOBS=1 to be gentle on a shared machine
#
# The GPU host (Ubuntu 24.04, CUDA 13 + cuBLAS, OpenSSL 3) lacks gRPC, protobuf-c, libuv,
# OpenBLAS, criterion and friends, and cannot reach a package registry, so the Debian shared
# libraries our binaries need travel with them. glibc, libstdc++/libgcc_s, OpenSSL, zlib and
# the CUDA libraries are taken from the host (newer than ours, same sonames); a copy of
# libcudart goes along only as a last resort. Binaries and libraries are packed as one
# tar.xz (OpenBLAS alone is 36 MB raw, 4 MB compressed) so that carry/ stays well under the
# 64 MiB a device-tool call may transfer together with the working tree.
#
# carry/ afterwards:
#     tensord-gpu.tar.xz   bin/{tensord,tensorctl,fashion-mnist,conformance,test-*,
#                          tensord-bench (tests/gpu/p5-on-gpu-host.sh)},
#                          lib/ (libtensord.so.0 + Debian libs, libvulkan.so.1 with the
#                          Vulkan module), lib/tensord/ (the CUDA module, and the Vulkan one
#                          when glslc is here), lib/cuda/ (fallback libcudart)
#     fashion-mnist/       the four Fashion-MNIST .gz files
#     onnx-node.tar.xz     the ONNX node tests of libonnx-testdata (tests/gpu/extras-on-gpu-host.sh)
#     fortunes.tar.xz      fortunes/: Debian's fortune files, fortune-lm's text (train-on-gpu-host.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${BUILD:-build-gpu}
DATA=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}

# The Vulkan module goes along when this machine can build it (glslc and the loader's
# headers): tests/gpu/vulkan-on-gpu-host.sh runs it on the H200's NVIDIA Vulkan driver.
# VULKAN=disabled in the environment leaves it out (a carry for CUDA-only scripts builds
# faster on a shared machine).
if [ -z "${VULKAN:-}" ]; then
    VULKAN=disabled
    command -v glslc >/dev/null && [ -f /usr/include/vulkan/vulkan.h ] && VULKAN=enabled
fi
echo "== configure $BUILD (release, -Dcuda=enabled, -Dvulkan=$VULKAN)"
# -Ddnnl=disabled: the GPU host's CPU reference convolutions stay on im2col + OpenBLAS, so
# the carry needs no libdnnl (tens of MB) and conformance's CPU side is the same everywhere.
if [ -f "$BUILD/build.ninja" ]; then
    meson configure "$BUILD" -Dcuda=enabled -Dvulkan=$VULKAN -Ddnnl=disabled --buildtype=release >/dev/null
else
    meson setup "$BUILD" -Dcuda=enabled -Dvulkan=$VULKAN -Ddnnl=disabled --buildtype=release >/dev/null
fi
bins=(server/tensord tools/tensorctl examples/fashion-mnist/fashion-mnist
      tests/unit/backends/conformance tests/unit/client/test-client-api
      tests/e2e/test-e2e-compute tests/e2e/test-e2e-info tests/unit/engine/test-engine-lowering
      bench/tensord-bench tests/onnx/td-onnx-runner bench/conv-bench bench/nn-bench bench/attn-bench
      bench/device-bench examples/fortune-lm/fortune-lm tests/gpu/attn-check
      tests/gpu/scan-check)
echo "== build"
# ONLY_CARRY=1: just what goes into the carry (not the unit tests, fuzzers, shaders)
targets=()
if [ "${ONLY_CARRY:-0}" = 1 ]; then
    targets=("${bins[@]}" backends/cuda/tensord-backend-cuda.so
             backends/hip/nvcc-check/tensord-backend-cuda.so bench/gpu-bench)
    [ "$VULKAN" = enabled ] && targets+=(backends/vulkan/tensord-backend-vulkan.so)
fi
ninja -C "$BUILD" ${NINJA_JOBS:+-j "$NINJA_JOBS"} "${targets[@]}"

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/lib/tensord" "$STAGE/lib/cuda" "$STAGE/lib/hip-gemm"

for b in "${bins[@]}"; do
    [ -x "$BUILD/$b" ] || { echo "prepare-carry: $BUILD/$b was not built" >&2; exit 1; }
    cp "$BUILD/$b" "$STAGE/bin/"
done
cp -L "$BUILD/client/libtensord.so.0" "$STAGE/lib/"
cp "$BUILD/backends/cuda/tensord-backend-cuda.so" "$STAGE/lib/tensord/"
# the CUDA module with the HIP backend's own GEMM in place of cuBLAS (backends/hip/nvcc-check)
if [ -f "$BUILD/backends/hip/nvcc-check/tensord-backend-cuda.so" ]; then
    cp "$BUILD/backends/hip/nvcc-check/tensord-backend-cuda.so" "$STAGE/lib/hip-gemm/"
fi
[ "$VULKAN" = enabled ] && cp "$BUILD/backends/vulkan/tensord-backend-vulkan.so" "$STAGE/lib/tensord/"
strip --strip-unneeded "$STAGE"/bin/* "$STAGE/lib/libtensord.so.0" "$STAGE"/lib/tensord/*.so \
    $(ls "$STAGE"/lib/hip-gemm/*.so 2>/dev/null)

# Every library ldd resolves, minus what the GPU host provides.
host_provided='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libutil\.so|libanl\.so|libstdc\+\+\.so|libgcc_s\.so|libssl\.so|libcrypto\.so|libz\.so|libcuda\.so|libcudart\.so|libcublas|libtensord\.so)'
# (the Vulkan module's libvulkan.so.1, Debian's loader, travels this way: the GPU host has
# NVIDIA's Vulkan driver but no loader)
for f in "$STAGE"/bin/* "$STAGE/lib/libtensord.so.0" "$STAGE"/lib/tensord/*.so; do
    LD_LIBRARY_PATH="$STAGE/lib" ldd "$f" | awk '/=> \// {print $1, $3}'
    if LD_LIBRARY_PATH="$STAGE/lib" ldd "$f" | grep -q "not found"; then
        echo "prepare-carry: unresolved libraries for $f:" >&2
        LD_LIBRARY_PATH="$STAGE/lib" ldd "$f" | grep "not found" >&2
        exit 1
    fi
done | sort -u | while read -r name path; do
    [[ $name =~ $host_provided ]] && continue
    cp -L "$path" "$STAGE/lib/$name"
done
cudart=$(ldd "$STAGE/lib/tensord/tensord-backend-cuda.so" | awk '/libcudart/ {print $3}')
[ -n "$cudart" ] && cp -L "$cudart" "$STAGE/lib/cuda/"

echo "== pack"
mkdir -p carry
rm -rf carry/tensord-gpu.tar.xz carry/fashion-mnist carry/gpu-bench carry/onnx-node.tar.xz carry/fortunes.tar.xz
tar -C "$STAGE" -cf - . | xz -6 -T0 >carry/tensord-gpu.tar.xz
cp "$BUILD/bench/gpu-bench" carry/gpu-bench # for tests/gpu/bench-on-gpu-host.sh
mkdir -p carry/fashion-mnist
cp "$DATA"/{train-images-idx3-ubyte,train-labels-idx1-ubyte,t10k-images-idx3-ubyte,t10k-labels-idx1-ubyte}.gz carry/fashion-mnist/
tar -C "${ONNX_TESTDATA:-/usr/share/libonnx-testdata/data}" -cf - node | xz -6 -T0 >carry/onnx-node.tar.xz
# the text fortune-lm trains on (Debian's fortunes; tests/gpu/train-on-gpu-host.sh)
# (regular files only, not the .dat indexes: what fortune-lm reads), packed: text packs 3x
(cd /usr/share/games && find fortunes -maxdepth 1 -type f ! -name '*.dat' -print0 |
    tar --null -T - -cf - | xz -6 -T0 >"$ROOT/carry/fortunes.tar.xz")
echo "carried libraries: $(ls "$STAGE/lib" | grep -c '\.so') (+ libtensord, the module, libcudart fallback)"
du -sh carry/tensord-gpu.tar.xz carry/fashion-mnist; du -sh carry
total=$(du -sb carry | awk '{print $1}')
if [ "$total" -gt $((60 * 1024 * 1024)) ]; then
    echo "prepare-carry: carry/ is $total bytes, over the 60 MB budget" >&2
    exit 1
fi
echo "done: run tests/gpu/run-on-gpu-host.sh on the GPU host with carry/ carried"
