/* vk_movement.c — the Vulkan backend's movement ops: the strided copies (PERMUTE SLICE
 * CONCAT EXPAND COPY SLICE_STEP FLIP: ew.comp's walk), GATHER and INDEX_SELECT (ew.comp),
 * and ROLL PAD REPEAT TRIL TRIU MASKED_FILL ONE_HOT GATHER_ND SCATTER SCATTER_ADD INDEX_ADD
 * (shaders/index.comp, one invocation per output element). The ops that index by tensor
 * data read their index tensor back and check it against [0, dim) first, with the CPU's
 * message (a submission each).
 */
#include "backends/vulkan/vk_internal.h"
#include "engine/remap.h"
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---- movement ---- */

/* skew_a: input a's first element sits that many elements after a's binding start */
static td_status copy_walk_skew(vk_device *vd, const td__desc *shape,
                                int64_t (*st)[TD_MAX_RANK], vk_arg o, vk_arg a, uint32_t skew_a,
                                char *err, size_t errlen)
{
    char name[16];
    snprintf(name, sizeof name, "m_%zu", o.esize);
    vk_arg args[2] = {o, a};
    uint32_t extra[VK_PARAM_WORDS - VK_P_I] = {0};
    extra[VK_P_SKEW_A - VK_P_I] = skew_a;
    return td__vk_walk(vd, name, 0, shape, 2, st, args, 2, NULL, extra, err, errlen);
}

td_status td__vk_copy_walk(vk_device *vd, const td__desc *shape, int64_t (*st)[TD_MAX_RANK],
                           vk_arg o, vk_arg a, char *err, size_t errlen)
{
    return copy_walk_skew(vd, shape, st, o, a, 0, err, errlen);
}

/* View v from element `first` on (the binding starts there). */
static vk_arg arg_from(const td__view *v, int64_t first)
{
    vk_arg r = td__vk_arg_of(v);
    r.data = (const char *)v->data + (size_t)first * r.esize;
    r.nbytes -= (size_t)first * r.esize;
    return r;
}

/* Every index in [0, dim), read back from the device; the CPU's message otherwise. */
static td_status check_indices(vk_device *vd, const char *opname, const td__view *idx,
                               int64_t dim, char *err, size_t errlen)
{
    const int64_t n = td__vk_nelem(&idx->desc);
    const size_t nb = td__vk_nbytes(&idx->desc);
    if (n <= 0) return TD_OK;
    void *h = td__vk_calloc(nb, 1);
    if (h == NULL) return td__vk_fail(err, errlen, TD_ENOMEM, "%s: out of host memory", opname);
    td_status s = td__vk_read_locked(vd, idx->data, h, nb);
    if (s != TD_OK) {
        td__vk_free(h);
        return td__vk_fail(err, errlen, s, "vulkan:%d: %s: cannot read the index tensor",
                           vd->index, opname);
    }
    const bool is64 = idx->desc.dtype == TD_I64;
    for (int64_t i = 0; i < n && s == TD_OK; i++) {
        int64_t v = is64 ? ((const int64_t *)h)[i] : ((const int32_t *)h)[i];
        if (v < 0 || v >= dim)
            s = td__vk_fail(err, errlen, TD_ERANGE,
                            "%s: index %" PRId64 " out of range [0, %" PRId64
                            ") at position %" PRId64,
                            opname, v, dim, i);
    }
    td__vk_free(h);
    return s;
}

/* GATHER_ND's check, with the CPU's message (it names the dim). */
static td_status check_gather_nd(vk_device *vd, const td__view *idx, const td__desc *x, char *err,
                                 size_t errlen)
{
    const int64_t n = td__vk_nelem(&idx->desc), k = idx->desc.dims[idx->desc.rank - 1];
    const size_t nb = td__vk_nbytes(&idx->desc);
    if (n <= 0 || k == 0) return TD_OK;
    void *h = td__vk_calloc(nb, 1);
    if (h == NULL) return td__vk_fail(err, errlen, TD_ENOMEM, "gather_nd: out of host memory");
    td_status s = td__vk_read_locked(vd, idx->data, h, nb);
    if (s != TD_OK) {
        td__vk_free(h);
        return td__vk_fail(err, errlen, s, "vulkan:%d: gather_nd: cannot read the index tensor",
                           vd->index);
    }
    const bool is64 = idx->desc.dtype == TD_I64;
    for (int64_t i = 0; i < n && s == TD_OK; i++) {
        int64_t v = is64 ? ((const int64_t *)h)[i] : ((const int32_t *)h)[i];
        int64_t c = i % k;
        if (v < 0 || v >= x->dims[c])
            s = td__vk_fail(err, errlen, TD_ERANGE,
                            "gather_nd: index %" PRId64 " out of range [0, %" PRId64
                            ") for dim %" PRId64 " at position %" PRId64,
                            v, x->dims[c], c, i);
    }
    td__vk_free(h);
    return s;
}

