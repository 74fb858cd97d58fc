/* cpu_dnnl_conv.c — f32 CONV and CONV_TRANSPOSE (conv's input gradient) (1d, 2d, 3d;
 * strides, padding, dilation, groups, bias) through oneDNN's direct convolution and
 * deconvolution, in every build that found oneDNN (-Ddnnl=auto, the default, or enabled;
 * TD_HAVE_DNNL). The im2col + sgemm path of cpu_conv.c stays for every other case and for
 * whatever oneDNN refuses; CONV_WEIGHT_GRAD stays there too: its sum over the batch would
 * cross the units below, and oneDNN's backward-weights primitive reduces across its threads.
 *
 * Layout: tensord stores NC[D]HW rows and [Cout, C/g, k...] weights. The primitive is
 * created with format_tag any, so oneDNN picks its layouts (oneDNN 2.6 on this AVX-512
 * machine: NHWC activations and Acdb32a-style weights for its brgemm kernels); the weight is
 * reordered once per call on the calling thread (CONV_TRANSPOSE's [C, Cout/g, k] weight
 * is read through strides as oneDNN's [g, Cout/g, C/g, k]), and each work unit reorders
 * its images in and its result out. Measured here against the alternatives (BENCHMARKS.md,
 * "oneDNN f32 convolution"): plain NCHW src/dst gets oneDNN's gemm-based conv (slower), and
 * forcing nChw16c its older direct kernel (slower, and its reference kernel for C = 3). Work
 * buffers come from the pool of pre-faulted buffers (cpu_bufpool.h).
 *
 * Determinism: the batch is cut into units of `imgs` images, imgs a function of the shapes
 * alone; each unit is one run of a primitive created for `imgs` images with one OpenMP
 * thread (cpu_dnnl.h says why), on whichever pool thread the device's partition gives it.
 * An output element's bits therefore depend on the shapes and the data only (and on the
 * ISA oneDNN picks for this CPU, as OpenBLAS's kernel does): not on the device's thread
 * count, OMP_NUM_THREADS or timing (tests/unit/backends/cpu_dnnl_conv.c). A batch below
 * MIN_BATCH images stays on the im2col path, which also splits one image's positions.
 *
 * Plans: the primitives of a conv description are built once and kept in a small
 * process-wide cache (PLAN_SLOTS, least recently used evicted when unused), under a mutex;
 * a plan in use is reference counted, so the pool threads and concurrent devices can run
 * one plan at once (oneDNN primitives are safe to execute concurrently, each with its own
 * stream and scratchpad). A description oneDNN refuses is cached as refused.
 */
#include "backends/cpu/cpu_bufpool.h"
#include "backends/cpu/cpu_dnnl.h"
#include "common/alloc.h"
#include "engine/window.h"
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

/* Batches below this stay on cpu_conv.c's path (see above). */
#define MIN_BATCH ((int64_t)4)
/* Images per unit double (powers of two dividing N, keeping MIN_BATCH units) while the
 * doubled unit stays under this many FLOPs, so tiny convs do not pay oneDNN's per-call
 * overhead (memory objects, stream, reorders) for every image. */
#define UNIT_FLOP ((int64_t)4 << 20)
#define PLAN_SLOTS 16

/* The full description: every field int64 so memcmp compares keys. */
typedef struct conv_key {
    int64_t transpose; /* CONV_TRANSPOSE (oneDNN's deconvolution) rather than CONV */
    int64_t nsp, n, c, co, groups, bias;
    int64_t in[TD_WIN_SP], out[TD_WIN_SP], k[TD_WIN_SP], stride[TD_WIN_SP], dil[TD_WIN_SP];
    int64_t pad_lo[TD_WIN_SP], pad_hi[TD_WIN_SP];
} conv_key;

/* Memory descs of a plan: the primitive's src, weights, bias, dst and scratchpad, the
 * user's (plain) src, weights and dst, and the scratchpads of the three reorders. */
enum {
    M_SRC,
    M_WEI,
    M_BIAS,
    M_DST,
    M_SP,
    M_USRC,
    M_UWEI,
    M_UDST,
    M_SRC_SP,
    M_DST_SP,
    M_WEI_SP,
    M_COUNT
};

