#version 450
// matmul.comp — batched C[M, N] = A[M, K] B[K, N] as 16 x 16 output tiles, one workgroup
// (16 x 16 invocations) per tile and batch entry: each step stages a 16 x 16 tile of A and
// of B in shared memory and every invocation adds 16 products in k order, so each output is
// one sum in ascending k (f32 and f64 products and sums in their own type, within the dot-product bound the
// conformance suite states; integer ones wrap). Batch entries (grid z, grid-stride past the
// dispatch limit) find their A and B matrices through the broadcast batch strides of
// td__matmul_batch_strides. Variants: TA (storage), KF/KD/KI/KL/KU; f16/bf16 (HA16/HABF) widen
// to f32, as the CPU's widened sgemm, and round each output once; OF32 (with HA16/HABF) writes
// the f32 sums unrounded instead (the convolutions' intermediate products, vk_window.c).
#define NO_LOCAL_SIZE
#include "common.glsl"
#include "half.glsl"

layout(local_size_x = 16, local_size_y = 16) in;

#if defined(OF32)
layout(std430, binding = 1) buffer O { float o[]; };
#else
layout(std430, binding = 1) buffer O { TA o[]; };
#endif
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

void store(uint idx, ACC acc)
{
#if defined(OF32)
    o[idx] = acc;
#elif defined(KU)
    o[idx] = TA(acc & 255u);
#elif defined(HA16)
    o[idx] = TA(h_to_f16(acc));
#elif defined(HABF)
    o[idx] = TA(h_to_bf16(acc));
#else
    o[idx] = TA(acc);
#endif
}

// A and B of batch entry bi: their first elements, through the broadcast batch strides.
void batch_offsets(uint bi, out uint aoff, out uint boff)
{
    uint q = bi;
    aoff = P[P_BASE + 1];
    boff = P[P_BASE + 2];
    for (int d = int(P[P_I + M_BR]) - 1; d >= 0; d--) {
        uint dim = P[P_I + M_BDIMS + d], nq = q / dim, r = q - nq * dim;
        aoff += r * P[P_I + M_ASTR + d];
        boff += r * P[P_I + M_BSTR + d];
        q = nq;
    }
}

#if defined(BLK) && defined(NOSH)
// BLK NOSH, for CPU implementations such as lavapipe: the same 64 x 64 tiles and 4 x 4
// outputs an invocation, with A and B read straight from the buffers (the host's caches hold
// the tiles) and no barrier at all: lavapipe runs a barrier as a switch between coroutines,
// which cost more than the products (2-2.5x slower with the shared tiles below, on
// conv-shaped GEMMs). Rows and columns past the edge read a clamped element and are not
// stored. Same ascending-k sums as the other variants, so the same bits.
void main()
{
    const uint m = P[P_I + M_M], n = P[P_I + M_N], k = P[P_I + M_K], nb = P[P_I + M_NB];
    const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
    const uint r0 = gl_WorkGroupID.y * 64u, c0 = gl_WorkGroupID.x * 64u;
    for (uint bi = gl_WorkGroupID.z; bi < nb; bi += gl_NumWorkGroups.z) {
        uint aoff, boff;
        batch_offsets(bi, aoff, boff);
        ACC acc[4][4];
        uint ra[4], cb[4];
        for (int i = 0; i < 4; i++) {
            for (int j = 0; j < 4; j++) acc[i][j] = ACC(0);
            ra[i] = min(r0 + ty + 16u * uint(i), m - 1u);
            cb[i] = min(c0 + tx + 16u * uint(i), n - 1u);
        }
        for (uint kk = 0u; kk < k; kk++) {
            ACC av[4], bv[4];
            for (int i = 0; i < 4; i++) {
                av[i] = LD(a[aoff + ra[i] * k + kk]);
                bv[i] = LD(b[boff + kk * n + cb[i]]);
            }
            for (int i = 0; i < 4; i++)
                for (int c = 0; c < 4; c++) {
                    precise ACC p = av[i] * bv[c];
                    precise ACC s = acc[i][c] + p;
                    acc[i][c] = s;
                }
        }
        for (int i = 0; i < 4; i++) {
            const uint row = r0 + ty + 16u * uint(i);
            for (int c = 0; c < 4; c++) {
                const uint col = c0 + tx + 16u * uint(c);
                if (row < m && col < n) store(bi * m * n + row * n + col + P[P_BASE], acc[i][c]);
            }
        }
    }
}
#elif defined(BLK)
// BLK: 64 x 64 output tiles, each invocation 4 x 4 outputs (rows ty + 16 i, columns tx + 16 j)
// in registers: 16 k steps of 16 products per output between two barriers instead of 1,
// which is what a CPU implementation such as lavapipe (barriers are coroutine switches)
// and a GPU (shared-memory traffic per product) both pay for. Each output is still one
// ascending-k sum of separately rounded products, so the bits are the 16 x 16 shader's.
// A's tile is stored transposed, k-major; a 32-bit row is padded to 65 words so that the 16
// invocations storing one k column hit different banks (64-bit elements keep 64: two 16 x 65
// tiles of doubles would pass the 16 KiB of shared memory every device has)
#if defined(KD) || defined(KL)
#define SA_W 64
#else
#define SA_W 65
#endif
shared ACC sa[16][SA_W];
shared ACC sb[16][64];

