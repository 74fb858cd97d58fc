/* cpu_window_impl.h — the typed half of cpu_window.c, included once per working type with
 * T (float or double) and SUF (a name suffix) defined. Each function does planes [lo, hi)
 * of the flattened [N, C]; cpu_window.c's header says what each computes. */

static void TD_CAT(maxpool, SUF)(void *ctx, int64_t lo, int64_t hi)
{
    const win_ctx *cx = ctx;
    const td__window *w = &cx->w;
    const int64_t IP = td__window_prod(w->in), OP = td__window_prod(w->out);
    const bool want_idx = cx->opcode == TD_OP_MAX_POOL_INDICES;
    for (int64_t pl = lo; pl < hi; pl++) {
        const T *x = (const T *)cx->x + pl * IP;
        for (int64_t j = 0; j < OP; j++) {
            const int64_t od = j / (w->out[1] * w->out[2]), oh = (j / w->out[2]) % w->out[1];
            const int64_t ow = j % w->out[2];
            T best = -(T)INFINITY;
            int64_t bi = -1;
            for (int64_t kd = 0; kd < w->k[0]; kd++) {
                const int64_t id = od * w->stride[0] - w->pad_lo[0] + kd * w->dil[0];
                if (id < 0 || id >= w->in[0]) continue;
                for (int64_t kh = 0; kh < w->k[1]; kh++) {
                    const int64_t ih = oh * w->stride[1] - w->pad_lo[1] + kh * w->dil[1];
                    if (ih < 0 || ih >= w->in[1]) continue;
                    for (int64_t kw = 0; kw < w->k[2]; kw++) {
                        const int64_t iw = ow * w->stride[2] - w->pad_lo[2] + kw * w->dil[2];
                        if (iw < 0 || iw >= w->in[2]) continue;
                        const int64_t pos = (id * w->in[1] + ih) * w->in[2] + iw;
                        const T v = x[pos];
                        if (bi < 0) bi = pos;
                        if (v > best || v != v) {
                            best = v;
                            bi = pos;
                        }
                    }
                }
            }
            if (want_idx) ((int64_t *)cx->y)[pl * OP + j] = bi;
            else ((T *)cx->y)[pl * OP + j] = best;
        }
    }
}

/* The index entry j of plane pl (i32 or i64 indices). */
static inline int64_t TD_CAT(index_at, SUF)(const win_ctx *cx, int64_t k)
{
    return cx->idx32 ? ((const int32_t *)cx->idx)[k] : ((const int64_t *)cx->idx)[k];
}

static void TD_CAT(maxpool_bwd, SUF)(void *ctx, int64_t lo, int64_t hi)
{
    const win_ctx *cx = ctx;
    const td__window *w = &cx->w;
    const int64_t IP = td__window_prod(w->in), OP = td__window_prod(w->out);
    for (int64_t pl = lo; pl < hi; pl++) {
        const T *dy = (const T *)cx->x + pl * OP;
        T *dx = (T *)cx->y + pl * IP;
        for (int64_t i = 0; i < IP; i++) {
            const int64_t id = i / (w->in[1] * w->in[2]), ih = (i / w->in[2]) % w->in[1];
            const int64_t iw = i % w->in[2];
            T sum = (T)0;
            /* kernel offsets descending: the windows j ascending */
            for (int64_t kd = w->k[0] - 1; kd >= 0; kd--) {
                const int64_t td = id + w->pad_lo[0] - kd * w->dil[0];
                if (td < 0 || td % w->stride[0] != 0 || td / w->stride[0] >= w->out[0]) continue;
                for (int64_t kh = w->k[1] - 1; kh >= 0; kh--) {
                    const int64_t th = ih + w->pad_lo[1] - kh * w->dil[1];
                    if (th < 0 || th % w->stride[1] != 0 || th / w->stride[1] >= w->out[1])
                        continue;
                    for (int64_t kw = w->k[2] - 1; kw >= 0; kw--) {
                        const int64_t tw = iw + w->pad_lo[2] - kw * w->dil[2];
                        if (tw < 0 || tw % w->stride[2] != 0 || tw / w->stride[2] >= w->out[2])
                            continue;
                        const int64_t j = ((td / w->stride[0]) * w->out[1] + th / w->stride[1]) *
                                              w->out[2] +
                                          tw / w->stride[2];
                        if (TD_CAT(index_at, SUF)(cx, pl * OP + j) == i) sum += dy[j];
                    }
                }
            }
            dx[i] = sum;
        }
    }
}