typedef struct conv_plan {
    conv_key key;
    bool ok;          /* false: oneDNN refused the description */
    bool cached;      /* in the cache (else freed by its last release) */
    int refs;         /* under cache_mu */
    uint64_t used;    /* LRU clock, under cache_mu */
    int64_t imgs;     /* images per unit */
    int64_t img_flop; /* FLOPs of one image (the pool's work estimate) */
    dnnl_primitive_t conv, src_in, dst_out, wei_in; /* reorders NULL when layouts match */
    dnnl_memory_desc_t md[M_COUNT];
    size_t sp_bytes, src_bytes, dst_bytes, wei_bytes; /* blocked buffers (0: not needed) */
} conv_plan;

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static conv_plan *cache[PLAN_SLOTS];
static uint64_t cache_clock;

static void plan_destroy(conv_plan *p)
{
    if (p == NULL) return;
    dnnl_primitive_t prims[4] = {p->conv, p->src_in, p->dst_out, p->wei_in};
    for (int i = 0; i < 4; i++)
        if (prims[i] != NULL) dnnl_primitive_destroy(prims[i]);
    td__free(p);
}

/* A reorder from md[from] to md[to] when they differ (else *prim stays NULL) and the bytes
 * of the blocked side into *bytes. */
static bool reorder_make(conv_plan *p, int from, int to, int sp, int blk, dnnl_primitive_t *prim,
                         size_t *bytes)
{
    if (dnnl_memory_desc_equal(&p->md[from], &p->md[to])) return true;
    *bytes = dnnl_memory_desc_get_size(&p->md[blk]);
    dnnl_primitive_desc_t pd;
    if (!td__dnnl_reorder_pd(&p->md[from], &p->md[to], &pd)) return false;
    const bool ok = td__dnnl_prim(pd, prim, &p->md[sp], &p->sp_bytes);
    dnnl_primitive_desc_destroy(pd);
    return ok;
}

/* Images per unit (see UNIT_FLOP); *flop: the FLOPs of one image (saturated). */
static int64_t unit_images(const conv_key *k, int64_t *flop)
{
    int64_t f = 2 * (k->c / k->groups) * k->co;
    for (int i = 0; i < TD_WIN_SP; i++)
        if (__builtin_mul_overflow(f, k->k[i], &f) ||
            __builtin_mul_overflow(f, k->transpose ? k->in[i] : k->out[i], &f))
            f = INT64_MAX;
    *flop = f;
    int64_t imgs = 1;
    while (f < UNIT_FLOP / (imgs * 2) && k->n % (imgs * 2) == 0 && k->n / (imgs * 2) >= MIN_BATCH)
        imgs *= 2;
    return imgs;
}

