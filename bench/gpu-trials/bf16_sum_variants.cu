/* bf16_sum_variants.cu — a trial, not a product path: which fold order lets a deterministic
 * bf16 sum of 1 GiB (2^29 elements) reach PyTorch's speed on one GPU. Each variant keeps
 * gpu_reduce.cu's partition (blocks of 256 lanes, groups of 4 adjacent elements, lane ty
 * takes groups ty, ty + 256, ... of its block's chunk, lanes combined along a fixed tree,
 * one partial per block combined by a second kernel) and changes only how a lane folds:
 *   seq      each element widened to f32, then to double, added to one double (the kernel
 *            of 2026-12-01)
 *   pairf32  a group's two pairs added in f32, the pair sums added in double
 *   tree64   a group summed as a double tree ((v0 + v1) + (v2 + v3)), then added
 *   grpf32   a group summed in f32 in order, the group sum added in double
 *   acc2     seq, but alternate groups go to two double accumulators, combined at the end
 *   f32acc   reference of what PyTorch does: one f32 accumulator (not deterministic-order
 *            promised here, only a speed ceiling)
 *   copy     read-only bandwidth: each lane sums the raw bits as integers
 * Build: nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -o bf16-sum-variants bf16_sum_variants.cu
 * Prints the median of 20 timed runs per variant in GB/s and each result's value. */
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <vector>
#include <cuda_runtime.h>

#define T 256
#define G 4

__device__ __forceinline__ float bf(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

struct alignas(8) grp { uint16_t v[G]; };

template <int V> __device__ __forceinline__ void fold(double &a, double &b, float &fa, grp g, int k)
{
    if (V == 0) { for (int q = 0; q < G; q++) a += (double)bf(g.v[q]); }
    else if (V == 1) { a += (double)(bf(g.v[0]) + bf(g.v[1])) + (double)(bf(g.v[2]) + bf(g.v[3])); }
    else if (V == 2) { a += ((double)bf(g.v[0]) + (double)bf(g.v[1])) + ((double)bf(g.v[2]) + (double)bf(g.v[3])); }
    else if (V == 3) { float s = bf(g.v[0]); s += bf(g.v[1]); s += bf(g.v[2]); s += bf(g.v[3]); a += (double)s; }
    else if (V == 4) { double s = 0; for (int q = 0; q < G; q++) s += (double)bf(g.v[q]); if (k & 1) b += s; else a += s; }
    else if (V == 5) { for (int q = 0; q < G; q++) fa += bf(g.v[q]); }
    else { for (int q = 0; q < G; q++) a += (double)g.v[q]; }
}

template <int V>
__global__ void __launch_bounds__(T, 6) k_sum(const uint16_t *x, int64_t n, int64_t chunk, double *partial)
{
    __shared__ double lanes[T];
    const int ty = threadIdx.x;
    const int64_t r0 = (int64_t)blockIdx.x * chunk;
    const int64_t r1 = r0 + chunk < n ? r0 + chunk : n;
    double a = 0, b = 0;
    float fa = 0;
    int k = 0;
    int64_t g0 = r0 + (int64_t)ty * G;
#pragma unroll 4
    for (; g0 + G <= r1; g0 += (int64_t)T * G, k++) fold<V>(a, b, fa, *(const grp *)(x + g0), k);
    lanes[ty] = a + b + (double)fa;
    __syncthreads();
    for (int s = T / 2; s > 0; s /= 2) {
        if (ty < s) lanes[ty] += lanes[ty + s];
        __syncthreads();
    }
    if (ty == 0) partial[blockIdx.x] = lanes[0];
}

__global__ void k_partials(const double *p, int g, double *out)
{
    __shared__ double lanes[1024];
    const int t = threadIdx.x;
    double a = 0;
    for (int j = t; j < g; j += 1024) a += p[j];
    lanes[t] = a;
    __syncthreads();
    for (int s = 512; s > 0; s /= 2) {
        if (t < s) lanes[t] += lanes[t + s];
        __syncthreads();
    }
    if (t == 0) *out = lanes[0];
}

template <int V> double run(const uint16_t *x, int64_t n, int blocks, double *partial, double *out, double *val)
{
    int64_t chunk = (n + blocks - 1) / blocks;
    chunk = (chunk + G - 1) / G * G;
    int g = (int)((n + chunk - 1) / chunk);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<float> ms;
    for (int it = 0; it < 23; it++) {
        cudaEventRecord(e0);
        k_sum<V><<<g, T>>>(x, n, chunk, partial);
        k_partials<<<1, 1024>>>(partial, g, out);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float t;
        cudaEventElapsedTime(&t, e0, e1);
        if (it >= 3) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    cudaMemcpy(val, out, sizeof(double), cudaMemcpyDeviceToHost);
    return (double)n * 2 / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

int main()
{
    const int64_t n = (int64_t)1 << 29;
    std::vector<uint16_t> h(n);
    uint64_t s = 42;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        float f = (float)((s >> 40) & 0xffffff) / 16777216.0f - 0.5f;
        h[i] = (uint16_t)(__builtin_bit_cast(uint32_t, f) >> 16);
    }
    uint16_t *x;
    double *partial, *out;
    cudaMalloc(&x, n * 2);
    cudaMalloc(&partial, 1 << 20);
    cudaMalloc(&out, 8);
    cudaMemcpy(x, h.data(), n * 2, cudaMemcpyHostToDevice);
    const char *names[] = {"seq", "pairf32", "tree64", "grpf32", "acc2", "f32acc", "copy"};
    for (int blocks : {16384, 4096, 1056}) {
        for (int v = 0; v < 7; v++) {
            double val = 0, gbs = 0;
            switch (v) {
            case 0: gbs = run<0>(x, n, blocks, partial, out, &val); break;
            case 1: gbs = run<1>(x, n, blocks, partial, out, &val); break;
            case 2: gbs = run<2>(x, n, blocks, partial, out, &val); break;
            case 3: gbs = run<3>(x, n, blocks, partial, out, &val); break;
            case 4: gbs = run<4>(x, n, blocks, partial, out, &val); break;
            case 5: gbs = run<5>(x, n, blocks, partial, out, &val); break;
            case 6: gbs = run<6>(x, n, blocks, partial, out, &val); break;
            }
            printf("blocks %6d  %-8s %7.0f GB/s  value %.17g\n", blocks, names[v], gbs, val);
        }
    }
    cudaError_t e = cudaGetLastError();
    printf("cuda: %s\n", cudaGetErrorString(e));
    return e != cudaSuccess;
}