static void TD_CAT(avgpool, SUF)(void *ctx, int64_t lo, int64_t hi)
{
    const win_ctx *cx = ctx;
    const td__window *w = &cx->w;
    const int64_t IP = td__window_prod(w->in), OP = td__window_prod(w->out);
    for (int64_t pl = lo; pl < hi; pl++) {
        const T *x = (const T *)cx->x + pl * IP;
        for (int64_t j = 0; j < OP; j++) {
            const int64_t o[3] = {j / (w->out[1] * w->out[2]), (j / w->out[2]) % w->out[1],
                                  j % w->out[2]};
            int64_t s[3], e[3], ext[3];
            for (int d = 0; d < 3; d++) td__avg_window(w, d, o[d], &s[d], &e[d], &ext[d]);
            T sum = (T)0;
            for (int64_t id = s[0]; id < e[0]; id++)
                for (int64_t ih = s[1]; ih < e[1]; ih++)
                    for (int64_t iw = s[2]; iw < e[2]; iw++)
                        sum += x[(id * w->in[1] + ih) * w->in[2] + iw];
            ((T *)cx->y)[pl * OP + j] = sum / (T)(ext[0] * ext[1] * ext[2]);
        }
    }
}

/* The output range [*jlo, *jhi] of the AVG_POOL windows along dim d that hold input i. */
static inline void TD_CAT(avg_range, SUF)(const td__window *w, int d, int64_t i, int64_t *jlo,
                                          int64_t *jhi)
{
    const int64_t t = i + w->pad_lo[d] - w->k[d] + 1;
    *jlo = t <= 0 ? 0 : (t + w->stride[d] - 1) / w->stride[d];
    *jhi = (i + w->pad_lo[d]) / w->stride[d];
    if (*jhi > w->out[d] - 1) *jhi = w->out[d] - 1;
}

static void TD_CAT(avgpool_bwd, SUF)(void *ctx, int64_t lo, int64_t hi)
{
    const win_ctx *cx = ctx;
    const td__window *w = &cx->w;
    const int64_t IP = td__window_prod(w->in), OP = td__window_prod(w->out);
    for (int64_t pl = lo; pl < hi; pl++) {
        const T *dy = (const T *)cx->x + pl * OP;
        T *dx = (T *)cx->y + pl * IP;
        for (int64_t i = 0; i < IP; i++) {
            const int64_t in3[3] = {i / (w->in[1] * w->in[2]), (i / w->in[2]) % w->in[1],
                                    i % w->in[2]};
            int64_t a[3], b[3];
            for (int d = 0; d < 3; d++) TD_CAT(avg_range, SUF)(w, d, in3[d], &a[d], &b[d]);
            T sum = (T)0;
            for (int64_t jd = a[0]; jd <= b[0]; jd++)
                for (int64_t jh = a[1]; jh <= b[1]; jh++)
                    for (int64_t jw = a[2]; jw <= b[2]; jw++) {
                        int64_t s, e, x0, x1, x2;
                        td__avg_window(w, 0, jd, &s, &e, &x0);
                        td__avg_window(w, 1, jh, &s, &e, &x1);
                        td__avg_window(w, 2, jw, &s, &e, &x2);
                        sum += dy[(jd * w->out[1] + jh) * w->out[2] + jw] / (T)(x0 * x1 * x2);
                    }
            dx[i] = sum;
        }
    }
}

static void TD_CAT(adaptive, SUF)(void *ctx, int64_t lo, int64_t hi)
{
    const win_ctx *cx = ctx;
    const td__window *w = &cx->w;
    const int64_t IP = td__window_prod(w->in), OP = td__window_prod(w->out);
    for (int64_t pl = lo; pl < hi; pl++) {
        const T *x = (const T *)cx->x + pl * IP;
        for (int64_t j = 0; j < OP; j++) {
            const int64_t o[3] = {j / (w->out[1] * w->out[2]), (j / w->out[2]) % w->out[1],
                                  j % w->out[2]};
            int64_t s[3], e[3];
            for (int d = 0; d < 3; d++) td__adaptive_window(o[d], w->in[d], w->out[d], &s[d], &e[d]);
            T sum = (T)0;
            for (int64_t id = s[0]; id < e[0]; id++)
                for (int64_t ih = s[1]; ih < e[1]; ih++)
                    for (int64_t iw = s[2]; iw < e[2]; iw++)
                        sum += x[(id * w->in[1] + ih) * w->in[2] + iw];
            ((T *)cx->y)[pl * OP + j] = sum / (T)((e[0] - s[0]) * (e[1] - s[1]) * (e[2] - s[2]));
        }
    }
}

