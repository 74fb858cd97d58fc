/* cpu_conv_impl.h — the typed half of cpu_conv.c, included once per working type with
 * T (float or double), GEMM (cblas_sgemm or cblas_dgemm) and SUF (a name suffix) defined.
 * cpu_conv.c's header comment says what each kernel computes and why it is built this way. */

/* Rows [r0, r1) and columns [p0, p1) of the im2col matrix of one image's group of channels
 * `x` ([cg, in...]): row r = (c, kd, kh, kw), column p = output position (od, oh, ow); the
 * element is x[c, od s - pad + kd dil, ...] or 0 outside the input. Row-major with leading
 * dim `ld` (>= p1 - p0). Along a run of constant (od, oh) the in-bounds columns form one
 * interval (conv_span in cpu_conv.c), copied as a block (memcpy for stride 1); the rest is 0. */
static void TD_CAT(im2col, SUF)(const T *x, const td__window *w, int64_t r0, int64_t r1,
                                int64_t p0, int64_t p1, T *col, int64_t ld)
{
    const int64_t kk = td__window_prod(w->k), plane = td__window_prod(w->in);
    const int64_t o1 = w->out[1], o2 = w->out[2];
    for (int64_t r = r0; r < r1; r++) {
        const int64_t c = r / kk, q = r % kk;
        const int64_t kd = q / (w->k[1] * w->k[2]), kh = (q / w->k[2]) % w->k[1], kw = q % w->k[2];
        const T *xc = x + c * plane;
        T *dst = col + (r - r0) * ld;
        int64_t od = p0 / (o1 * o2), oh = (p0 / o2) % o1, ow = p0 % o2;
        int64_t p = p0;
        while (p < p1) {
            /* one run of constant (od, oh): at most o2 - ow columns */
            int64_t run = o2 - ow < p1 - p ? o2 - ow : p1 - p;
            const int64_t id = od * w->stride[0] - w->pad_lo[0] + kd * w->dil[0];
            const int64_t ih = oh * w->stride[1] - w->pad_lo[1] + kh * w->dil[1];
            T *d = dst + (p - p0);
            if (id < 0 || id >= w->in[0] || ih < 0 || ih >= w->in[1]) {
                for (int64_t j = 0; j < run; j++) d[j] = (T)0;
            } else {
                const T *row = xc + (id * w->in[1] + ih) * w->in[2];
                const int64_t s2 = w->stride[2], b = kw * w->dil[2] - w->pad_lo[2];
                int64_t jlo, jhi;
                conv_span(ow, run, s2, b, w->in[2], &jlo, &jhi);
                for (int64_t j = 0; j < jlo; j++) d[j] = (T)0;
                const T *src = row + (ow + jlo) * s2 + b;
                if (s2 == 1)
                    memcpy(d + jlo, src, (size_t)(jhi - jlo) * sizeof(T));
                else
                    for (int64_t j = jlo; j < jhi; j++) d[j] = src[(j - jlo) * s2];
                for (int64_t j = jhi; j < run; j++) d[j] = (T)0;
            }
            p += run;
            ow += run;
            if (ow == o2) {
                ow = 0;
                if (++oh == o1) {
                    oh = 0;
                    od++;
                }
            }
        }
    }
}

/* CONV: unit u = (image block, g, column tile t); one GEMM W_g [cog, kg] x col [kg, cols]
 * per unit. A block is one image cut into column tiles, or (small outputs, cx->imgs > 1)
 * cx->imgs whole images side by side, whose GEMM result goes through `ys` to each image. */
