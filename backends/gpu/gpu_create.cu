/* gpu_create.cu — ops that make a tensor from attributes alone: FULL, ARANGE,
 * RAND_UNIFORM, RAND_NORMAL, the random ops BERNOULLI BERNOULLI_SCALAR RANDINT TRUNC_NORMAL
 * (RANDPERM's sort is in gpu_sort.cu); and the fill helper reductions use for empty folds.
 *
 * The random ops follow engine/philox.h's (seed, index) mapping: one thread per Philox
 * block writes the 4 (f32, f16, bf16) or 2 (f64) elements that block yields, so the tensor
 * does not depend on the launch shape. The module is compiled with -fmad=false: `low + (high - low)
 * * u` and ARANGE's `start + i * step` must round twice, as on the CPU, not fuse into one
 * FMA, for uniform values and ARANGE to agree bit for bit. Normal values go through the
 * device's log/sqrt/sin/cos (a few ulps from glibc's).
 */
#include "backends/gpu/gpu_ops.cuh"
#include "engine/convert.h"
#include "engine/philox.h"
#include <string.h>

namespace {

template <typename T> __global__ void k_fill(T *out, int64_t n, T v)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = v;
}

__global__ void k_arange(uint32_t dt, void *out, int64_t n, double start, double step)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        td_store_double(dt, out, i, start + (double)i * step);
}

/* One thread per Philox block b; nb blocks cover n elements. */
__global__ void k_uniform_f32(float *out, int64_t n, uint64_t seed, double low, double high)
{
    int64_t nb = (n + 3) / 4;
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < nb;
         b += (int64_t)gridDim.x * blockDim.x) {
        uint32_t w[4];
        td__philox_block(seed, (uint64_t)b, w);
        for (int j = 0; j < 4; j++) {
            int64_t i = b * 4 + j;
            if (i < n) out[i] = td__philox_uniform_f32_from(w, (uint64_t)i, low, high);
        }
    }
}

__global__ void k_uniform_f64(double *out, int64_t n, uint64_t seed, double low, double high)
{
    int64_t nb = (n + 1) / 2;
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < nb;
         b += (int64_t)gridDim.x * blockDim.x) {
        uint32_t w[4];
        td__philox_block(seed, (uint64_t)b, w);
        for (int j = 0; j < 2; j++) {
            int64_t i = b * 2 + j;
            if (i < n) out[i] = td__philox_uniform_f64_from(w, (uint64_t)i, low, high);
        }
    }
}

__global__ void k_normal_f32(float *out, int64_t n, uint64_t seed, double mean, double stddev)
{
    int64_t nb = (n + 3) / 4;
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < nb;
         b += (int64_t)gridDim.x * blockDim.x) {
        uint32_t w[4];
        td__philox_block(seed, (uint64_t)b, w);
        for (unsigned q = 0; q < 2; q++) {
            int64_t i = b * 4 + 2 * q;
            if (i >= n) break;
            double z[2];
            td__philox_normal_f32_pair(w, q, z);
            out[i] = (float)(mean + stddev * z[0]);
            if (i + 1 < n) out[i + 1] = (float)(mean + stddev * z[1]);
        }
    }
}

__global__ void k_normal_f64(double *out, int64_t n, uint64_t seed, double mean, double stddev)
{
    int64_t nb = (n + 1) / 2;
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < nb;
         b += (int64_t)gridDim.x * blockDim.x) {
        uint32_t w[4];
        td__philox_block(seed, (uint64_t)b, w);
        double z[2];
        td__philox_normal_f64_pair(w, z);
        out[b * 2] = mean + stddev * z[0];
        if (b * 2 + 1 < n) out[b * 2 + 1] = mean + stddev * z[1];
    }
}

/* f16/bf16 draws: the f32 mapping's double value rounded once to the dtype (philox.h), so
 * the bits equal the CPU's. */
__device__ inline uint16_t round_half(bool bf16, double v)
{
    return bf16 ? td__f64_to_bf16(v) : td__f64_to_f16(v);
}

__global__ void k_uniform_half(uint16_t *out, int64_t n, bool bf16, uint64_t seed, double low,
                               double high)
{
    int64_t nb = (n + 3) / 4;
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < nb;
         b += (int64_t)gridDim.x * blockDim.x) {
        uint32_t w[4];
        td__philox_block(seed, (uint64_t)b, w);
        for (int j = 0; j < 4; j++) {
            int64_t i = b * 4 + j;
            if (i < n)
                out[i] = round_half(bf16, td__philox_uniform_u24_from(w, (uint64_t)i, low, high));
        }
    }
}

__global__ void k_normal_half(uint16_t *out, int64_t n, bool bf16, uint64_t seed, double mean,
                              double stddev)
{
    int64_t nb = (n + 3) / 4;
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < nb;
         b += (int64_t)gridDim.x * blockDim.x) {
        uint32_t w[4];
        td__philox_block(seed, (uint64_t)b, w);
        for (unsigned q = 0; q < 2; q++) {
            int64_t i = b * 4 + 2 * q;
            if (i >= n) break;
            double z[2];
            td__philox_normal_f32_pair(w, q, z);
            out[i] = round_half(bf16, mean + stddev * z[0]);
            if (i + 1 < n) out[i + 1] = round_half(bf16, mean + stddev * z[1]);
        }
    }
}

