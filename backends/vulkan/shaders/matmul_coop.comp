#version 450
// matmul_coop.comp — batched f16 MATMUL C[M, N] = A[M, K] B[K, N] on cooperative matrices
// (VK_NV_cooperative_matrix, GL_NV_cooperative_matrix: NVIDIA's tensor cores). f16 inputs,
// f32 accumulators, each output rounded once to f16 by half.glsl's h_to_f16 (the CPU's
// rounding). vk_device.c picks this path only on a device that lists the matching
// cooperative matrix shape (CM x CN x CK, A and B f16, C and D f32, subgroup scope), has
// shaderFloat16 and 32-invocation subgroups; every other device, and every other dtype (bf16
// included: the NV extension has no bf16 type), runs matmul.comp.
//
// Tiling: one workgroup of 4 subgroups (128 invocations) per 128 x 128 block of C and batch
// entry; each subgroup owns a 64 x 64 quarter as (64 / CM) x (64 / CN) f32 accumulators.
// Per 32-deep step of K the workgroup stages A's 128 x 32 and B's 32 x 128 tiles in shared
// memory as f16 bits (rows padded by 16 bytes so that the matrix loads' rows spread over all
// banks), zeros where the tile passes M, N or K, so any shape works; the next step's tiles are
// read from global memory into registers while the tensor cores work on this one. Reads are
// 16 bytes (8 halves) at a time when A's and B's first elements and K and N are multiples of
// 8 elements, element by element otherwise. C goes through a 16 x 16 f32 staging tile per
// subgroup so that every output is rounded by h_to_f16 and stored only inside M x N. OF32:
// the f32 sums are stored unrounded instead (the convolutions' intermediate products,
// vk_window.c, as matmul.comp's OF32).
//
// Accuracy: not the bits of matmul.comp or of the CPU — the tensor cores add in their own
// order (blocks of products added at once, aligned to the largest exponent and truncated
// rather than rounded: Fasi, Higham, Mikaitis, Pranesh, "Numerical behavior of NVIDIA tensor
// cores", PeerJ Comput. Sci. 7:e330, 2021). Products of f16 values are exact in f32; the sums
// are held to the conformance suite's matmul bound (tests/unit/backends/conformance.c,
// TOL_MATMUL): |got - want| <= 2 K 2^-24 (|A| @ |B|) + 1 ulp of f16, the bound the CUDA
// backend's cuBLAS f16 tensor-core GEMM meets on the same hardware. A model of the hardware's
// sums (tests/unit/backends/coop_error_model.py: 16 products and the accumulator aligned and
// truncated to 24 bits per step) errs by at most 0.96 K 2^-24 (|A| @ |B|) on the suite's
// data (K = 4; 0.02 from K = 257 on, where errors of both signs cancel) and 0.35 on
// all-positive data up to K = 4096 (errors all one way); the CPU's f32 sum adds at most
// K 2^-24 (|A| @ |B|) (in practice far less), so the 2 K bound holds with margin left for a
// hardware that truncates somewhat differently from the model.
// The same inputs give the same bits run after run (fixed tiling, no atomics).
//
// EMU (tests only): the same tiles, staging and loop structure, with each cooperative matrix
// operation done element by element from the same shared-memory elements and strides, by
// invocation 32 s + l of "subgroup" s (elements l, l + 32, ... of each matrix), so that a device
// without cooperative matrices (lavapipe) runs all of this file's indexing: edges, the 16-byte
// and the element reads, batch strides, the staged stores (TENSORD_TEST_VULKAN_COOP_EMU,
// vk_device.c; the meson tests conformance-vulkan-coop-emu-*).
#if defined(EMU)
#extension GL_EXT_control_flow_attributes : require
#else
#extension GL_KHR_memory_scope_semantics : require
#extension GL_NV_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#endif
#define NO_LOCAL_SIZE
#include "common.glsl"
#include "half.glsl"

layout(local_size_x = 128) in;

#if defined(OF32)
layout(std430, binding = 1) buffer O { float o[]; };
#else
layout(std430, binding = 1) buffer O { uint16_t o[]; };
#endif
layout(std430, binding = 2) readonly buffer A { uint16_t a[]; };
layout(std430, binding = 3) readonly buffer B { uint16_t b[]; };
// the same bindings, 8 halves at a time (the aligned case)
layout(std430, binding = 2) readonly buffer A8 { uvec4 a8[]; };
layout(std430, binding = 3) readonly buffer B8 { uvec4 b8[]; };