void main()
{
    const uint m = P[P_I + M_M], n = P[P_I + M_N], k = P[P_I + M_K], nb = P[P_I + M_NB];
    const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, t = ty * 16u + tx;
    const uint r0 = gl_WorkGroupID.y * 64u, c0 = gl_WorkGroupID.x * 64u;
    for (uint bi = gl_WorkGroupID.z; bi < nb; bi += gl_NumWorkGroups.z) {
        uint aoff, boff;
        batch_offsets(bi, aoff, boff);
        ACC acc[4][4];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) acc[i][j] = ACC(0);
        for (uint k0 = 0u; k0 < k; k0 += 16u) {
            for (uint e = 0u; e < 4u; e++) {
                const uint id = t + 256u * e;
                const uint ar = id / 16u, ak = id % 16u; // A: 64 rows of 16
                const uint bk = id / 64u, bc = id % 64u; // B: 16 rows of 64
                sa[ak][ar] = (r0 + ar < m && k0 + ak < k) ? LD(a[aoff + (r0 + ar) * k + k0 + ak])
                                                          : ACC(0);
                sb[bk][bc] = (k0 + bk < k && c0 + bc < n) ? LD(b[boff + (k0 + bk) * n + c0 + bc])
                                                          : ACC(0);
            }
            barrier();
            const uint kend = min(16u, k - k0);
            for (uint j = 0u; j < kend; j++) {
                ACC av[4], bv[4];
                for (int i = 0; i < 4; i++) {
                    av[i] = sa[j][ty + 16u * uint(i)];
                    bv[i] = sb[j][tx + 16u * uint(i)];
                }
                for (int i = 0; i < 4; i++)
                    for (int c = 0; c < 4; c++) {
                        precise ACC p = av[i] * bv[c];
                        precise ACC s = acc[i][c] + p;
                        acc[i][c] = s;
                    }
            }
            barrier();
        }
        for (int i = 0; i < 4; i++) {
            const uint row = r0 + ty + 16u * uint(i);
            for (int c = 0; c < 4; c++) {
                const uint col = c0 + tx + 16u * uint(c);
                if (row < m && col < n) store(bi * m * n + row * n + col + P[P_BASE], acc[i][c]);
            }
        }
    }
}
#else
shared ACC ta[16][16];
shared ACC tb[16][16];

void main()
{
    const uint m = P[P_I + M_M], n = P[P_I + M_N], k = P[P_I + M_K], nb = P[P_I + M_NB];
    const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
    const uint row = gl_WorkGroupID.y * 16u + ty, col = gl_WorkGroupID.x * 16u + tx;
    for (uint bi = gl_WorkGroupID.z; bi < nb; bi += gl_NumWorkGroups.z) {
        uint aoff, boff;
        batch_offsets(bi, aoff, boff);
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
        if (row < m && col < n) store(P[P_BASE] + bi * m * n + row * n + col, acc);
    }
}
#endif