/* The random ops of issue 13 (engine/philox.h), element for element backends/cpu/
 * cpu_random.c's loops: one thread per Philox block. */
__device__ inline double load_float(uint32_t dt, const void *p, int64_t i)
{
    switch (dt) {
    case TD_F32: return ((const float *)p)[i];
    case TD_F64: return ((const double *)p)[i];
    case TD_F16: return td__f16_to_f32(((const uint16_t *)p)[i]);
    default: return td__bf16_to_f32(((const uint16_t *)p)[i]);
    }
}

__global__ void k_bernoulli(uint32_t dt, void *out, int64_t n, uint64_t seed, uint32_t pdt,
                            const void *p, double ps)
{
    int64_t nb = (n + 3) / 4;
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < nb;
         b += (int64_t)gridDim.x * blockDim.x) {
        uint32_t w[4];
        td__philox_block(seed, (uint64_t)b, w);
        for (int j = 0; j < 4; j++) {
            int64_t i = b * 4 + j;
            if (i >= n) break;
            const double pv = p != NULL ? load_float(pdt, p, i) : ps;
            td_store_double(dt, out, i, td__philox_bernoulli(w[j], pv) ? 1.0 : 0.0);
        }
    }
}

__global__ void k_randint(uint32_t dt, void *out, int64_t n, uint64_t seed, int64_t low,
                          int64_t high)
{
    int64_t nb = (n + 1) / 2;
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < nb;
         b += (int64_t)gridDim.x * blockDim.x) {
        uint32_t w[4];
        td__philox_block(seed, (uint64_t)b, w);
        for (int j = 0; j < 2; j++) {
            int64_t i = b * 2 + j;
            if (i >= n) break;
            const int64_t v = td__philox_randint(td__philox_draw64(w, (uint64_t)i), low, high);
            switch (dt) {
            case TD_I8: ((int8_t *)out)[i] = (int8_t)v; break;
            case TD_I16: ((int16_t *)out)[i] = (int16_t)v; break;
            case TD_I32: ((int32_t *)out)[i] = (int32_t)v; break;
            case TD_U8: ((uint8_t *)out)[i] = (uint8_t)v; break;
            default: ((int64_t *)out)[i] = v; break;
            }
        }
    }
}

__global__ void k_truncnorm(uint32_t dt, void *out, int64_t n, uint64_t seed, td__truncnorm tn)
{
    int64_t nb = (n + 1) / 2;
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < nb;
         b += (int64_t)gridDim.x * blockDim.x) {
        uint32_t w[4];
        td__philox_block(seed, (uint64_t)b, w);
        for (int j = 0; j < 2; j++) {
            int64_t i = b * 2 + j;
            if (i >= n) break;
            td_store_double(dt, out, i, td__truncnorm_value(&tn, td__philox_draw64(w, (uint64_t)i)));
        }
    }
}

} // namespace

/* Whether this module holds machine code or PTX the current device can run (the driver
 * refuses, e.g., sm_90 code on an sm_80 GPU): asked once when a device is opened. */
extern "C" gpuError_t td__gpu_probe(void)
{
    gpuFuncAttributes attr;
    return gpuFuncGetAttributes(&attr, (const void *)k_fill<uint32_t>);
}

extern "C" td_status td__gpu_fill(const td__gpu_exec *x, uint32_t dt, void *data, int64_t n,
                                   double v)
{
    if (n == 0) return TD_OK;
    unsigned blocks = td__gpu_blocks(n, TD_GPU_THREADS);
    gpuStream_t s = x->st->s;
    switch (dt) {
    case TD_F32: {
        float f = (float)v;
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        k_fill<uint32_t><<<blocks, TD_GPU_THREADS, 0, s>>>((uint32_t *)data, n, bits);
        break;
    }
    case TD_F64: {
        uint64_t bits;
        memcpy(&bits, &v, sizeof bits);
        k_fill<uint64_t><<<blocks, TD_GPU_THREADS, 0, s>>>((uint64_t *)data, n, bits);
        break;
    }
    case TD_I32:
        k_fill<int32_t><<<blocks, TD_GPU_THREADS, 0, s>>>((int32_t *)data, n, td_sat_i32(v));
        break;
    case TD_I64:
        k_fill<int64_t><<<blocks, TD_GPU_THREADS, 0, s>>>((int64_t *)data, n, td_sat_i64(v));
        break;
    case TD_F16: case TD_BF16: case TD_I16: {
        uint16_t bits = dt == TD_F16    ? td__f64_to_f16(v)
                        : dt == TD_BF16 ? td__f64_to_bf16(v)
                                        : (uint16_t)td__sat_i16(v);
        k_fill<uint16_t><<<blocks, TD_GPU_THREADS, 0, s>>>((uint16_t *)data, n, bits);
        break;
    }
    case TD_I8:
        return td__gpu_check(x, gpuMemsetAsync(data, (uint8_t)td__sat_i8(v), (size_t)n, s), "fill");
    case TD_U8: case TD_BOOL: {
        int byte = dt == TD_BOOL ? (v != 0.0) : td_sat_u8(v);
        return td__gpu_check(x, gpuMemsetAsync(data, byte, (size_t)n, s), "fill");
    }
    default:
        return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": fill of dtype %u", dt);
    }
    return td__gpu_launched(x, "fill kernel");
}

