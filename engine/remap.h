/* remap.h — the per-dim index maps of ROLL, PAD and REPEAT, shared by every backend.
 *
 * Why one header: those three ops move each output coordinate i of dim d to a source
 * coordinate that depends on d alone (or to "no source": constant padding), so one kernel
 * per backend covers all three, and the map itself is written once here. The CPU and GPU
 * kernels both call td__remap_src, so they cannot disagree on a reflect or circular edge.
 * C11 and C++ (CUDA/HIP host and device code); header-only, so loadable backend modules
 * need no engine symbols. Thread-safety: pure functions.
 */
#ifndef TD_ENGINE_REMAP_H
#define TD_ENGINE_REMAP_H

#include "engine/op.h"

#if defined(__CUDACC__) || defined(__HIPCC__)
#define TD__REMAP_FN static inline __host__ __device__
#else
#define TD__REMAP_FN static inline
#endif

enum td__remap_kind {
    TD_REMAP_IDENT = 0, /* src = i */
    TD_REMAP_ROLL,      /* src = (i + a) mod n, 0 <= a < n */
    TD_REMAP_PAD,       /* j = i - a (a = before); j in [0, n): j; else by mode b */
    TD_REMAP_REPEAT,    /* src = i mod n */
};

/* PAD's modes (iattrs[0] of the op; engine/optable.h's PAD row). */
enum td__pad_mode {
    TD_PADM_CONSTANT = 0,
    TD_PADM_REFLECT = 1,   /* mirror without repeating the edge: needs pad < n */
    TD_PADM_REPLICATE = 2, /* the edge element: needs n > 0 */
    TD_PADM_CIRCULAR = 3,  /* wrap around once: needs pad <= n */
};

typedef struct td__remap {
    int rank;
    int64_t kind[TD_MAX_RANK];
    int64_t n[TD_MAX_RANK]; /* source dim */
    int64_t a[TD_MAX_RANK];
    int64_t b[TD_MAX_RANK];
} td__remap;

/* Source coordinate of output coordinate i along dim d, or -1 (constant padding). */
TD__REMAP_FN int64_t td__remap_src(const td__remap *m, int d, int64_t i)
{
    const int64_t n = m->n[d];
    switch (m->kind[d]) {
    case TD_REMAP_ROLL: {
        int64_t j = i + m->a[d];
        return j >= n ? j - n : j;
    }
    case TD_REMAP_PAD: {
        int64_t j = i - m->a[d];
        if (j >= 0 && j < n) return j;
        switch (m->b[d]) {
        case TD_PADM_REFLECT: return j < 0 ? -j : 2 * (n - 1) - j;
        case TD_PADM_REPLICATE: return j < 0 ? 0 : n - 1;
        case TD_PADM_CIRCULAR: return j < 0 ? j + n : j - n;
        default: return -1;
        }
    }
    case TD_REMAP_REPEAT: return i % n;
    default: return i;
    }
}

/* The maps of a validated ROLL, PAD or REPEAT op on input x; false for another opcode. */
static inline bool td__remap_init(td__remap *m, const td__op *op, const td__desc *x)
{
    const int r = (int)x->rank;
    m->rank = r;
    for (int d = 0; d < r; d++) {
        const int64_t n = x->dims[d];
        m->n[d] = n;
        m->a[d] = 0;
        m->b[d] = 0;
        switch (op->opcode) {
        case TD_OP_ROLL: {
            /* out[i] = x[(i - s) mod n] = x[(i + a) mod n], a = (-s) mod n in [0, n) */
            int64_t s = n > 0 ? op->iattrs[d] % n : 0;
            m->kind[d] = TD_REMAP_ROLL;
            m->a[d] = s <= 0 ? -s : n - s;
            break;
        }
        case TD_OP_PAD:
            m->kind[d] = TD_REMAP_PAD;
            m->a[d] = op->iattrs[1 + d];
            m->b[d] = op->iattrs[0];
            break;
        case TD_OP_REPEAT:
            m->kind[d] = TD_REMAP_REPEAT;
            break;
        default:
            return false;
        }
    }
    return true;
}

#endif
