/* vk_window.c — the POOL and CONV families (engine/window.h) on the Vulkan backend:
 * shaders/window.comp, one invocation per output element (per weight element for
 * CONV_WEIGHT_GRAD) running backends/cpu/cpu_window.c's loop for it.
 */
#include "backends/vulkan/vk_internal.h"
#include "engine/window.h"
#include <stdio.h>
#include <string.h>

/* The window words window.comp reads from VK_P_I on. */
static void window_words(const td__window *w, const td__op *op, uint32_t *q)
{
    for (int d = 0; d < TD_WIN_SP; d++) {
        q[d] = (uint32_t)w->in[d];
        q[3 + d] = (uint32_t)w->out[d];
        q[6 + d] = (uint32_t)w->k[d];
        q[9 + d] = (uint32_t)w->stride[d];
        q[12 + d] = (uint32_t)w->dil[d];
        q[15 + d] = (uint32_t)w->pad_lo[d];
        q[18 + d] = (uint32_t)w->pad_hi[d];
    }
    q[21] = (uint32_t)w->count_include_pad;
    q[22] = (uint32_t)w->mode;
    q[23] = (uint32_t)w->align_corners;
    q[24] = (uint32_t)(TD_WIN_SP - w->nsp);
    q[25] = (uint32_t)(w->n * w->c);
    q[26] = (uint32_t)w->n;
    q[27] = (uint32_t)w->c;
    q[28] = (uint32_t)w->co;
    q[29] = (uint32_t)w->groups;
    q[30] = op->n_inputs > 2;
}

static td_status exec_direct(vk_device *vd, const td__op *op, const td__view *in,
                             const td__view *out, const td__window *w, char *err, size_t errlen)
{
    const int64_t n = td__vk_nelem(&out->desc);
    uint32_t p[VK_PARAM_WORDS];
    memset(p, 0, sizeof p);
    p[VK_P_N] = (uint32_t)n;
    window_words(w, op, p + VK_P_I);
    const uint32_t opc = op->opcode;
    const char *k = td__vk_dtype_name(in[0].desc.dtype);
    char name[24];
    vk_arg args[4] = {td__vk_arg_of(out), td__vk_arg_of(&in[0])};
    int nargs = 2;
    if (opc == TD_OP_CONV_WEIGHT_GRAD) { /* one workgroup per weight element */
        snprintf(name, sizeof name, "cw_%s", k);
        args[nargs++] = td__vk_arg_of(&in[1]);
        return td__vk_dispatch(vd, name, opc, p, args, nargs, td__vk_groups_for((uint64_t)n, 1),
                               1, 1, err, errlen);
    }
    if (td__op_class(opc) == TD_OPCLASS_CONV) {
        snprintf(name, sizeof name, "cv_%s", k);
        args[nargs++] = td__vk_arg_of(&in[1]);
        args[nargs++] = op->n_inputs > 2 ? td__vk_arg_of(&in[2]) : td__vk_arg_of(&in[1]);
    } else if (opc == TD_OP_MAX_POOL_INDICES) {
        snprintf(name, sizeof name, "wi_%s", k);
    } else if (opc == TD_OP_MAX_POOL_BACKWARD) {
        snprintf(name, sizeof name, "wb_%s_%s", k, in[1].desc.dtype == TD_I64 ? "i64" : "i32");
        args[nargs++] = td__vk_arg_of(&in[1]);
    } else {
        snprintf(name, sizeof name, "wp_%s", k);
    }
    return td__vk_dispatch(vd, name, opc, p, args, nargs, td__vk_groups_for((uint64_t)n, 256), 1,
                           1, err, errlen);
}

td_status td__vk_exec_window(vk_device *vd, const td__op *op, const td__view *in,
                             const td__view *out, char *err, size_t errlen)
{
    if (td__vk_nelem(&out->desc) <= 0) return TD_OK;
    td__window w;
    td__window_decode(op, &in[0].desc, op->n_inputs > 1 ? &in[1].desc : NULL, &out->desc, &w);
    return exec_direct(vd, op, in, out, &w, err, errlen);
}