/* Build the primitives of key (ok false when oneDNN refuses). NULL: no memory. */
static conv_plan *plan_build(const conv_key *k)
{
    conv_plan *p = td__malloc(sizeof *p);
    if (p == NULL) return NULL;
    memset(p, 0, sizeof *p);
    p->key = *k;
    p->imgs = unit_images(k, &p->img_flop);
    const int nsp = (int)k->nsp, nd = 2 + nsp, off = TD_WIN_SP - nsp;
    static const dnnl_format_tag_t plain[] = {dnnl_a,    dnnl_ab,    dnnl_abc,
                                              dnnl_abcd, dnnl_abcde, dnnl_abcdef};
    dnnl_dims_t sd = {p->imgs, k->c}, dd = {p->imgs, k->co}, wd = {0}, bd = {k->co};
    dnnl_dims_t strides, dil, pl, pr;
    const int wn = k->groups > 1 ? nd + 1 : nd, wo = k->groups > 1 ? 1 : 0;
    if (k->groups > 1) wd[0] = k->groups;
    wd[wo] = k->co / k->groups;
    wd[wo + 1] = k->c / k->groups;
    for (int i = 0; i < nsp; i++) {
        sd[2 + i] = k->in[off + i];
        dd[2 + i] = k->out[off + i];
        wd[wo + 2 + i] = k->k[off + i];
        strides[i] = k->stride[off + i];
        dil[i] = k->dil[off + i] - 1; /* oneDNN counts the gaps */
        pl[i] = k->pad_lo[off + i];
        pr[i] = k->pad_hi[off + i];
    }
    /* CONV_TRANSPOSE's weight is [C, Cout/g, k...]: oneDNN's logical (g, o, i, k...) order
     * over that memory */
    dnnl_dims_t ws;
    ws[wn - 1] = 1;
    for (int i = wn - 2; i >= wo + 2; i--)
        ws[i] = ws[i + 1] * wd[i + 1];
    const int64_t kk = ws[wo + 2] * wd[wo + 2];
    ws[wo] = kk;
    ws[wo + 1] = wd[wo] * kk;
    if (k->groups > 1) ws[0] = wd[wo] * wd[wo + 1] * kk;
    dnnl_memory_desc_t *md = p->md;
    dnnl_convolution_desc_t desc;
    dnnl_deconvolution_desc_t ddesc;
    const int saved = td__dnnl_one_thread();
    bool ok = dnnl_memory_desc_init_by_tag(&md[M_USRC], nd, sd, dnnl_f32, plain[nd - 1]) ==
                  dnnl_success &&
              dnnl_memory_desc_init_by_tag(&md[M_UDST], nd, dd, dnnl_f32, plain[nd - 1]) ==
                  dnnl_success &&
              (k->transpose ? dnnl_memory_desc_init_by_strides(&md[M_UWEI], wn, wd, dnnl_f32, ws)
                            : dnnl_memory_desc_init_by_tag(&md[M_UWEI], wn, wd, dnnl_f32,
                                                           plain[wn - 1])) == dnnl_success &&
              dnnl_memory_desc_init_by_tag(&md[M_SRC], nd, sd, dnnl_f32, dnnl_format_tag_any) ==
                  dnnl_success &&
              dnnl_memory_desc_init_by_tag(&md[M_DST], nd, dd, dnnl_f32, dnnl_format_tag_any) ==
                  dnnl_success &&
              dnnl_memory_desc_init_by_tag(&md[M_WEI], wn, wd, dnnl_f32, dnnl_format_tag_any) ==
                  dnnl_success &&
              (!k->bias ||
               dnnl_memory_desc_init_by_tag(&md[M_BIAS], 1, bd, dnnl_f32, dnnl_a) == dnnl_success);
    const dnnl_memory_desc_t *bmd = k->bias ? &md[M_BIAS] : NULL;
    if (k->transpose)
        ok = ok && dnnl_dilated_deconvolution_forward_desc_init(
                       &ddesc, dnnl_forward_inference, dnnl_deconvolution_direct, &md[M_SRC],
                       &md[M_WEI], bmd, &md[M_DST], strides, dil, pl, pr) == dnnl_success;
    else
        ok = ok && dnnl_dilated_convolution_forward_desc_init(
                       &desc, dnnl_forward_inference, dnnl_convolution_direct, &md[M_SRC],
                       &md[M_WEI], bmd, &md[M_DST], strides, dil, pl, pr) == dnnl_success;
    dnnl_primitive_desc_t pd = NULL;
    ok = ok && td__dnnl_pd(k->transpose ? (const void *)&ddesc : (const void *)&desc, &pd);
    if (ok) {
        md[M_SRC] = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
        md[M_WEI] = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        md[M_DST] = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
        ok = td__dnnl_prim(pd, &p->conv, &md[M_SP], &p->sp_bytes);
    }
    if (pd != NULL) dnnl_primitive_desc_destroy(pd);
    ok = ok && reorder_make(p, M_USRC, M_SRC, M_SRC_SP, M_SRC, &p->src_in, &p->src_bytes) &&
         reorder_make(p, M_DST, M_UDST, M_DST_SP, M_DST, &p->dst_out, &p->dst_bytes) &&
         reorder_make(p, M_UWEI, M_WEI, M_WEI_SP, M_WEI, &p->wei_in, &p->wei_bytes);
    td__dnnl_threads_restore(saved);
    p->ok = ok;
    return p;
}

/* The cached plan of key, built on a miss; NULL when out of memory. Release with
 * plan_release. */
