/* vk_reduce.c — the Vulkan backend's folds along axes: the reductions (SUM PROD MAX MIN
 * ARG* ANY ALL MEAN: shaders/reduce.comp, one workgroup per output, or one invocation per
 * output where the reduced extent is short (td__vk_reduce_flat; zero elements: the identity),
 * or, for at most 256
 * outputs of more than 65536 elements each, split into chunks of consecutive elements, one
 * workgroup per chunk, and the chunks' partials folded in order by a second pass; the
 * chunking depends on the shape alone (td__vk_reduce_chunks), so do the bits; VAR STD
 * LOGSUMEXP NORM: stats.comp, not split yet), the scans
 * (CUMSUM CUMPROD: scan.comp, long lines in blocks through a scratch buffer) and the rank
 * sorts (SORT ARGSORT TOPK_*, and RANDPERM's sort of Philox draws: sort.comp). vk_ops.c
 * says which dtypes and sizes each takes (supports_op) and why.
 */
#include "backends/vulkan/vk_internal.h"
#include "engine/collapse.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- reductions (reduce.comp) ---- */

/* VAR STD LOGSUMEXP NORM of zero elements, as backends/cpu/cpu_stats.c gives them: mean 0/0
 * makes VAR and STD NaN, LOGSUMEXP is log 0 = -inf, NORM 0 (p = -inf, or (0)^(1/p) with
 * p < 0: +inf). stats.comp gives the same, but one workgroup per output: [8M, 0] took
 * minutes on lavapipe; this is one fill (create.comp). */
static double stat_of_empty(const td__op *op)
{
    const double pw = op->fattrs[0];
    switch (op->opcode) {
    case TD_OP_LOGSUMEXP: return -INFINITY;
    case TD_OP_NORM: return pw < 0.0 ? INFINITY : 0.0;
    default: return NAN;
    }
}

static td_status fill_value(vk_device *vd, const td__view *out, int64_t n, double v, char *err,
                            size_t errlen)
{
    uint32_t p[VK_PARAM_WORDS];
    memset(p, 0, sizeof p);
    const uint64_t bits = td__vk_full_bits(out->desc.dtype, v);
    p[VK_P_N] = (uint32_t)n;
    p[VK_P_I + 1] = (uint32_t)bits;
    p[VK_P_I + 2] = (uint32_t)(bits >> 32);
    char name[16];
    snprintf(name, sizeof name, "cr_w%zu", 8 * td__dtype_size(out->desc.dtype));
    vk_arg a = td__vk_arg_of(out);
    return td__vk_dispatch(vd, name, TD_OP_FULL, p, &a, 1, td__vk_groups_for((uint64_t)n, 256),
                           1, 1, err, errlen);
}

