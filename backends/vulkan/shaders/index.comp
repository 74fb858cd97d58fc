#version 450
// index.comp — the movement ops of issue 13 that are not a strided copy: ROLL PAD REPEAT
// (engine/remap.h's per-dim maps, passed by the host: kind, source dim, a, b per dim), TRIL
// TRIU, MASKED_FILL, ONE_HOT, GATHER_ND, SCATTER SCATTER_ADD INDEX_ADD. One invocation per
// output element (grid-stride), which finds its value from its own coordinates: no two
// invocations write the same element, and the scatters visit their candidates in the CPU's
// order (ascending position along the axis in the index for SCATTER/SCATTER_ADD, ascending
// j for INDEX_ADD; SCATTER keeps the last match, the adds round each step to the dtype), so
// results are deterministic and the CPU's bit for bit. Indices were checked by the host.
// Variants (meson.build): IXF 1 remap/tri, 2 masked fill, 3 one-hot, 4 gather_nd, 5 scatter
// and index_add; TO/TA element storage (TA is the index type for one-hot; the source has
// TA too), TB the index type (uint8_t: the mask); ADDK an arithmetic kind for the adds (KF
// f32, with HA16/HABF for the halves, KD, KI, KL, KU).
#include "common.glsl"
#include "half.glsl"

layout(std430, binding = 1) buffer O { TO o[]; };
layout(std430, binding = 2) readonly buffer A { TA a[]; };
#if IXF == 2 || IXF == 4 || IXF == 5
layout(std430, binding = 3) readonly buffer B { TB b[]; };
#endif
#if IXF == 5
layout(std430, binding = 4) readonly buffer C { TA c[]; };
#endif

uint64_t pword(int k) { return uint64_t(P[P_I + k]) | (uint64_t(P[P_I + k + 1]) << 32); }

#if IXF == 5 && defined(ADDK)
#if defined(KF) && defined(HA16)
TA addv(TA x, TA y) { return TA(h_to_f16(h_from_f16(uint(x)) + h_from_f16(uint(y)))); }
#elif defined(KF) && defined(HABF)
TA addv(TA x, TA y) { return TA(h_to_bf16(h_from_bf16(uint(x)) + h_from_bf16(uint(y)))); }
#elif defined(KF) || defined(KD)
TA addv(TA x, TA y) { precise TA r = x + y; return r; }
#else
TA addv(TA x, TA y) { return TA(x + y); } // integers wrap in their own width
#endif
#endif

void main()
{
    const uint n = P[P_N], rank = P[P_RANK], step = gstride();
    for (uint i = gl_GlobalInvocationID.x; i < n;) {
        uint cd[8];
        uint q = i;
        for (int d = int(rank) - 1; d >= 0; d--) {
            uint dim = P[P_DIMS + d], nq = q / dim;
            cd[d] = q - nq * dim;
            q = nq;
        }
        uint oo = P[P_BASE] + i;
#if IXF == 1
        if (OP == 225u || OP == 226u) { // TRIL / TRIU: col - row against the diagonal
            int k = int(P[P_I]), diff = int(cd[rank - 1]) - int(cd[rank - 2]);
            bool keep = OP == 225u ? diff <= k : diff >= k;
            o[oo] = keep ? a[P[P_BASE + 1] + i] : TO(0);
        } else { // ROLL PAD REPEAT
            uint off = P[P_BASE + 1];
            bool fill = false;
            for (uint d = 0u; d < rank; d++) {
                int kind = int(P[P_I + 4 * d]), sn = int(P[P_I + 4 * d + 1]);
                int pa = int(P[P_I + 4 * d + 2]), pb = int(P[P_I + 4 * d + 3]), c = int(cd[d]);
                int s = c;
                if (kind == 1) { // ROLL
                    s = c + pa >= sn ? c + pa - sn : c + pa;
                } else if (kind == 2) { // PAD
                    int j = c - pa;
                    if (j >= 0 && j < sn) s = j;
                    else if (pb == 1) s = j < 0 ? -j : 2 * (sn - 1) - j;
                    else if (pb == 2) s = j < 0 ? 0 : sn - 1;
                    else if (pb == 3) s = j < 0 ? j + sn : j - sn;
                    else s = -1;
                } else if (kind == 3) { // REPEAT
                    s = c % sn;
                }
                if (s < 0) fill = true;
                else off += uint(s) * P[P_STR_A + d];
            }
            o[oo] = fill ? TO(pword(32)) : a[off];
        }
#elif IXF == 2
        { // MASKED_FILL: the mask broadcast by its strides
            uint mo = P[P_BASE + 2];
            for (uint d = 0u; d < rank; d++) mo += cd[d] * P[P_STR_B + d];
            o[oo] = uint(b[mo]) != 0u ? TO(pword(0)) : a[P[P_BASE + 1] + i];
        }
#elif IXF == 3
        { // ONE_HOT: output [..., classes]; the one's bits come converted
            uint cls = P[P_I + 2], p = i / cls;
            o[oo] = uint(int64_t(a[P[P_BASE + 1] + p])) == i - p * cls ? TO(pword(0)) : TO(0);
        }
#elif IXF == 4
        { // GATHER_ND: output [P..., inner...], index [P..., k]
            uint k = P[P_I], inner = P[P_I + 1], p = i / inner, off = P[P_BASE + 1] + i - p * inner;
            for (uint j = 0u; j < k; j++)
                off += uint(int64_t(b[P[P_BASE + 2] + p * k + j])) * P[P_STR_A + j];
            o[oo] = a[off];
        }
#elif IXF == 5
        {
            uint axis = P[P_I], len = P[P_I + 1];
            TA v = a[P[P_BASE + 1] + i];
#if defined(ADDK)
            if (OP == 231u) { // INDEX_ADD: index [m], src like x with m along the axis
                uint so = P[P_BASE + 3];
                for (uint d = 0u; d < rank; d++)
                    if (d != axis) so += cd[d] * P[P_STR_C + d];
                for (uint j = 0u; j < len; j++)
                    if (uint(int64_t(b[P[P_BASE + 2] + j])) == cd[axis])
                        v = addv(v, c[so + j * P[P_STR_C + axis]]);
            } else
#endif
            { // SCATTER / SCATTER_ADD: the index's line through this element
                bool inside = true;
                uint io = P[P_BASE + 2], so = P[P_BASE + 3];
                for (uint d = 0u; d < rank; d++) {
                    if (d == axis) continue;
                    if (cd[d] >= P[P_I + 2 + d]) inside = false; // beyond the index's dims
                    io += cd[d] * P[P_STR_B + d];
                    so += cd[d] * P[P_STR_C + d];
                }
                for (uint j = 0u; inside && j < len; j++) {
                    if (uint(int64_t(b[io + j * P[P_STR_B + axis]])) != cd[axis]) continue;
#if defined(ADDK)
                    v = addv(v, c[so + j * P[P_STR_C + axis]]);
#else
                    v = c[so + j * P[P_STR_C + axis]];
#endif
                }
            }
            o[oo] = v;
        }
#endif
        if (n - i <= step) break;
        i += step;
    }
}