/* ROLL PAD REPEAT TRIL TRIU MASKED_FILL ONE_HOT GATHER_ND SCATTER SCATTER_ADD INDEX_ADD:
 * one invocation per output element (shaders/index.comp); the indexed ones check their
 * indices on the host first, as GATHER does. */
static td_status exec_indexed(vk_device *vd, const td__op *op, const td__view *in,
                              const td__view *out, char *err, size_t errlen)
{
    const td__desc *x = &in[0].desc, *o = &out->desc;
    const uint32_t opc = op->opcode;
    const int64_t n = td__vk_nelem(o);
    const char *ix = op->n_inputs > 1 && in[1].desc.dtype == TD_I64 ? "i64" : "i32";
    const size_t es = td__dtype_size(o->dtype);
    uint32_t p[VK_PARAM_WORDS];
    memset(p, 0, sizeof p);
    uint32_t *q = p + VK_P_I;
    int64_t xs[TD_MAX_RANK] = {0}, bs[TD_MAX_RANK] = {0}, cs[TD_MAX_RANK] = {0};
    td__desc_strides(x, xs);
    vk_arg args[4] = {td__vk_arg_of(out), td__vk_arg_of(&in[0])};
    int nargs = 2;
    char name[24];
    td_status s = TD_OK;
    switch (opc) {
    case TD_OP_ROLL:
    case TD_OP_PAD:
    case TD_OP_REPEAT: {
        td__remap m;
        if (!td__remap_init(&m, op, x))
            return td__vk_fail(err, errlen, TD_EINTERNAL, "vulkan: remap of %s", td__op_name(opc));
        for (int d = 0; d < m.rank; d++) {
            q[4 * d] = (uint32_t)m.kind[d];
            q[4 * d + 1] = (uint32_t)m.n[d];
            q[4 * d + 2] = (uint32_t)m.a[d];
            q[4 * d + 3] = (uint32_t)m.b[d];
        }
        uint64_t fill = opc == TD_OP_PAD ? td__vk_full_bits(o->dtype, op->fattrs[0]) : 0;
        q[32] = (uint32_t)fill;
        q[33] = (uint32_t)(fill >> 32);
        snprintf(name, sizeof name, "rm_%zu", es);
        break;
    }
    case TD_OP_TRIL:
    case TD_OP_TRIU: {
        const int64_t rows = o->dims[o->rank - 2], cols = o->dims[o->rank - 1];
        int64_t k = op->iattrs[0];
        k = k < -rows - 1 ? -rows - 1 : k > cols + 1 ? cols + 1 : k;
        q[0] = (uint32_t)(int32_t)k;
        snprintf(name, sizeof name, "rm_%zu", es);
        break;
    }
    case TD_OP_MASKED_FILL: {
        td__desc_bcast_strides(&in[1].desc, o, bs);
        uint64_t v = td__vk_full_bits(o->dtype, op->fattrs[0]);
        q[0] = (uint32_t)v;
        q[1] = (uint32_t)(v >> 32);
        args[nargs++] = td__vk_arg_of(&in[1]);
        snprintf(name, sizeof name, "mf_%zu", es);
        break;
    }
    case TD_OP_ONE_HOT: {
        s = check_indices(vd, "one_hot", &in[0], op->iattrs[0], err, errlen);
        uint64_t one = td__vk_full_bits(o->dtype, 1.0);
        q[0] = (uint32_t)one;
        q[1] = (uint32_t)(one >> 32);
        q[2] = (uint32_t)op->iattrs[0];
        snprintf(name, sizeof name, "oh_%zu_%s", es, x->dtype == TD_I64 ? "i64" : "i32");
        break;
    }
    case TD_OP_GATHER_ND: {
        s = check_gather_nd(vd, &in[1], x, err, errlen);
        const int64_t k = in[1].desc.dims[in[1].desc.rank - 1];
        int64_t inner = 1;
        for (uint32_t d = (uint32_t)k; d < x->rank; d++) inner *= x->dims[d];
        q[0] = (uint32_t)k;
        q[1] = (uint32_t)inner;
        args[nargs++] = td__vk_arg_of(&in[1]);
        snprintf(name, sizeof name, "gn_%zu_%s", es, ix);
        if (inner == 0) return s;
        break;
    }
    default: { /* SCATTER SCATTER_ADD INDEX_ADD */
        const int64_t axis = op->iattrs[0];
        const td__desc *id = &in[1].desc;
        s = check_indices(vd, td__op_name(opc), &in[1], x->dims[axis], err, errlen);
        td__desc_strides(id, bs);
        td__desc_strides(&in[2].desc, cs);
        q[0] = (uint32_t)axis;
        q[1] = (uint32_t)(opc == TD_OP_INDEX_ADD ? td__vk_nelem(id) : id->dims[axis]);
        for (uint32_t d = 0; opc != TD_OP_INDEX_ADD && d < id->rank; d++)
            q[2 + d] = (uint32_t)id->dims[d];
        args[nargs++] = td__vk_arg_of(&in[1]);
        args[nargs++] = td__vk_arg_of(&in[2]);
        if (opc == TD_OP_SCATTER)
            snprintf(name, sizeof name, "sc_w%zu_%s", es, ix);
        else
            snprintf(name, sizeof name, "sa_%s_%s", td__vk_kind_sfx(o->dtype), ix);
        break;
    }
    }
    if (s != TD_OK || n <= 0) return s;
    p[VK_P_N] = (uint32_t)n;
    p[VK_P_RANK] = opc == TD_OP_ONE_HOT || opc == TD_OP_GATHER_ND ? 0 : o->rank;
    for (uint32_t d = 0; d < TD_MAX_RANK; d++) {
        p[VK_P_DIMS + d] = d < o->rank ? (uint32_t)o->dims[d] : 1;
        p[VK_P_STR_A + d] = (uint32_t)xs[d];
        p[VK_P_STR_B + d] = (uint32_t)bs[d];
        p[VK_P_STR_C + d] = (uint32_t)cs[d];
    }
    return td__vk_dispatch(vd, name, opc, p, args, nargs, td__vk_groups_for((uint64_t)n, 256), 1, 1,
                           err, errlen);
}