// the cooperative matrix shape (a variant define each): 16 x 16 x 16, 16 x 8 x 16, 16 x 8 x 8
#if !defined(CM)
#define CM 16
#define CN 16
#define CK 16
#endif

// matmul.comp's parameter words
#define M_M 0
#define M_N 1
#define M_K 2
#define M_NB 3
#define M_BR 4
#define M_BDIMS 5
#define M_ASTR 11
#define M_BSTR 17

#define BM 128u
#define BN 128u
#define BK 32u
#define WM 64u
#define WN 64u
#define TM (64 / CM)
#define TN (64 / CN)
#define SA_S 5u  // uvec4 a row of A's tile: 32 halves + 8 of padding
#define SB_S 17u // uvec4 a row of B's tile: 128 halves + 8 of padding

shared uvec4 sa[BM * SA_S];
shared uvec4 sb[BK * SB_S];
shared float so[4 * CM * CN];

// the shared-memory element (uvec4 index) where the A matrix i, or the B matrix j, of this
// subgroup's quarter starts at depth kk of the tile; rows SA_S and SB_S apart
#define A_ELEM(i, kk) ((wr * WM + uint((i) * CM)) * SA_S + (kk) / 8u)
#define B_ELEM(j, kk) ((kk) * SB_S + (wc * WN + uint((j) * CN)) / 8u)

#if defined(EMU)
#define NE (CM * CN / 32)
float half_at(uvec4 w, uint h) { return h_from_f16((w[h / 2u] >> (16u * (h % 2u))) & 0xffffu); }
#endif

// A and B of batch entry bi: their first elements, through the broadcast batch strides
// (as matmul.comp's batch_offsets).
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

uint pair(uint lo, uint hi) { return lo | (hi << 16); }

// A[row][kg .. kg + 7] as bits, zeros past M or K
uvec4 load_a(uint aoff, uint row, uint kg, uint m, uint k, bool vec)
{
    if (row >= m || kg >= k) return uvec4(0u);
    const uint e = aoff + row * k + kg;
    if (vec) return a8[e / 8u];
    uint h[8];
    for (uint i = 0u; i < 8u; i++) h[i] = kg + i < k ? uint(a[e + i]) : 0u;
    return uvec4(pair(h[0], h[1]), pair(h[2], h[3]), pair(h[4], h[5]), pair(h[6], h[7]));
}

// B[kr][cg .. cg + 7] as bits, zeros past K or N
uvec4 load_b(uint boff, uint kr, uint cg, uint n, uint k, bool vec)
{
    if (kr >= k || cg >= n) return uvec4(0u);
    const uint e = boff + kr * n + cg;
    if (vec) return b8[e / 8u];
    uint h[8];
    for (uint i = 0u; i < 8u; i++) h[i] = cg + i < n ? uint(b[e + i]) : 0u;
    return uvec4(pair(h[0], h[1]), pair(h[2], h[3]), pair(h[4], h[5]), pair(h[6], h[7]));
}