extern "C" td_status td__gpu_exec_create(const td__gpu_exec *x, const td__op *op,
                                          const td__view *in, const td__view *out)
{
    const int64_t n = td__gpu_nelem(&out->desc);
    const uint32_t dt = out->desc.dtype;
    if (n == 0) return TD_OK;
    gpuStream_t s = x->st->s;
    const double a = op->fattrs[0], b = op->fattrs[1];
    switch (op->opcode) {
    case TD_OP_FULL:
        return td__gpu_fill(x, dt, out->data, n, a);
    case TD_OP_ARANGE:
        if (td__gpu_dtype_size(dt) == 0) break;
        k_arange<<<td__gpu_blocks(n, TD_GPU_THREADS), TD_GPU_THREADS, 0, s>>>(dt, out->data,
                                                                                n, a, b);
        return td__gpu_launched(x, "arange kernel");
    case TD_OP_RAND_UNIFORM:
        if (dt == TD_F32) {
            k_uniform_f32<<<td__gpu_blocks((n + 3) / 4, TD_GPU_THREADS), TD_GPU_THREADS, 0,
                            s>>>((float *)out->data, n, op->seed, a, b);
        } else if (dt == TD_F64) {
            k_uniform_f64<<<td__gpu_blocks((n + 1) / 2, TD_GPU_THREADS), TD_GPU_THREADS, 0,
                            s>>>((double *)out->data, n, op->seed, a, b);
        } else if (dt == TD_F16 || dt == TD_BF16) {
            k_uniform_half<<<td__gpu_blocks((n + 3) / 4, TD_GPU_THREADS), TD_GPU_THREADS, 0,
                             s>>>((uint16_t *)out->data, n, dt == TD_BF16, op->seed, a, b);
        } else {
            break;
        }
        return td__gpu_launched(x, "rand_uniform kernel");
    case TD_OP_RAND_NORMAL:
        if (dt == TD_F32) {
            k_normal_f32<<<td__gpu_blocks((n + 3) / 4, TD_GPU_THREADS), TD_GPU_THREADS, 0,
                           s>>>((float *)out->data, n, op->seed, a, b);
        } else if (dt == TD_F64) {
            k_normal_f64<<<td__gpu_blocks((n + 1) / 2, TD_GPU_THREADS), TD_GPU_THREADS, 0,
                           s>>>((double *)out->data, n, op->seed, a, b);
        } else if (dt == TD_F16 || dt == TD_BF16) {
            k_normal_half<<<td__gpu_blocks((n + 3) / 4, TD_GPU_THREADS), TD_GPU_THREADS, 0,
                            s>>>((uint16_t *)out->data, n, dt == TD_BF16, op->seed, a, b);
        } else {
            break;
        }
        return td__gpu_launched(x, "rand_normal kernel");
    case TD_OP_BERNOULLI:
    case TD_OP_BERNOULLI_SCALAR: {
        const bool tensor = op->opcode == TD_OP_BERNOULLI;
        k_bernoulli<<<td__gpu_blocks((n + 3) / 4, TD_GPU_THREADS), TD_GPU_THREADS, 0, s>>>(
            dt, out->data, n, op->seed, tensor ? in[0].desc.dtype : 0u,
            tensor ? in[0].data : NULL, a);
        return td__gpu_launched(x, "bernoulli kernel");
    }
    case TD_OP_RANDINT:
        k_randint<<<td__gpu_blocks((n + 1) / 2, TD_GPU_THREADS), TD_GPU_THREADS, 0, s>>>(
            dt, out->data, n, op->seed, op->iattrs[0], op->iattrs[1]);
        return td__gpu_launched(x, "randint kernel");
    case TD_OP_TRUNC_NORMAL: {
        /* the per-op constants on the host: the same IEEE operations give the same bits */
        const td__truncnorm tn = td__truncnorm_init(a, b, op->fattrs[2], op->fattrs[3]);
        k_truncnorm<<<td__gpu_blocks((n + 1) / 2, TD_GPU_THREADS), TD_GPU_THREADS, 0, s>>>(
            dt, out->data, n, op->seed, tn);
        return td__gpu_launched(x, "trunc_normal kernel");
    }
    case TD_OP_RANDPERM:
        return td__gpu_randperm(x, op->seed, n, out->data);
    }
    return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": no create kernel for opcode %u dtype %u",
                         op->opcode, dt);
}