static conv_plan *plan_acquire(const conv_key *k)
{
    pthread_mutex_lock(&cache_mu);
    for (int i = 0; i < PLAN_SLOTS; i++) {
        conv_plan *c = cache[i];
        if (c != NULL && memcmp(&c->key, k, sizeof *k) == 0) {
            c->refs++;
            c->used = ++cache_clock;
            pthread_mutex_unlock(&cache_mu);
            return c;
        }
    }
    pthread_mutex_unlock(&cache_mu);
    conv_plan *p = plan_build(k); /* outside the lock: creation takes milliseconds */
    if (p == NULL) return NULL;
    pthread_mutex_lock(&cache_mu);
    int victim = -1;
    for (int i = 0; i < PLAN_SLOTS; i++) {
        conv_plan *c = cache[i];
        if (c != NULL && memcmp(&c->key, k, sizeof *k) == 0) { /* another thread built it */
            c->refs++;
            c->used = ++cache_clock;
            pthread_mutex_unlock(&cache_mu);
            plan_destroy(p);
            return c;
        }
        if (c != NULL && c->refs > 0) continue; /* in use: never evicted */
        if (victim < 0 || (cache[victim] != NULL && (c == NULL || c->used < cache[victim]->used)))
            victim = i; /* an empty slot, else the least recently used */
    }
    p->refs = 1;
    p->used = ++cache_clock;
    if (victim >= 0) {
        plan_destroy(cache[victim]);
        cache[victim] = p;
        p->cached = true;
    }
    pthread_mutex_unlock(&cache_mu);
    return p;
}

static void plan_release(conv_plan *p)
{
    pthread_mutex_lock(&cache_mu);
    const bool drop = --p->refs == 0 && !p->cached;
    pthread_mutex_unlock(&cache_mu);
    if (drop) plan_destroy(p);
}

/* A work buffer of n bytes (NULL when n is 0 or out of memory): large ones from the pool of
 * pre-faulted buffers (a fresh multi-megabyte malloc page-faults on every call here, which
 * cost more than the reorders themselves), small ones from td__malloc. */
static void *buf_get(size_t n)
{
    if (n == 0) return NULL;
    return n >= TD_CPU_POOL_MIN_BYTES ? td__cpu_pool_alloc(n) : td__malloc(n);
}

static void buf_put(void *b, size_t n)
{
    if (b == NULL) return;
    if (n >= TD_CPU_POOL_MIN_BYTES)
        td__cpu_pool_free(b, n);
    else
        td__free(b);
}

typedef struct run_ctx {
    const conv_plan *p;
    const float *x, *bias;
    void *wei; /* the weight in the primitive's layout */
    float *y;
    int64_t x_img, y_img; /* elements per image */
    atomic_bool failed;
} run_ctx;

/* Units [lo, hi) of `imgs` images each, on this pool thread with one OpenMP thread. */
static void run_units(void *ctx, int64_t lo, int64_t hi)
{
    run_ctx *r = ctx;
    const conv_plan *p = r->p;
    const int saved = td__dnnl_one_thread();
    dnnl_stream_t st = NULL;
    void *sp = buf_get(p->sp_bytes), *src = buf_get(p->src_bytes), *dst = buf_get(p->dst_bytes);
    bool ok = (p->sp_bytes == 0 || sp != NULL) && (p->src_bytes == 0 || src != NULL) &&
              (p->dst_bytes == 0 || dst != NULL) &&
              dnnl_stream_create(&st, td__dnnl_engine(), dnnl_stream_default_flags) == dnnl_success;
    static const int rarg[3] = {DNNL_ARG_FROM, DNNL_ARG_TO, DNNL_ARG_SCRATCHPAD};
    static const int carg[5] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD,
                                DNNL_ARG_BIAS};
    for (int64_t u = lo; u < hi && ok; u++) {
        void *ux = (void *)(r->x + u * p->imgs * r->x_img), *uy = r->y + u * p->imgs * r->y_img;
        void *cs = src != NULL ? src : ux, *cd = dst != NULL ? dst : uy;
        if (src != NULL) {
            const dnnl_memory_desc_t md[3] = {p->md[M_USRC], p->md[M_SRC], p->md[M_SRC_SP]};
            void *const h[3] = {ux, src, sp};
            ok = td__dnnl_exec(p->src_in, st, 3, rarg, md, h);
        }
        const dnnl_memory_desc_t md[5] = {p->md[M_SRC], p->md[M_WEI], p->md[M_DST], p->md[M_SP],
                                          p->md[M_BIAS]};
        void *const h[5] = {cs, r->wei, cd, sp, (void *)r->bias};
        ok = ok && td__dnnl_exec(p->conv, st, r->bias != NULL ? 5 : 4, carg, md, h);
        if (dst != NULL && ok) {
            const dnnl_memory_desc_t mo[3] = {p->md[M_DST], p->md[M_UDST], p->md[M_DST_SP]};
            void *const ho[3] = {dst, uy, sp};
            ok = td__dnnl_exec(p->dst_out, st, 3, rarg, mo, ho);
        }
    }
    if (!ok) atomic_store(&r->failed, true);
    if (st != NULL) dnnl_stream_destroy(st);
    buf_put(sp, p->sp_bytes);
    buf_put(src, p->src_bytes);
    buf_put(dst, p->dst_bytes);
    td__dnnl_threads_restore(saved);
}

