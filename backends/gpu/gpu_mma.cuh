/* gpu_mma.cuh — the few PTX instructions the NVIDIA tensor-core kernels share
 * (gpu_attention.cu, gpu_conv.cu): cp.async 16-byte copies into shared memory, ldmatrix
 * (plain and .trans), mma.sync m16n8k16 with f16/bf16 operands and f32 accumulation, and the
 * f32 pair -> f16x2/bf16x2 rounding; and cp.async stage copies (16 and 4 bytes) that fall
 * back to plain copies under the CPU emulation (TD_GPU_STAGE). Inline PTX (sm_80 and later;
 * the CUDA module targets sm_90).
 *
 * Why a header of its own: two kernels issue the same instructions, and their operand
 * constraints are easy to get subtly wrong; written once here. The fragment layouts these
 * instructions imply are described (and checked on the host) in gpu_attention_layout.h.
 *
 * TD_GPU_MMA is defined when these exist: nvcc for CUDA, not hipcc (TD_GPU_HIP) nor the CPU
 * emulation of tests/gpu/emu (TD_GPU_EMU), which cannot run inline PTX; a kernel file puts
 * its tensor-core code under #if defined(TD_GPU_MMA) and says no in its supports()
 * otherwise. Include after gpu_ops.cuh (TD_DEV).
 */
#ifndef TD_BACKENDS_GPU_MMA_CUH
#define TD_BACKENDS_GPU_MMA_CUH

#if !defined(TD_GPU_HIP) && !defined(TD_GPU_EMU)
#define TD_GPU_MMA 1
#endif

#if defined(TD_GPU_MMA)
#include <stdint.h>

namespace {

TD_DEV uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared; `bytes` 0 writes zeros (rows past the end). */
TD_DEV void cp_async16(uint32_t dst, const void *src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(bytes));
}
TD_DEV void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> TD_DEV void cp_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

TD_DEV void ldsm_x4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
TD_DEV void ldsm_x4_t(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

/* d += a b for one m16n8k16 tile (PTX ISA, "Matrix Fragments for mma.m16n8k16"). */
template <bool BF> TD_DEV void mma16816(float *d, const uint32_t *a, uint32_t b0, uint32_t b1);
template <> TD_DEV void mma16816<true>(float *d, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <> TD_DEV void mma16816<false>(float *d, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two f32 rounded to nearest even into one register: lo in bits 0-15 (the lower column). */
template <bool BF> TD_DEV uint32_t pack2(float lo, float hi);
template <> TD_DEV uint32_t pack2<true>(float lo, float hi)
{
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
template <> TD_DEV uint32_t pack2<false>(float lo, float hi)
{
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

} // namespace

#endif

/* Stage copies for kernels that the CPU emulation runs too (gpu_conv.cu's f32 kernel):
 * 16 or 4 bytes global -> shared by cp.async (zeros when !in; `src` must still be a valid
 * address), and its commit / wait_group. Under the emulation a plain copy now, which is
 * what a wait_group before the next barrier makes of it. */
#if defined(TD_GPU_MMA) || defined(TD_GPU_EMU)
#define TD_GPU_STAGE 1
#include <string.h>

namespace {

TD_DEV void stage16(float *dst, const float *src, bool in)
{
#if defined(TD_GPU_MMA)
    cp_async16(smem_addr(dst), src, in ? 16 : 0);
#else
    if (in) memcpy(dst, src, 16);
    else memset(dst, 0, 16);
#endif
}
TD_DEV void stage4(float *dst, const float *src, bool in)
{
#if defined(TD_GPU_MMA)
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)),
                 "l"(src), "r"(in ? 4 : 0));
#else
    *dst = in ? *src : 0.0f;
#endif
}
TD_DEV void stage_commit()
{
#if defined(TD_GPU_MMA)
    cp_commit();
#endif
}
template <int N> TD_DEV void stage_wait()
{
#if defined(TD_GPU_MMA)
    cp_wait<N>();
#endif
}

} // namespace

#endif
#endif
