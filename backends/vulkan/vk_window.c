/* vk_window.c — the POOL and CONV families (engine/window.h) on the Vulkan backend.
 *
 * Pools, their gradients and INTERPOLATE run shaders/window.comp, one invocation per output
 * element running backends/cpu/cpu_window.c's loop for it.
 *
 * The convolutions run as GEMMs on matmul.comp's register-blocked tiles (BLK), the way
 * backends/gpu/gpu_window.cu does for CUDA: the direct shader (window.comp, one invocation
 * per output element looping over C/G x kernel products) ran ResNet-50's layers at 0.04-0.07x
 * the CUDA backend on an H200 (BENCHMARKS.md), while the tiled matmul reached 0.10x cuBLAS;
 * on lavapipe the GEMM path runs the example CNN's conv layers 8-77x faster (BENCHMARKS.md).
 * Each op works through the batch in chunks of images whose scratch stays under a cap
 * (conv_col_cap), with the helpers of shaders/conv.comp; the chunking changes no bits (each
 * output's sum runs over one image, or over the images in order across chunks):
 *  - CONV: im2col per image and group ([C/G kk, P] patch matrix, plus a row of ones when
 *    there is a bias, whose weight column is the bias), then one batched GEMM over (image,
 *    group): [CO/G, C/G kk (+1)] weights times the columns, so each output is one ascending
 *    sum of its products (and bias last) in the accumulator, rounded once;
 *  - CONV_WEIGHT_GRAD: transposed im2col ([P, C/G kk] per image and group) and a GEMM per
 *    image and group, dY[n, g] [CO/G, P] times it: one partial product per image, unrounded
 *    (f32 for f32/f16/bf16, f64 for f64), summed over the images in order and rounded once;
 *  - CONV_TRANSPOSE: a GEMM per image and group of the transposed weights [CO/G kk, C/G]
 *    with the input [C/G, L] (the columns, unrounded as above), then a gathering col2im
 *    that sums the kernel offsets reaching each output in order, + bias, rounded once.
 * No atomics; every sum has a fixed order, so the bits are the same from run to run. They
 * differ from the CPU's association, inside the conformance suite's TD_ACC_CONV bound.
 * f16/bf16 move as bits through im2col and multiply in f32 (matmul.comp's HA16/HABF; the
 * OF32 variants keep the gradients' intermediate sums in f32); f16 GEMMs run on cooperative
 * matrices where the device has them (matmul_coop.comp, as f16 MATMUL: vk_ops.c).
 * Where a chunk of one image would not fit the cap (or a lavapipe loop limit, or the
 * dispatch grid), or the scratch cannot be allocated, the op takes the direct shader.
 * On a CPU implementation (lavapipe ends an invocation's loops after 65535 iterations) an op
 * whose shaders would loop longer is refused: supports_op asks td__vk_window_loops_ok, which
 * counts the loops of the path exec will take (conv_plan: the GEMM's passes; direct_iters:
 * window.comp's), and exec refuses with a message if the GEMM's scratch then fails to
 * allocate and the direct shader would loop too long.
 * Test hooks: TENSORD_TEST_CONV_COL_BYTES lowers the chunk's cap (one image a chunk),
 * TENSORD_TEST_VULKAN_CONV_DIRECT=1 takes the direct shaders always.
 */
#include "backends/vulkan/vk_internal.h"
#include "engine/window.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Scratch (columns, partial products) per chunk of images: at most 256 MiB, half a
 * sub-allocation block (so it comes from the pooled blocks, not a fresh dedicated
 * allocation each call) and one binding's maxStorageBufferRange; an image needing more takes
 * the direct shader. */
#define CONV_COL_BYTES ((int64_t)256 << 20)

static int64_t conv_col_cap(const vk_device *vd)
{
    int64_t cap = CONV_COL_BYTES;
    if ((uint64_t)cap > vd->block_size / 2) cap = (int64_t)(vd->block_size / 2);
    if ((uint64_t)cap > vd->max_range - VK_ALIGN) cap = (int64_t)(vd->max_range - VK_ALIGN);
    return cap;
}