td_status td__vk_exec_reduce(vk_device *vd, const td__op *op, const td__view *in,
                             const td__view *out, char *err, size_t errlen)
{
    td__reduce_plan pl;
    td__reduce_plan_init(&pl, &in[0].desc, (uint64_t)op->iattrs[0]);
    if (pl.nout == 0) return TD_OK;
    uint32_t p[VK_PARAM_WORDS];
    memset(p, 0, sizeof p);
    uint32_t *r = p + VK_P_I;
    r[0] = (uint32_t)pl.nout;
    for (int d = 0; d < pl.nk; d++) {
        r[2 + d] = (uint32_t)pl.ksize[d];
        r[10 + d] = (uint32_t)pl.kstride[d];
    }
    for (int d = 0; d < pl.nr; d++) {
        r[18 + d] = (uint32_t)pl.rsize[d];
        r[26 + d] = (uint32_t)pl.rstride[d];
    }
    r[34] = (uint32_t)pl.nk;
    r[35] = (uint32_t)pl.nr;
    r[36] = (uint32_t)pl.rcount;
    const uint32_t dt = in[0].desc.dtype;
    vk_arg args[2] = {td__vk_arg_of(out), td__vk_arg_of(&in[0])};
    char name[32];
    const uint32_t opc = op->opcode;
    if (opc == TD_OP_VAR || opc == TD_OP_STD || opc == TD_OP_LOGSUMEXP || opc == TD_OP_NORM) {
        if (pl.rcount == 0)
            return fill_value(vd, out, (int64_t)pl.nout, stat_of_empty(op), err, errlen);
        for (int k = 0; k < TD_OP_MAX_FATTRS; k++) td__vk_put_double(p, k, op->fattrs[k]);
        snprintf(name, sizeof name, "st_%s", td__vk_dtype_name(dt));
        return td__vk_dispatch(vd, name, op->opcode, p, args, 2,
                               td__vk_groups_for((uint64_t)pl.nout, 1), 1, 1, err, errlen);
    }
    const char *sfx = op->opcode == TD_OP_ARGMAX || op->opcode == TD_OP_ARGMIN ? "_i64"
                      : (op->opcode == TD_OP_ANY || op->opcode == TD_OP_ALL) &&
                              dt != TD_U8 && dt != TD_BOOL
                          ? "_b"
                          : "";
    snprintf(name, sizeof name, "r_%s%s", dt == TD_BOOL ? "bool" : td__vk_kind_sfx(dt), sfx);
    if (td__vk_reduce_flat(vd, pl.nout, pl.rcount)) { /* mode 3: one invocation per output */
        r[37] = 3;
        return td__vk_dispatch(vd, name, op->opcode, p, args, 2,
                               td__vk_groups_for((uint64_t)pl.nout, 256), 1, 1, err, errlen);
    }
    const uint32_t g = td__vk_reduce_chunks(pl.nout, pl.rcount);
    if (g == 0) /* mode 0: one workgroup per output */
        return td__vk_dispatch(vd, name, op->opcode, p, args, 2,
                               td__vk_groups_for((uint64_t)pl.nout, 1), 1, 1, err, errlen);
    /* split (td__vk_reduce_chunks): g chunks of l elements per output, 16-byte partials */
    const size_t sbytes = (size_t)pl.nout * g * 16;
    void *scratch = NULL;
    td_status s = td__vk_alloc_locked(vd, sbytes, &scratch);
    if (s != TD_OK)
        return td__vk_fail(err, errlen, s, "%s: cannot allocate %zu bytes of scratch on vulkan:%d",
                           td__op_name(op->opcode), sbytes, vd->index);
    vk_arg sargs[3] = {args[0], args[1], {scratch, sbytes, 16}};
    r[38] = g;
    r[39] = (uint32_t)((pl.rcount + g - 1) / g);
    r[37] = 1;
    s = td__vk_dispatch(vd, name, op->opcode, p, sargs, 3, g,
                        td__vk_groups_for((uint64_t)pl.nout, 1), 1, err, errlen);
    r[37] = 2;
    if (s == TD_OK)
        s = td__vk_dispatch(vd, name, op->opcode, p, sargs, 3,
                            td__vk_groups_for((uint64_t)pl.nout, 1), 1, 1, err, errlen);
    td__vk_release_locked(vd, scratch, sbytes);
    return s;
}

/* x as [outer, n, inner] around `axis` (rank 0: one element). */
static void axis_split(const td__desc *x, int64_t axis, int64_t *outer, int64_t *n,
                       int64_t *inner)
{
    *outer = *n = *inner = 1;
    for (uint32_t d = 0; d < x->rank; d++) {
        if ((int64_t)d < axis) *outer *= x->dims[d];
        else if ((int64_t)d == axis) *n = x->dims[d];
        else *inner *= x->dims[d];
    }
}

/* ---- sorts (sort.comp) ---- */

