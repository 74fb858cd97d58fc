#version 450
// matmul.comp — batched C[M, N] = A[M, K] B[K, N] as 16 x 16 output tiles, one workgroup
// (16 x 16 invocations) per tile and batch entry: each step stages a 16 x 16 tile of A and
// of B in shared memory and every invocation adds 16 products in k order, so each output is
// one sum in ascending k (f32 and f64 products and sums in their own type, within the dot-product bound the
// conformance suite states; integer ones wrap). Batch entries (grid z, grid-stride past the
// dispatch limit) find their A and B matrices through the broadcast batch strides of
// td__matmul_batch_strides. Variants: TA (storage), KF/KD/KI/KL/KU; f16/bf16 (HA16/HABF) widen
// to f32, as the CPU's widened sgemm, and round each output once.
#define NO_LOCAL_SIZE
#include "common.glsl"
#include "half.glsl"

layout(local_size_x = 16, local_size_y = 16) in;

layout(std430, binding = 1) buffer O { TA o[]; };
layout(std430, binding = 2) readonly buffer A { TA a[]; };
layout(std430, binding = 3) readonly buffer B { TA b[]; };

#define M_M 0
#define M_N 1
#define M_K 2
#define M_NB 3
#define M_BR 4
#define M_BDIMS 5
#define M_ASTR 11
#define M_BSTR 17

#if defined(KF)
#define ACC float
#define LD(v) float(LDA(v))
#elif defined(KD)
#define ACC double
#define LD(v) double(v)
#elif defined(KL)
#define ACC uint64_t
#define LD(v) uint64_t(v)
#else
#define ACC uint
#define LD(v) uint(v)
#endif

shared ACC ta[16][16];
shared ACC tb[16][16];

void main()
{
    const uint m = P[P_I + M_M], n = P[P_I + M_N], k = P[P_I + M_K], nb = P[P_I + M_NB];
    const uint br = P[P_I + M_BR];
    const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
    const uint row = gl_WorkGroupID.y * 16u + ty, col = gl_WorkGroupID.x * 16u + tx;
    for (uint bi = gl_WorkGroupID.z; bi < nb; bi += gl_NumWorkGroups.z) {
        uint q = bi, aoff = P[P_BASE + 1], boff = P[P_BASE + 2];
        for (int d = int(br) - 1; d >= 0; d--) {
            uint dim = P[P_I + M_BDIMS + d], nq = q / dim, r = q - nq * dim;
            aoff += r * P[P_I + M_ASTR + d];
            boff += r * P[P_I + M_BSTR + d];
            q = nq;
        }
        precise ACC acc = ACC(0);
        for (uint k0 = 0u; k0 < k; k0 += 16u) {
            uint ka = k0 + tx, kb = k0 + ty;
            ta[ty][tx] = (row < m && ka < k) ? LD(a[aoff + row * k + ka]) : ACC(0);
            tb[ty][tx] = (kb < k && col < n) ? LD(b[boff + kb * n + col]) : ACC(0);
            barrier();
            uint kend = min(16u, k - k0);
            for (uint j = 0u; j < kend; j++) {
                precise ACC p = ta[ty][j] * tb[j][tx];
                acc = acc + p;
            }
            barrier();
        }
        if (row < m && col < n) {
#if defined(KU)
            o[P[P_BASE] + bi * m * n + row * n + col] = TA(acc & 255u);
#elif defined(HA16)
            o[P[P_BASE] + bi * m * n + row * n + col] = TA(h_to_f16(acc));
#elif defined(HABF)
            o[P[P_BASE] + bi * m * n + row * n + col] = TA(h_to_bf16(acc));
#else
            o[P[P_BASE] + bi * m * n + row * n + col] = TA(acc);
#endif
        }
    }
}