void main()
{
    const uint m = P[P_I + M_M], n = P[P_I + M_N], k = P[P_I + M_K], nb = P[P_I + M_NB];
#if defined(EMU)
    const uint t = gl_LocalInvocationID.x, sg = t / 32u, lane = t % 32u, sgsize = 32u;
#else
    const uint t = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    const uint sgsize = gl_SubgroupSize;
#endif
    const uint wr = sg / 2u, wc = sg % 2u; // this subgroup's quarter of the block
    const uint r0 = gl_WorkGroupID.y * BM, c0 = gl_WorkGroupID.x * BN;
    for (uint bi = gl_WorkGroupID.z; bi < nb; bi += gl_NumWorkGroups.z) {
        uint aoff, boff;
        batch_offsets(bi, aoff, boff);
        // batch strides are multiples of M K and K N, so these decide for every entry
        const bool vec = aoff % 8u == 0u && boff % 8u == 0u && k % 8u == 0u && n % 8u == 0u;
#if defined(EMU)
        float acc[TM][TN][NE];
        for (int i = 0; i < TM; i++)
            for (int j = 0; j < TN; j++)
                for (int q = 0; q < NE; q++) acc[i][j][q] = 0.0;
#else
        fcoopmatNV<32, gl_ScopeSubgroup, CM, CN> acc[TM][TN];
        for (int i = 0; i < TM; i++)
            for (int j = 0; j < TN; j++) acc[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, CM, CN>(0.0);
#endif
        // 512 uvec4 of each tile, 4 an invocation: A as 128 rows of 4, B as 32 rows of 16
        uvec4 ra[4], rb[4];
        for (uint e = 0u; e < 4u; e++) {
            const uint id = t + 128u * e;
            ra[e] = load_a(aoff, r0 + id / 4u, (id % 4u) * 8u, m, k, vec);
            rb[e] = load_b(boff, id / 16u, c0 + (id % 16u) * 8u, n, k, vec);
        }
        for (uint k0 = 0u; k0 < k; k0 += BK) {
            barrier(); // the previous step's matrix loads are done with the tiles
            for (uint e = 0u; e < 4u; e++) {
                const uint id = t + 128u * e;
                sa[(id / 4u) * SA_S + id % 4u] = ra[e];
                sb[(id / 16u) * SB_S + id % 16u] = rb[e];
            }
            barrier();
            if (k0 + BK < k) {
                for (uint e = 0u; e < 4u; e++) {
                    const uint id = t + 128u * e;
                    ra[e] = load_a(aoff, r0 + id / 4u, k0 + BK + (id % 4u) * 8u, m, k, vec);
                    rb[e] = load_b(boff, k0 + BK + id / 16u, c0 + (id % 16u) * 8u, n, k, vec);
                }
            }
            for (uint kk = 0u; kk < BK; kk += uint(CK)) {
#if defined(EMU)
                // q and x unrolled: lavapipe ends an invocation's loops after 65535
                // iterations in all (K = 4096 would pass that)
                for (int i = 0; i < TM; i++)
                    for (int j = 0; j < TN; j++)
                        [[unroll]] for (int q = 0; q < NE; q++) {
                            const uint e = lane + 32u * uint(q), r = e / uint(CN), c = e % uint(CN);
                            float sum = acc[i][j][q];
                            [[unroll]] for (uint x = 0u; x < uint(CK); x++)
                                sum += half_at(sa[A_ELEM(i, kk) + r * SA_S + x / 8u], x % 8u) *
                                       half_at(sb[B_ELEM(j, kk) + x * SB_S + c / 8u], c % 8u);
                            acc[i][j][q] = sum;
                        }
#else
                fcoopmatNV<16, gl_ScopeSubgroup, CM, CK> fa[TM];
                fcoopmatNV<16, gl_ScopeSubgroup, CK, CN> fb[TN];
                for (int i = 0; i < TM; i++) coopMatLoadNV(fa[i], sa, A_ELEM(i, kk), SA_S, false);
                for (int j = 0; j < TN; j++) coopMatLoadNV(fb[j], sb, B_ELEM(j, kk), SB_S, false);
                for (int i = 0; i < TM; i++)
                    for (int j = 0; j < TN; j++)
                        acc[i][j] = coopMatMulAddNV(fa[i], fb[j], acc[i][j]);
#endif
            }
        }
        // C: each accumulator through this subgroup's staging tile, rounded once, stored
        // inside M x N
        const uint ob = P[P_BASE] + bi * m * n, sbase = sg * uint(CM * CN);
        for (int i = 0; i < TM; i++)
            for (int j = 0; j < TN; j++) {
#if defined(EMU)
                for (int q = 0; q < NE; q++) so[sbase + lane + 32u * uint(q)] = acc[i][j][q];
                barrier();
#else
                coopMatStoreNV(acc[i][j], so, sbase, uint(CN), false);
                subgroupMemoryBarrierShared();
                subgroupBarrier();
#endif
                const uint rb0 = r0 + wr * WM + uint(i * CM), cb0 = c0 + wc * WN + uint(j * CN);
                for (uint e = lane; e < uint(CM * CN); e += sgsize) {
                    const uint row = rb0 + e / uint(CN), col = cb0 + e % uint(CN);
                    if (row < m && col < n) {
#if defined(OF32)
                        o[ob + row * n + col] = so[sbase + e];
#else
                        o[ob + row * n + col] = uint16_t(h_to_f16(so[sbase + e]));
#endif
                    }
                }
#if defined(EMU)
                barrier();
#else
                subgroupMemoryBarrierShared();
                subgroupBarrier();
#endif
            }
    }
}