/* Images a chunk holds when one needs per_img bytes of scratch: what the cap allows, 1 to n.
 * TENSORD_TEST_CONV_COL_BYTES (a test hook, as on CUDA) lowers the cap here, so that the
 * conformance cases run one image a chunk. */
static int64_t conv_chunk(int64_t per_img, int64_t n, int64_t cap)
{
    const char *e = getenv("TENSORD_TEST_CONV_COL_BYTES");
    const long long v = e != NULL ? atoll(e) : 0;
    if (v > 0 && v < cap) cap = (int64_t)v;
    const int64_t chunk = cap / per_img;
    return chunk < 1 ? 1 : chunk > n ? n : chunk;
}

/* The window words both window.comp and conv.comp read from VK_P_I on. */
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

/* conv.comp's own words (after the window's) */
enum { CW_N0 = 32, CW_NIMG = 33, CW_KG = 34, CW_ONE = 35, CW_NE = 37, CW_FIRST = 38, CW_LAST = 39 };

/* ---- lavapipe's loop cap: what an invocation of each shader loops ---- */

/* Loop iterations of a 3-deep nest of m[0] x m[1] x m[2] (each level's iterations count:
 * gallivm's limiter is one counter per invocation, decremented at every loop's end). */
static int64_t nest3(int64_t m0, int64_t m1, int64_t m2)
{
    return m0 + m0 * m1 + m0 * m1 * m2;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Iterations one invocation of the 256-wide grid-stride shaders (window.comp, conv.comp)
 * runs when `total` elements each take `body` iterations: the grid-stride loop around them
 * and a margin of 16 for the fixed loops (over the 3 spatial dims) the compiler may keep. */
static int64_t grid_iters(int64_t total, int64_t body)
{
    const int64_t grid = (int64_t)65535 * 256;
    return (total + grid - 1) / grid * (body + 1 + 16);
}

/* The loop iterations of one invocation of window.comp (exec_direct) for this op: the
 * CPU's loop per output element, in the grid-stride loop. Upper bounds (windows counted
 * unclipped where clipping depends on the position). */
static int64_t direct_iters(const td__op *op, const td__window *w, int64_t nout)
{
    const int64_t *k = w->k, *in = w->in, *out = w->out;
    int64_t m[3], body = 0;
    switch (op->opcode) {
    case TD_OP_CONV_WEIGHT_GRAD: { /* a workgroup per weight: its chunk, then the tree */
        const int64_t chunk = (w->n * td__window_prod(out) + 255) / 256;
        return (nout + 65534) / 65535 * (chunk + 8 + 1 + 16);
    }
    case TD_OP_CONV:
    case TD_OP_CONV_TRANSPOSE:
        body = w->c / w->groups * (1 + nest3(k[0], k[1], k[2]));
        break;
    case TD_OP_MAX_POOL:
    case TD_OP_MAX_POOL_INDICES:
    case TD_OP_MAX_POOL_BACKWARD:
        body = nest3(k[0], k[1], k[2]);
        break;
    case TD_OP_AVG_POOL:
        for (int d = 0; d < 3; d++) m[d] = min64(k[d], in[d]);
        body = nest3(m[0], m[1], m[2]);
        break;
    case TD_OP_AVG_POOL_BACKWARD:
        for (int d = 0; d < 3; d++) m[d] = min64(out[d], (k[d] - 1) / w->stride[d] + 1);
        body = nest3(m[0], m[1], m[2]);
        break;
    case TD_OP_ADAPTIVE_AVG_POOL:
        for (int d = 0; d < 3; d++) m[d] = min64(in[d], in[d] / (out[d] > 0 ? out[d] : 1) + 2);
        body = nest3(m[0], m[1], m[2]);
        break;
    case TD_OP_ADAPTIVE_AVG_POOL_BACKWARD: /* and a loop over the 3 dims per window */
        for (int d = 0; d < 3; d++) m[d] = min64(out[d], out[d] / (in[d] > 0 ? in[d] : 1) + 2);
        body = nest3(m[0], m[1], m[2]) + 3 * m[0] * m[1] * m[2];
        break;
    default: /* INTERPOLATE: fixed loops only */
        break;
    }
    return grid_iters(nout, body);
}

/* ---- the direct shaders (window.comp) ---- */

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

/* ---- the convolutions as GEMMs ---- */

/* One conv-as-GEMM run: its shape, the scratch it holds and what failed. */
typedef struct conv_run {
    vk_device *vd;
    const td__op *op;
    const td__window *w;
    uint32_t dtype;
    size_t esize;       /* bytes of an element of the op's dtype */
    size_t tsize;       /* bytes of an intermediate (f32 for f32/f16/bf16, f64 for f64) */
    int64_t G, cg, cog, kk, P, L;
    void *buf[3];       /* scratch, released by conv_run_fini */
    size_t nbytes[3];
    char *err;
    size_t errlen;
} conv_run;

static void conv_run_init(conv_run *r, vk_device *vd, const td__op *op, const td__window *w,
                          uint32_t dtype, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    r->vd = vd;
    r->op = op;
    r->w = w;
    r->dtype = dtype;
    r->esize = td__dtype_size(dtype);
    r->tsize = dtype == TD_F64 ? 8 : 4;
    r->G = w->groups;
    r->cg = w->c / w->groups;
    r->cog = w->co / w->groups;
    r->kk = w->k[0] * w->k[1] * w->k[2];
    r->P = w->out[0] * w->out[1] * w->out[2];
    r->L = w->in[0] * w->in[1] * w->in[2];
    r->err = err;
    r->errlen = errlen;
}

static void conv_run_fini(conv_run *r)
{
    for (int i = 0; i < 3; i++)
        if (r->buf[i] != NULL) td__vk_release_locked(r->vd, r->buf[i], r->nbytes[i]);
}

/* Scratch buffer i of nbytes with elements of esize as a binding, or TD_EUNSUPPORTED (the
 * caller takes the direct shader) when the device has no memory for it. */
static td_status conv_scratch(conv_run *r, int i, size_t nbytes, size_t esize, vk_arg *out)
{
    td_status s = td__vk_alloc_locked(r->vd, nbytes, &r->buf[i]);
    if (s == TD_ENOMEM) return TD_EUNSUPPORTED;
    if (s != TD_OK)
        return td__vk_fail(r->err, r->errlen, s, "%s: cannot allocate %zu bytes of scratch on "
                           "vulkan:%d", td__op_name(r->op->opcode), nbytes, r->vd->index);
    r->nbytes[i] = nbytes;
    *out = (vk_arg){r->buf[i], nbytes, esize};
    return TD_OK;
}

/* Whether a batched GEMM of m x n outputs over nb entries with inner size k fits the
 * dispatch grid (64 x 64 tiles, 65535 workgroups a dimension) and lavapipe's loop cap (the
 * batch loop times matmul.comp's k loop). */
static bool gemm_fits(const vk_device *vd, int64_t m, int64_t n, int64_t k, int64_t nb)
{
    return m <= (int64_t)65535 * 64 && n <= (int64_t)65535 * 64 &&
           td__vk_loops_ok(vd, (nb + 65534) / 65535 * (k + (k + 15) / 16 + 1));
}

/* Whether a conv.comp pass of `total` invocations, each looping `iters` times, keeps within
 * lavapipe's loop cap once the grid-stride loop is counted. */
static bool pass_fits(const vk_device *vd, int64_t total, int64_t iters)
{
    return td__vk_loops_ok(vd, grid_iters(total, iters));
}

/* The loops of conv.comp's write_patch and col2im: the kernel's 3-deep nest. */
static int64_t kernel_iters(const td__window *w)
{
    return nest3(w->k[0], w->k[1], w->k[2]);
}

/* The GEMM variant: matmul.comp's BLK (64 x 64 tiles, 4 x 4 outputs an invocation) with
 * shared-memory tiles on a GPU, without (NOSH) on a CPU implementation; of the op's dtype,
 * or for f16/bf16 with f32 outputs (`f32_out`) the OF32 one. f16 on a device with
 * cooperative matrices: matmul_coop.comp's (128 x 128 blocks; f32 sums in the tensor cores'
 * order, within the same bound: its header). */
static void gemm_name(const vk_device *vd, char *name, size_t len, uint32_t dtype, bool f32_out)
{
    if (dtype == TD_F16 && td__vk_coop_name(vd, f32_out, name, len)) return;
    snprintf(name, len, "%s_%s%s", vd->cpu_impl ? "mc" : "mb", td__vk_dtype_name(dtype),
             f32_out && (dtype == TD_F16 || dtype == TD_BF16) ? "_f32" : "");
}

/* out[i, j] = a[i, j] [m, k] times b[i, j] [k, n] over the nb0 x nb1 batch, a and b found
 * through the batch strides sa, sb (elements), written contiguously in batch order. */
static td_status gemm(conv_run *r, const char *name, int64_t nb0, int64_t nb1,
                      const int64_t sa[2], const int64_t sb[2], int64_t m, int64_t n, int64_t k,
                      vk_arg o, vk_arg a, vk_arg b)
{
    uint32_t p[VK_PARAM_WORDS];
    memset(p, 0, sizeof p);
    uint32_t *q = p + VK_P_I;
    const int64_t nb = nb0 * nb1;
    q[0] = (uint32_t)m;
    q[1] = (uint32_t)n;
    q[2] = (uint32_t)k;
    q[3] = (uint32_t)nb;
    q[4] = 2;
    q[5] = (uint32_t)nb0;
    q[6] = (uint32_t)nb1;
    q[11] = (uint32_t)sa[0];
    q[12] = (uint32_t)sa[1];
    q[17] = (uint32_t)sb[0];
    q[18] = (uint32_t)sb[1];
    const vk_arg args[3] = {o, a, b};
    const int64_t tile = strncmp(name, "mx_", 3) == 0 ? 128 : 64; /* gemm_name's variants */
    return td__vk_dispatch(r->vd, name, TD_OP_MATMUL, p, args, 3, (uint32_t)((n + tile - 1) / tile),
                           (uint32_t)((m + tile - 1) / tile), nb > 65535 ? 65535 : (uint32_t)nb,
                           r->err, r->errlen);
}

/* A conv.comp pass of `total` invocations: the window words, then `extra` (index, value)
 * pairs of its own words. */
static td_status conv_pass(conv_run *r, const char *name, int64_t total, const uint32_t *extra,
                           int nextra, const vk_arg *args, int nargs)
{
    uint32_t p[VK_PARAM_WORDS];
    memset(p, 0, sizeof p);
    p[VK_P_N] = (uint32_t)total;
    window_words(r->w, r->op, p + VK_P_I);
    for (int i = 0; i < nextra; i++) p[VK_P_I + extra[2 * i]] = extra[2 * i + 1];
    return td__vk_dispatch(r->vd, name, r->op->opcode, p, args, nargs,
                           td__vk_groups_for((uint64_t)total, 256), 1, 1, r->err, r->errlen);
}

/* The bits of 1 in the dtype (im2col's bias row). */
static uint64_t one_bits(uint32_t dtype)
{
    switch (dtype) {
    case TD_F64: return 0x3ff0000000000000ull;
    case TD_F16: return 0x3c00u;
    case TD_BF16: return 0x3f80u;
    default: return 0x3f800000u;
    }
}

/* Element counts the shaders index in 32-bit signed arithmetic. */
static bool small(const td__desc *d)
{
    return td__vk_nelem(d) < ((int64_t)1 << 31);
}

/* Whether the op runs as GEMMs on this device (shape only: its scratch may still fail to
 * allocate): the images a chunk holds and the scratch bytes of one image (conv_forward:
 * columns; conv_wgrad: transposed columns, without the partial products; conv_transpose:
 * the GEMM's columns). The dispatch grid and lavapipe's loop cap are checked for every pass
 * the op records. */
static bool conv_plan(const vk_device *vd, uint32_t opcode, bool bias, const td__window *w,
                      size_t esize, int64_t *chunk_out, int64_t *per_img_out)
{
    const int64_t G = w->groups, cg = w->c / G, cog = w->co / G;
    const int64_t kk = td__window_prod(w->k), P = td__window_prod(w->out);
    const int64_t L = td__window_prod(w->in), tsize = esize == 8 ? 8 : 4;
    const int64_t cap = conv_col_cap(vd);
    int64_t per_img, chunk;
    if (w->n <= 0) return false;
    if (opcode == TD_OP_CONV) {
        const int64_t kg = cg * kk + (bias ? 1 : 0);
        if (__builtin_mul_overflow(G * kg, P * (int64_t)esize, &per_img) || per_img <= 0 ||
            per_img > cap)
            return false;
        chunk = conv_chunk(per_img, w->n, cap);
        if (!gemm_fits(vd, cog, P, kg, chunk * G) ||
            !pass_fits(vd, chunk * G * (cg + 1) * P, kernel_iters(w)))
            return false;
    } else if (opcode == TD_OP_CONV_WEIGHT_GRAD) {
        const int64_t kin = cg * kk, ne = w->co * kin;
        int64_t part_img;
        if (__builtin_mul_overflow(G * kin, P * (int64_t)esize, &per_img) ||
            __builtin_mul_overflow(ne, tsize, &part_img) || per_img <= 0 ||
            per_img + part_img > cap)
            return false;
        chunk = conv_chunk(per_img + part_img, w->n, cap);
        if (!gemm_fits(vd, cog, kin, P, chunk * G) ||
            !pass_fits(vd, chunk * G * cg * P, kernel_iters(w)) || !pass_fits(vd, ne, chunk))
            return false;
    } else {
        const int64_t rk = cog * kk;
        if (__builtin_mul_overflow(G * rk, L * tsize, &per_img) || per_img <= 0 ||
            per_img > cap)
            return false;
        chunk = conv_chunk(per_img, w->n, cap);
        if (!gemm_fits(vd, rk, L, cg, chunk * G) ||
            !pass_fits(vd, chunk * w->co * P, kernel_iters(w)))
            return false;
    }
    *chunk_out = chunk;
    *per_img_out = per_img;
    return true;
}

/* CONV: im2col per chunk of images, then one batched GEMM (see the top). */
static td_status conv_forward(conv_run *r, const td__view *in, const td__view *out)
{
    const td__window *w = r->w;
    const bool bias = r->op->n_inputs > 2;
    const int64_t G = r->G, cg = r->cg, cog = r->cog, kk = r->kk, P = r->P;
    const int64_t kin = cg * kk, kg = kin + (bias ? 1 : 0);
    int64_t chunk, per_img;
    if (!conv_plan(r->vd, r->op->opcode, bias, w, r->esize, &chunk, &per_img))
        return TD_EUNSUPPORTED;
    vk_arg wa = td__vk_arg_of(&in[1]), col;
    td_status s = TD_OK;
    if (bias) /* wa [CO, kg]: the weights, then the bias as column kin */
        s = conv_scratch(r, 0, (size_t)(w->co * kg) * r->esize, r->esize, &wa);
    if (s == TD_OK) s = conv_scratch(r, 1, (size_t)(chunk * per_img), r->esize, &col);
    if (s != TD_OK) return s;
    if (bias) {
        td__desc sh = {.dtype = r->dtype, .rank = 2, .dims = {w->co, kin}};
        int64_t st[2][TD_MAX_RANK] = {{kg, 1}, {kin, 1}};
        s = td__vk_copy_walk(r->vd, &sh, st, wa, td__vk_arg_of(&in[1]), r->err, r->errlen);
        td__desc shb = {.dtype = r->dtype, .rank = 1, .dims = {w->co}};
        int64_t stb[2][TD_MAX_RANK] = {{kg}, {1}};
        vk_arg wb = wa;
        wb.data = (const char *)wa.data + (size_t)kin * r->esize;
        wb.nbytes -= (size_t)kin * r->esize;
        if (s == TD_OK)
            s = td__vk_copy_walk(r->vd, &shb, stb, wb, td__vk_arg_of(&in[2]), r->err, r->errlen);
    }
    char ci[16], mm[24];
    snprintf(ci, sizeof ci, "ci_w%zu", r->esize);
    gemm_name(r->vd, mm, sizeof mm, r->dtype, false);
    const uint64_t one = one_bits(r->dtype);
    for (int64_t n0 = 0; n0 < w->n && s == TD_OK; n0 += chunk) {
        const int64_t nimg = w->n - n0 < chunk ? w->n - n0 : chunk;
        const uint32_t words[] = {CW_N0, (uint32_t)n0, CW_NIMG, (uint32_t)nimg,
                                  CW_KG, (uint32_t)kg, CW_ONE, (uint32_t)one,
                                  CW_ONE + 1, (uint32_t)(one >> 32)};
        const vk_arg pa[2] = {col, td__vk_arg_of(&in[0])};
        s = conv_pass(r, ci, nimg * G * (cg + (bias ? 1 : 0)) * P, words, 5, pa, 2);
        if (s != TD_OK) break;
        /* batch (image j, group g): [cog, kg] weights of g times [kg, P] columns */
        vk_arg o = td__vk_arg_of(out);
        const size_t skip = (size_t)(n0 * w->co * P) * r->esize;
        o.data = (const char *)o.data + skip;
        o.nbytes -= skip;
        const int64_t sa[2] = {0, cog * kg}, sb[2] = {G * kg * P, kg * P};
        s = gemm(r, mm, nimg, G, sa, sb, cog, P, kg, o, wa, col);
    }
    return s;
}

/* CONV_WEIGHT_GRAD: transposed im2col, a GEMM per image and group, the images summed in
 * order (see the top). */
static td_status conv_wgrad(conv_run *r, const td__view *in, const td__view *out)
{
    const td__window *w = r->w;
    const int64_t G = r->G, cg = r->cg, cog = r->cog, kk = r->kk, P = r->P;
    const int64_t kin = cg * kk, ne = w->co * kin;
    int64_t chunk, per_img;
    if (!conv_plan(r->vd, r->op->opcode, false, w, r->esize, &chunk, &per_img))
        return TD_EUNSUPPORTED;
    const int64_t part_img = ne * (int64_t)r->tsize;
    vk_arg colt, part, acc;
    td_status s = conv_scratch(r, 0, (size_t)(chunk * per_img), r->esize, &colt);
    if (s == TD_OK) s = conv_scratch(r, 1, (size_t)(chunk * part_img), r->tsize, &part);
    if (s == TD_OK) s = conv_scratch(r, 2, (size_t)ne * r->tsize, r->tsize, &acc);
    if (s != TD_OK) return s;
    char cj[16], mm[24], cn[16];
    snprintf(cj, sizeof cj, "cj_w%zu", r->esize);
    gemm_name(r->vd, mm, sizeof mm, r->dtype, true);
    snprintf(cn, sizeof cn, "cn_%s", td__vk_dtype_name(r->dtype));
    for (int64_t n0 = 0; n0 < w->n && s == TD_OK; n0 += chunk) {
        const int64_t nimg = w->n - n0 < chunk ? w->n - n0 : chunk;
        const uint32_t words[] = {CW_N0, (uint32_t)n0, CW_NIMG, (uint32_t)nimg,
                                  CW_NE, (uint32_t)ne, CW_FIRST, n0 == 0,
                                  CW_LAST, n0 + nimg >= w->n};
        const vk_arg pa[2] = {colt, td__vk_arg_of(&in[0])};
        s = conv_pass(r, cj, nimg * G * cg * P, words, 2, pa, 2);
        if (s != TD_OK) break;
        /* batch (image j, group g): dY[n0 + j, g] [cog, P] times colT[j, g] [P, kin] */
        vk_arg dy = td__vk_arg_of(&in[1]);
        const size_t skip = (size_t)(n0 * w->co * P) * r->esize;
        dy.data = (const char *)dy.data + skip;
        dy.nbytes -= skip;
        const int64_t sa[2] = {w->co * P, cog * P}, sb[2] = {G * P * kin, P * kin};
        s = gemm(r, mm, nimg, G, sa, sb, cog, kin, P, part, dy, colt);
        if (s != TD_OK) break;
        const vk_arg sa3[3] = {td__vk_arg_of(out), part, acc};
        s = conv_pass(r, cn, ne, words, 5, sa3, 3);
    }
    return s;
}

/* CONV_TRANSPOSE: the transposed weights once, then per chunk a GEMM per image and group and
 * the gathering col2im (see the top). */
static td_status conv_transpose(conv_run *r, const td__view *in, const td__view *out)
{
    const td__window *w = r->w;
    const int64_t G = r->G, cg = r->cg, cog = r->cog, kk = r->kk, P = r->P, L = r->L;
    const int64_t rk = cog * kk;
    int64_t chunk, per_img;
    if (!conv_plan(r->vd, r->op->opcode, false, w, r->esize, &chunk, &per_img))
        return TD_EUNSUPPORTED;
    vk_arg wt, cols;
    td_status s = conv_scratch(r, 0, (size_t)(G * rk * cg) * r->esize, r->esize, &wt);
    if (s == TD_OK) s = conv_scratch(r, 1, (size_t)(chunk * per_img), r->tsize, &cols);
    if (s != TD_OK) return s;
    { /* wt[g][r][c] = w[g cg + c][r]: the weight [C, CO/G kk] per group, transposed */
        td__desc sh = {.dtype = r->dtype, .rank = 3, .dims = {G, rk, cg}};
        int64_t st[2][TD_MAX_RANK] = {{rk * cg, cg, 1}, {cg * rk, 1, rk}};
        s = td__vk_copy_walk(r->vd, &sh, st, wt, td__vk_arg_of(&in[1]), r->err, r->errlen);
    }
    char mm[24], cc[16];
    gemm_name(r->vd, mm, sizeof mm, r->dtype, true);
    snprintf(cc, sizeof cc, "cc_%s", td__vk_dtype_name(r->dtype));
    const bool bias = r->op->n_inputs > 2;
    for (int64_t n0 = 0; n0 < w->n && s == TD_OK; n0 += chunk) {
        const int64_t nimg = w->n - n0 < chunk ? w->n - n0 : chunk;
        /* batch (image j, group g): wt[g] [rk, cg] times x[n0 + j, g] [cg, L] */
        vk_arg x = td__vk_arg_of(&in[0]);
        const size_t skip = (size_t)(n0 * w->c * L) * r->esize;
        x.data = (const char *)x.data + skip;
        x.nbytes -= skip;
        const int64_t sa[2] = {0, rk * cg}, sb[2] = {w->c * L, cg * L};
        s = gemm(r, mm, nimg, G, sa, sb, rk, L, cg, cols, wt, x);
        if (s != TD_OK) break;
        vk_arg y = td__vk_arg_of(out);
        const size_t yskip = (size_t)(n0 * w->co * P) * r->esize;
        y.data = (const char *)y.data + yskip;
        y.nbytes -= yskip;
        const uint32_t words[] = {CW_N0, (uint32_t)n0, CW_NIMG, (uint32_t)nimg};
        const vk_arg pa[3] = {y, cols, bias ? td__vk_arg_of(&in[2]) : cols};
        s = conv_pass(r, cc, nimg * w->co * P, words, 2, pa, 3);
    }
    return s;
}

/* Whether the conv op's tensors are indexed within the GEMM path's 32-bit arithmetic. */
static bool conv_small(const td__op *op, const td__desc *const *in, const td__desc *out)
{
    for (uint32_t k = 0; k < op->n_inputs; k++)
        if (!small(in[k])) return false;
    return small(out);
}

/* The conv op as GEMMs; TD_EUNSUPPORTED (nothing that matters recorded, no message) where it
 * does not apply and the caller runs the direct shader. */
static td_status conv_gemm(vk_device *vd, const td__op *op, const td__view *in,
                           const td__view *out, const td__window *w, char *err, size_t errlen)
{
    const td__desc *d[TD_OP_MAX_INPUTS];
    for (uint32_t k = 0; k < op->n_inputs; k++) d[k] = &in[k].desc;
    if (!conv_small(op, d, &out->desc) || w->n == 0) return TD_EUNSUPPORTED;
    conv_run r;
    conv_run_init(&r, vd, op, w, out->desc.dtype, err, errlen);
    td_status s;
    switch (op->opcode) {
    case TD_OP_CONV: s = conv_forward(&r, in, out); break;
    case TD_OP_CONV_WEIGHT_GRAD: s = conv_wgrad(&r, in, out); break;
    default: s = conv_transpose(&r, in, out); break;
    }
    conv_run_fini(&r);
    return s;
}

/* TENSORD_TEST_VULKAN_CONV_DIRECT=1 (a test hook): the direct shaders only, so that the
 * conformance suite covers the fallback too. */
static bool direct_only(void)
{
    const char *direct = getenv("TENSORD_TEST_VULKAN_CONV_DIRECT");
    return direct != NULL && direct[0] == '1';
}

bool td__vk_window_loops_ok(const vk_device *vd, const td__op *op, const td__desc *const *in,
                            const td__desc *out, int64_t *iters)
{
    *iters = 0;
    if (!vd->cpu_impl || td__vk_nelem(out) <= 0) return true;
    td__window w;
    td__window_decode(op, in[0], op->n_inputs > 1 ? in[1] : NULL, out, &w);
    int64_t chunk, per_img;
    if (td__op_class(op->opcode) == TD_OPCLASS_CONV && !direct_only() && conv_small(op, in, out) &&
        conv_plan(vd, op->opcode, op->n_inputs > 2, &w, td__dtype_size(out->dtype), &chunk,
                  &per_img))
        return true;
    *iters = direct_iters(op, &w, td__vk_nelem(out));
    return td__vk_loops_ok(vd, *iters);
}

td_status td__vk_exec_window(vk_device *vd, const td__op *op, const td__view *in,
                             const td__view *out, char *err, size_t errlen)
{
    const int64_t nout = td__vk_nelem(&out->desc);
    if (nout <= 0) return TD_OK;
    td__window w;
    td__window_decode(op, &in[0].desc, op->n_inputs > 1 ? &in[1].desc : NULL, &out->desc, &w);
    if (td__op_class(op->opcode) == TD_OPCLASS_CONV && !direct_only()) {
        const td_status s = conv_gemm(vd, op, in, out, &w, err, errlen);
        if (s != TD_EUNSUPPORTED) return s;
    }
    /* supports_op checked the path it expected; this one is reached when the GEMM's scratch
     * could not be allocated */
    const int64_t iters = direct_iters(op, &w, nout);
    if (!td__vk_loops_ok(vd, iters))
        return td__vk_fail(err, errlen, TD_EUNSUPPORTED,
                           "%s: not supported on device vulkan:%d for dtype %s: the direct "
                           "shader would loop %lld times an invocation, above this CPU "
                           "implementation's limit of 60000 (no scratch for the GEMM path)",
                           td__op_name(op->opcode), vd->index,
                           td__vk_dtype_name(out->desc.dtype), (long long)iters);
    return exec_direct(vd, op, in, out, &w, err, errlen);
}