static void TD_CAT(conv_units, SUF)(void *ctx, int64_t lo, int64_t hi)
{
    conv_ctx *cx = ctx;
    const td__window *w = &cx->w;
    const int64_t g = w->groups, cg = w->c / g, cog = w->co / g;
    const int64_t kg = cg * td__window_prod(w->k), P = td__window_prod(w->out);
    const int64_t plane = td__window_prod(w->in), m = cx->imgs;
    T *col = NULL, *ys = NULL;
    if (!cx->direct && (col = td__malloc((size_t)(kg * cx->tile * m + 1) * sizeof(T))) == NULL)
        goto fail;
    if (m > 1 && (ys = td__malloc((size_t)(cog * P * m + 1) * sizeof(T))) == NULL) goto fail;
    const T *x = cx->x, *wt = cx->wt, *bias = cx->bias;
    T *y = cx->y;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t t = u % cx->ntiles, bg = u / cx->ntiles, gi = bg % g, n0 = bg / g * m;
        const int64_t nm = n0 + m < w->n ? m : w->n - n0;
        const int64_t p0 = t * cx->tile, p1 = p0 + cx->tile < P ? p0 + cx->tile : P;
        const int64_t cols = (p1 - p0) * nm;
        const T *ximg = x + (n0 * w->c + gi * cg) * plane;
        T *yblk = y + (n0 * w->co + gi * cog) * P + p0;
        const T *bm = col;
        int ldb = (int)cols;
        if (cx->direct) {
            bm = ximg + p0;
            ldb = (int)P;
        } else {
            for (int64_t i = 0; i < nm; i++)
                TD_CAT(im2col, SUF)(ximg + i * w->c * plane, w, 0, kg, p0, p1,
                                    col + i * (p1 - p0), cols);
        }
        T *c = m > 1 ? ys : yblk;
        const int ldc = m > 1 ? (int)cols : (int)P;
        if (kg > 0) {
            GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)cog, (int)cols, (int)kg, (T)1,
                 wt + gi * cog * kg, (int)kg, bm, ldb, (T)0, c, ldc);
        } else {
            for (int64_t o = 0; o < cog; o++)
                for (int64_t p = 0; p < cols; p++) c[o * ldc + p] = (T)0;
        }
        for (int64_t i = 0; i < nm; i++)
            for (int64_t o = 0; o < cog; o++) {
                T *yo = yblk + i * w->co * P + o * P;
                const T *so = c + o * ldc + (m > 1 ? i * P : 0);
                const T bv = bias != NULL ? bias[gi * cog + o] : (T)0;
                if (m > 1 && bias == NULL)
                    memcpy(yo, so, (size_t)(p1 - p0) * sizeof(T));
                else if (m > 1)
                    for (int64_t p = 0; p < p1 - p0; p++) yo[p] = so[p] + bv;
                else if (bias != NULL)
                    for (int64_t p = 0; p < p1 - p0; p++) yo[p] += bv;
            }
    }
    td__free(col);
    td__free(ys);
    return;
fail:
    td__free(col);
    atomic_store(&cx->failed, true);
}

/* CONV_TRANSPOSE: unit u = (n, g). Per column tile of the input positions (in order): col =
 * W_g^T [cog k, cg] x x_g [cg, tile], then col2im adds each col element into its output
 * position, rows in order, columns in order. */