td_status td__vk_exec_movement(vk_device *vd, const td__op *op, const td__view *in,
                               const td__view *out, char *err, size_t errlen)
{
    const td__desc *x = &in[0].desc, *o = &out->desc;
    int64_t st[3][TD_MAX_RANK] = {{0}}, xs[TD_MAX_RANK] = {0};
    td__desc_strides(o, st[0]);
    td__desc_strides(x, xs);
    switch (op->opcode) {
    case TD_OP_COPY:
        memcpy(st[1], xs, sizeof xs);
        return td__vk_copy_walk(vd, o, st, td__vk_arg_of(out), td__vk_arg_of(&in[0]), err, errlen);
    case TD_OP_PERMUTE:
        for (uint32_t d = 0; d < o->rank; d++) st[1][d] = xs[op->iattrs[d]];
        return td__vk_copy_walk(vd, o, st, td__vk_arg_of(out), td__vk_arg_of(&in[0]), err, errlen);
    case TD_OP_EXPAND:
        td__desc_bcast_strides(x, o, st[1]);
        return td__vk_copy_walk(vd, o, st, td__vk_arg_of(out), td__vk_arg_of(&in[0]), err, errlen);
    case TD_OP_SLICE: {
        int64_t first = 0;
        for (uint32_t d = 0; d < x->rank; d++) first += op->iattrs[d] * xs[d];
        memcpy(st[1], xs, sizeof xs);
        if (td__vk_nelem(o) == 0) return TD_OK;
        return td__vk_copy_walk(vd, o, st, td__vk_arg_of(out), arg_from(&in[0], first), err,
                                errlen);
    }
    case TD_OP_SLICE_STEP:
    case TD_OP_FLIP: { /* a strided copy: the step (negative: backwards) in each stride */
        int64_t first = 0;
        for (uint32_t d = 0; d < x->rank; d++) {
            const bool flip = op->opcode == TD_OP_FLIP && ((op->iattrs[0] >> d) & 1);
            const int64_t start = op->opcode == TD_OP_FLIP ? (flip ? x->dims[d] - 1 : 0)
                                                           : op->iattrs[d];
            const int64_t stp = op->opcode == TD_OP_FLIP ? (flip ? -1 : 1)
                                                         : op->iattrs[2 * x->rank + d];
            st[1][d] = xs[d] * stp;
            first += start * xs[d];
        }
        if (td__vk_nelem(o) == 0) return TD_OK;
        int64_t lo = first; /* the lowest element read: the binding starts there */
        for (uint32_t d = 0; d < o->rank; d++)
            if (st[1][d] < 0) lo += (o->dims[d] - 1) * st[1][d];
        return copy_walk_skew(vd, o, st, td__vk_arg_of(out), arg_from(&in[0], lo),
                              (uint32_t)(first - lo), err, errlen);
    }
    case TD_OP_ROLL:
    case TD_OP_PAD:
    case TD_OP_REPEAT:
    case TD_OP_TRIL:
    case TD_OP_TRIU:
    case TD_OP_ONE_HOT:
    case TD_OP_MASKED_FILL:
    case TD_OP_SCATTER:
    case TD_OP_SCATTER_ADD:
    case TD_OP_INDEX_ADD:
    case TD_OP_GATHER_ND:
        return exec_indexed(vd, op, in, out, err, errlen);
    case TD_OP_CONCAT: {
        const int64_t axis = op->iattrs[0];
        int64_t at = 0;
        for (uint32_t k = 0; k < op->n_inputs; k++) {
            const td__desc *xk = &in[k].desc;
            int64_t sk[3][TD_MAX_RANK];
            memcpy(sk[0], st[0], sizeof sk[0]);
            td__desc_strides(xk, sk[1]);
            if (td__vk_nelem(xk) > 0) {
                td_status s = td__vk_copy_walk(vd, xk, sk, arg_from(out, at * st[0][axis]),
                                        td__vk_arg_of(&in[k]), err, errlen);
                if (s != TD_OK) return s;
            }
            at += xk->dims[axis];
        }
        return TD_OK;
    }
    case TD_OP_GATHER:
    case TD_OP_INDEX_SELECT: {
        const int64_t axis = op->iattrs[0];
        const td__desc *ix = &in[1].desc;
        const bool gather = op->opcode == TD_OP_GATHER;
        td_status s = check_indices(vd, gather ? "gather" : "index_select", &in[1],
                                    x->dims[axis], err, errlen);
        if (s != TD_OK || td__vk_nelem(o) == 0) return s;
        int64_t is[TD_MAX_RANK];
        td__desc_strides(ix, is);
        if (gather) {
            for (uint32_t d = 0; d < o->rank; d++) {
                st[1][d] = (int64_t)d == axis ? 0 : xs[d];
                st[2][d] = is[d];
            }
        } else {
            uint32_t d = 0;
            for (int64_t j = 0; j < axis; j++, d++) {
                st[1][d] = xs[j];
                st[2][d] = 0;
            }
            for (uint32_t j = 0; j < ix->rank; j++, d++) {
                st[1][d] = 0;
                st[2][d] = is[j];
            }
            for (uint32_t j = (uint32_t)axis + 1; j < x->rank; j++, d++) {
                st[1][d] = xs[j];
                st[2][d] = 0;
            }
        }
        char name[24];
        snprintf(name, sizeof name, "g_%zu_%s", td__dtype_size(o->dtype),
                 ix->dtype == TD_I64 ? "i64" : "i32");
        vk_arg args[3] = {td__vk_arg_of(out), td__vk_arg_of(&in[0]), td__vk_arg_of(&in[1])};
        const uint32_t axis_stride[VK_PARAM_WORDS - VK_P_I] = {(uint32_t)xs[axis]};
        return td__vk_walk(vd, name, 0, o, 3, st, args, 3, NULL, axis_stride, err, errlen);
    }
    }
    return td__vk_fail(err, errlen, TD_EINTERNAL, "vulkan: movement op %s not handled",
                       td__op_name(op->opcode));
}