td_status td__vk_exec_sort(vk_device *vd, const td__op *op, const td__view *in,
                           const td__view *out, char *err, size_t errlen)
{
    const uint32_t opc = op->opcode;
    uint32_t p[VK_PARAM_WORDS];
    memset(p, 0, sizeof p);
    p[VK_P_SEED] = (uint32_t)op->seed;
    p[VK_P_SEED + 1] = (uint32_t)(op->seed >> 32);
    char name[16];
    vk_arg args[2] = {td__vk_arg_of(out)};
    int64_t outer = 1, n = 1, inner = 1, k;
    bool desc = false;
    if (opc == TD_OP_RANDPERM) {
        n = k = op->iattrs[0];
        snprintf(name, sizeof name, "rp");
    } else {
        const td__desc *x = &in[0].desc;
        const bool topk = opc == TD_OP_TOPK_VALUES || opc == TD_OP_TOPK_INDICES;
        axis_split(x, op->iattrs[0], &outer, &n, &inner);
        k = topk ? op->iattrs[1] : n;
        desc = topk ? op->iattrs[2] != 0 : op->iattrs[1] != 0;
        const bool values = opc == TD_OP_SORT || opc == TD_OP_TOPK_VALUES;
        snprintf(name, sizeof name, "%s_%s", values ? "so" : "si", td__vk_dtype_name(x->dtype));
        args[1] = td__vk_arg_of(&in[0]);
    }
    const int64_t total = outer * n * inner;
    if (total == 0 || k == 0) return TD_OK;
    p[VK_P_N] = (uint32_t)total;
    p[VK_P_I] = (uint32_t)n;
    p[VK_P_I + 1] = (uint32_t)inner;
    p[VK_P_I + 2] = (uint32_t)k;
    p[VK_P_I + 3] = desc;
    return td__vk_dispatch(vd, name, opc, p, args, opc == TD_OP_RANDPERM ? 1 : 2,
                           td__vk_groups_for((uint64_t)total, 256), 1, 1, err, errlen);
}

/* ---- scans (scan.comp) ---- */

td_status td__vk_exec_scan(vk_device *vd, const td__op *op, const td__view *in,
                           const td__view *out, char *err, size_t errlen)
{
    const td__desc *x = &in[0].desc;
    int64_t outer, n, inner;
    axis_split(x, op->iattrs[0], &outer, &n, &inner);
    if (outer * n * inner == 0) return TD_OK;
    uint32_t p[VK_PARAM_WORDS];
    memset(p, 0, sizeof p);
    p[VK_P_I] = (uint32_t)outer;
    p[VK_P_I + 1] = (uint32_t)n;
    p[VK_P_I + 2] = (uint32_t)inner;
    char name[16];
    snprintf(name, sizeof name, "cs_%s", td__vk_kind_sfx(x->dtype));
    vk_arg args[3] = {td__vk_arg_of(out), td__vk_arg_of(&in[0])};
    const int64_t lines = outer * inner, bsz = 16384;
    if (n <= bsz) /* mode 0: each line whole, in the CPU's order */
        return td__vk_dispatch(vd, name, op->opcode, p, args, 2,
                               td__vk_groups_for((uint64_t)lines, 256), 1, 1, err, errlen);
    /* long lines in blocks (scan.comp says why): fold, prefix, finish */
    const int64_t nb = (n + bsz - 1) / bsz;
    const size_t sbytes = (size_t)(lines * nb) * 8;
    void *scratch = NULL;
    td_status s = td__vk_alloc_locked(vd, sbytes, &scratch);
    if (s != TD_OK)
        return td__vk_fail(err, errlen, s, "%s: cannot allocate %zu bytes of scratch on vulkan:%d",
                           td__op_name(op->opcode), sbytes, vd->index);
    args[2] = (vk_arg){scratch, sbytes, 8};
    p[VK_P_I + 4] = (uint32_t)bsz;
    p[VK_P_I + 5] = (uint32_t)nb;
    for (uint32_t mode = 1; mode <= 3 && s == TD_OK; mode++) {
        p[VK_P_I + 3] = mode;
        const uint64_t units = (uint64_t)(mode == 2 ? lines : lines * nb);
        s = td__vk_dispatch(vd, name, op->opcode, p, args, 3, td__vk_groups_for(units, 256), 1, 1,
                            err, errlen);
    }
    td__vk_release_locked(vd, scratch, sbytes);
    return s;
}