static void TD_CAT(convt_units, SUF)(void *ctx, int64_t lo, int64_t hi)
{
    conv_ctx *cx = ctx;
    const td__window *w = &cx->w;
    const int64_t g = w->groups, cg = w->c / g, cog = w->co / g;
    const int64_t kk = td__window_prod(w->k), rows = cog * kk;
    const int64_t L = td__window_prod(w->in), P = td__window_prod(w->out);
    T *col = td__malloc((size_t)(rows * cx->tile + 1) * sizeof(T));
    if (col == NULL) {
        atomic_store(&cx->failed, true);
        return;
    }
    const T *x = cx->x, *wt = cx->wt, *bias = cx->bias;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t n = u / g, gi = u % g;
        const T *ximg = (const T *)x + (n * w->c + gi * cg) * L;
        T *yblk = (T *)cx->y + (n * w->co + gi * cog) * P;
        for (int64_t i = 0; i < cog * P; i++) yblk[i] = (T)0;
        for (int64_t p0 = 0; p0 < L && cg > 0; p0 += cx->tile) {
            const int64_t p1 = p0 + cx->tile < L ? p0 + cx->tile : L, nc = p1 - p0;
            GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)rows, (int)nc, (int)cg, (T)1,
                 wt + gi * cg * rows, (int)rows, ximg + p0, (int)L, (T)0, col, (int)nc);
            for (int64_t r = 0; r < rows; r++) {
                const int64_t o = r / kk, q = r % kk;
                const int64_t kd = q / (w->k[1] * w->k[2]), kh = (q / w->k[2]) % w->k[1];
                const int64_t kw = q % w->k[2];
                T *yc = yblk + o * P;
                const T *src = col + r * nc;
                int64_t id = p0 / (w->in[1] * w->in[2]), ih = (p0 / w->in[2]) % w->in[1];
                int64_t iw = p0 % w->in[2];
                for (int64_t j = 0; j < nc; j++) {
                    const int64_t od = id * w->stride[0] - w->pad_lo[0] + kd * w->dil[0];
                    const int64_t oh = ih * w->stride[1] - w->pad_lo[1] + kh * w->dil[1];
                    const int64_t ow = iw * w->stride[2] - w->pad_lo[2] + kw * w->dil[2];
                    if (od >= 0 && od < w->out[0] && oh >= 0 && oh < w->out[1] && ow >= 0 &&
                        ow < w->out[2])
                        yc[(od * w->out[1] + oh) * w->out[2] + ow] += src[j];
                    if (++iw == w->in[2]) {
                        iw = 0;
                        if (++ih == w->in[1]) {
                            ih = 0;
                            id++;
                        }
                    }
                }
            }
        }
        if (bias != NULL)
            for (int64_t o = 0; o < cog; o++) {
                const T bv = bias[gi * cog + o];
                for (int64_t p = 0; p < P; p++) yblk[o * P + p] += bv;
            }
    }
    td__free(col);
}

/* CONV_WEIGHT_GRAD: unit u = (g, row tile of the group's [cog, kg] gradient); for n in
 * order: dw_g[:, r0:r1] (+)= dy_g[n] [cog, P] x col[r0:r1]^T [P, r1 - r0]. */
static void TD_CAT(wgrad_units, SUF)(void *ctx, int64_t lo, int64_t hi)
{
    conv_ctx *cx = ctx;
    const td__window *w = &cx->w;
    const int64_t g = w->groups, cg = w->c / g, cog = w->co / g;
    const int64_t kg = cg * td__window_prod(w->k), P = td__window_prod(w->out);
    const int64_t plane = td__window_prod(w->in);
    T *col = td__malloc((size_t)(cx->tile * P + 1) * sizeof(T));
    if (col == NULL) {
        atomic_store(&cx->failed, true);
        return;
    }
    const T *x = cx->x, *dy = cx->wt;
    T *dw = cx->y;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t gi = u / cx->ntiles, t = u % cx->ntiles;
        const int64_t r0 = t * cx->tile, r1 = r0 + cx->tile < kg ? r0 + cx->tile : kg;
        T *blk = dw + gi * cog * kg + r0;
        for (int64_t o = 0; o < cog; o++)
            for (int64_t r = 0; r < r1 - r0; r++) blk[o * kg + r] = (T)0;
        if (P == 0) continue;
        for (int64_t n = 0; n < w->n; n++) {
            const T *ximg = x + (n * w->c + gi * cg) * plane;
            TD_CAT(im2col, SUF)(ximg, w, r0, r1, 0, P, col, P);
            GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)cog, (int)(r1 - r0), (int)P, (T)1,
                 dy + (n * w->co + gi * cog) * P, (int)P, col, (int)P, (T)1, blk, (int)kg);
        }
    }
    td__free(col);
}