static void TD_CAT(adaptive_bwd, SUF)(void *ctx, int64_t lo, int64_t hi)
{
    const win_ctx *cx = ctx;
    const td__window *w = &cx->w;
    const int64_t IP = td__window_prod(w->in), OP = td__window_prod(w->out);
    for (int64_t pl = lo; pl < hi; pl++) {
        const T *dy = (const T *)cx->x + pl * OP;
        T *dx = (T *)cx->y + pl * IP;
        for (int64_t i = 0; i < IP; i++) {
            const int64_t in3[3] = {i / (w->in[1] * w->in[2]), (i / w->in[2]) % w->in[1],
                                    i % w->in[2]};
            int64_t a[3], b[3];
            for (int d = 0; d < 3; d++) {
                /* windows j with start(j) <= i < end(j) */
                a[d] = in3[d] * w->out[d] / w->in[d];
                b[d] = ((in3[d] + 1) * w->out[d] - 1) / w->in[d];
            }
            T sum = (T)0;
            for (int64_t jd = a[0]; jd <= b[0]; jd++)
                for (int64_t jh = a[1]; jh <= b[1]; jh++)
                    for (int64_t jw = a[2]; jw <= b[2]; jw++) {
                        const int64_t j3[3] = {jd, jh, jw};
                        int64_t cnt = 1;
                        for (int d = 0; d < 3; d++) {
                            int64_t s, e;
                            td__adaptive_window(j3[d], w->in[d], w->out[d], &s, &e);
                            cnt *= e - s;
                        }
                        sum += dy[(jd * w->out[1] + jh) * w->out[2] + jw] / (T)cnt;
                    }
            dx[i] = sum;
        }
    }
}

/* INTERPOLATE linear along dim d for output j: indices i0, i1 and weights l0, l1. */
static inline void TD_CAT(lin_coef, SUF)(const td__window *w, int d, int64_t j, int64_t *i0,
                                         int64_t *i1, T *l0, T *l1)
{
    const int64_t L = w->in[d], O = w->out[d];
    T scale, src;
    if (w->align_corners) {
        scale = O > 1 ? (T)(L - 1) / (T)(O - 1) : (T)0;
        src = scale * (T)j;
    } else {
        scale = (T)L / (T)O;
        src = scale * ((T)j + (T)0.5) - (T)0.5;
        if (src < (T)0) src = (T)0;
    }
    *i0 = (int64_t)src;
    *i1 = *i0 + (*i0 < L - 1 ? 1 : 0);
    T lam = src - (T)*i0;
    if (lam < (T)0) lam = (T)0;
    if (lam > (T)1) lam = (T)1;
    *l1 = lam;
    *l0 = (T)1 - lam;
}

static void TD_CAT(interp, SUF)(void *ctx, int64_t lo, int64_t hi)
{
    const win_ctx *cx = ctx;
    const td__window *w = &cx->w;
    const int64_t IP = td__window_prod(w->in), OP = td__window_prod(w->out);
    const int first = TD_WIN_SP - w->nsp;
    for (int64_t pl = lo; pl < hi; pl++) {
        const T *x = (const T *)cx->x + pl * IP;
        for (int64_t j = 0; j < OP; j++) {
            const int64_t o[3] = {j / (w->out[1] * w->out[2]), (j / w->out[2]) % w->out[1],
                                  j % w->out[2]};
            T v;
            if (w->mode == 0) {
                int64_t s[3];
                for (int d = 0; d < 3; d++) s[d] = td__nearest_src(o[d], w->in[d], w->out[d]);
                v = x[(s[0] * w->in[1] + s[1]) * w->in[2] + s[2]];
            } else {
                int64_t i0[3], i1[3];
                T l0[3], l1[3];
                for (int d = 0; d < 3; d++) TD_CAT(lin_coef, SUF)(w, d, o[d], &i0[d], &i1[d], &l0[d], &l1[d]);
                /* nested as PyTorch's separable loop: the last dim innermost */
#define TD_AT(a, b, c) x[((a) * w->in[1] + (b)) * w->in[2] + (c)]
#define TD_LINE(a, b) (TD_AT(a, b, i0[2]) * l0[2] + TD_AT(a, b, i1[2]) * l1[2])
#define TD_PLANE(a) (first <= 1 ? TD_LINE(a, i0[1]) * l0[1] + TD_LINE(a, i1[1]) * l1[1] : TD_LINE(a, i0[1]))
                v = first == 0 ? TD_PLANE(i0[0]) * l0[0] + TD_PLANE(i1[0]) * l1[0] : TD_PLANE(i0[0]);
#undef TD_PLANE
#undef TD_LINE
#undef TD_AT
            }
            ((T *)cx->y)[pl * OP + j] = v;
        }
    }
}