/* The weight in the plan's layout: the caller's tensor, or *owned (reordered). */
static bool weight_in(const conv_plan *p, const float *w, void **out, void **owned)
{
    *owned = NULL;
    *out = (void *)w;
    if (p->wei_in == NULL) return true;
    void *sp = buf_get(p->sp_bytes), *blk = buf_get(p->wei_bytes);
    dnnl_stream_t st = NULL;
    const int saved = td__dnnl_one_thread();
    static const int arg[3] = {DNNL_ARG_FROM, DNNL_ARG_TO, DNNL_ARG_SCRATCHPAD};
    const dnnl_memory_desc_t md[3] = {p->md[M_UWEI], p->md[M_WEI], p->md[M_WEI_SP]};
    void *const h[3] = {(void *)w, blk, sp};
    bool ok =
        (p->sp_bytes == 0 || sp != NULL) && blk != NULL &&
        dnnl_stream_create(&st, td__dnnl_engine(), dnnl_stream_default_flags) == dnnl_success &&
        td__dnnl_exec(p->wei_in, st, 3, arg, md, h);
    td__dnnl_threads_restore(saved);
    if (st != NULL) dnnl_stream_destroy(st);
    buf_put(sp, p->sp_bytes);
    if (!ok) {
        buf_put(blk, p->wei_bytes);
        return false;
    }
    *out = *owned = blk;
    return true;
}

bool td__dnnl_conv(const td__cpu_exec *x, const td__op *op, const td__view *in, const td__view *out,
                   td_status *st)
{
    if ((op->opcode != TD_OP_CONV && op->opcode != TD_OP_CONV_TRANSPOSE) ||
        out->desc.dtype != TD_F32)
        return false;
    td__window w;
    td__window_decode(op, &in[0].desc, &in[1].desc, &out->desc, &w);
    if (w.n < MIN_BATCH) return false;
    conv_key k;
    memset(&k, 0, sizeof k);
    k.transpose = op->opcode == TD_OP_CONV_TRANSPOSE;
    k.nsp = w.nsp;
    k.n = w.n;
    k.c = w.c;
    k.co = w.co;
    k.groups = w.groups;
    k.bias = op->n_inputs == 3;
    int64_t img_in = w.c, img_out = w.co;
    for (int i = 0; i < TD_WIN_SP; i++) {
        k.in[i] = w.in[i];
        k.out[i] = w.out[i];
        k.k[i] = w.k[i];
        k.stride[i] = w.stride[i];
        k.dil[i] = w.dil[i];
        k.pad_lo[i] = w.pad_lo[i];
        k.pad_hi[i] = w.pad_hi[i];
        img_in *= w.in[i];
        img_out *= w.out[i];
    }
    if (w.c == 0 || w.co == 0 || img_in == 0 || img_out == 0) return false;
    conv_plan *p = plan_acquire(&k);
    if (p == NULL) return false;
    if (!p->ok) {
        plan_release(p);
        return false;
    }
    run_ctx r = {.p = p,
                 .x = in[0].data,
                 .bias = k.bias ? in[2].data : NULL,
                 .y = out->data,
                 .x_img = img_in,
                 .y_img = img_out};
    atomic_init(&r.failed, false);
    void *owned;
    if (!weight_in(p, in[1].data, &r.wei, &owned)) {
        plan_release(p);
        *st = td__cpu_fail(x, TD_ENOMEM, "conv: oneDNN weight reorder failed (no memory)");
        return true;
    }
    const int64_t units = w.n / p->imgs;
    int64_t cost;
    if (__builtin_mul_overflow(p->img_flop, p->imgs, &cost)) cost = INT64_MAX;
    td__cpu_run(x, units, cost, run_units, &r);
    buf_put(owned, p->wei_bytes);
    plan_release(p);
    *st = atomic_load(&r.failed)
              ? td__cpu_fail(x, TD_ENOMEM, "conv: oneDNN run failed (no memory for a unit)")
              : TD_OK;
    return true;
}
