/* cpu_attention_impl.h — the typed half of cpu_attention.c, included once per working type
 * with T (float or double), GEMM (cblas_sgemm or cblas_dgemm), SCORES and WEIGHTS (the row
 * passes of cpu_attention.c) and SUF defined. cpu_attention.c's header comment says what a unit computes. */

static void TD_CAT(attn_units, SUF)(void *ctx, int64_t lo, int64_t hi)
{
    attn_ctx *a = ctx;
    const int64_t E = a->e, Ev = a->ev, S = a->s, L = a->l;
    T *sb = td__malloc((size_t)(QB * KB + QB * Ev + KB + 1) * sizeof(T));
    double *mx = td__malloc(2 * QB * sizeof(double));
    if (sb == NULL || mx == NULL) {
        td__free(sb);
        td__free(mx);
        atomic_store(&a->failed, true);
        return;
    }
    T *acc = sb + QB * KB, *mrow = acc + QB * Ev;
    double *sum = mx + QB;
    const T scale = (T)a->scale;
    ROWS_SETUP
    for (int64_t u = lo; u < hi; u++) {
        const int64_t bi = u / a->qblocks, i0 = u % a->qblocks * QB;
        const int64_t nq = i0 + QB < L ? QB : L - i0;
        int64_t off[4];
        attn_offsets(a, bi, off);
        const T *q = (const T *)a->q + off[0] + i0 * E, *k = (const T *)a->k + off[1];
        const T *v = (const T *)a->v + off[2];
        for (int64_t r = 0; r < nq; r++) {
            mx[r] = -INFINITY;
            sum[r] = 0;
        }
        for (int64_t r = 0; r < nq * Ev; r++) acc[r] = 0;
        /* causal: keys after the block's last query contribute exactly 0; skip them */
        const int64_t send = a->causal && i0 + nq < S ? i0 + nq : S;
        for (int64_t j0 = 0; j0 < send; j0 += KB) {
            const int64_t nk = j0 + KB < send ? KB : send - j0;
            if (E > 0)
                GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nq, (int)nk, (int)E, (T)1, q,
                     (int)E, k + j0 * E, (int)E, (T)0, sb, (int)nk);
            else
                for (int64_t t = 0; t < nq * nk; t++) sb[t] = 0;
            for (int64_t r = 0; r < nq; r++) {
                T *row = sb + r * nk;
                const int64_t i = i0 + r;
                /* visible keys: all, or j <= i (causal) */
                int64_t lim = a->causal ? i - j0 + 1 : nk;
                lim = lim < 0 ? 0 : lim > nk ? nk : lim;
                const uint8_t *mb = NULL;
                const T *mf = NULL;
                if (a->mask != NULL) {
                    const int64_t mo = off[3] + i * a->mrow + j0 * a->mcol;
                    if (a->mcol == 0) { /* one mask value for the whole row */
                        if (a->mask_bool) {
                            if (((const uint8_t *)a->mask)[mo] == 0) lim = 0;
                        } else {
                            for (int64_t c = 0; c < nk; c++) mrow[c] = ((const T *)a->mask)[mo];
                            mf = mrow;
                        }
                    } else if (a->mask_bool) {
                        mb = (const uint8_t *)a->mask + mo;
                    } else {
                        mf = (const T *)a->mask + mo;
                    }
                }
                bool nan = false;
                const T m0 = SCORES(row, nk, lim, scale, mb, mf, &nan);
                const double m = nan || isnan(mx[r]) ? (double)NAN : m0 > mx[r] ? m0 : mx[r];
                /* every score so far -inf: the weights stay 0 (a row all -inf ends as NaN) */
                if (m == -INFINITY) {
                    for (int64_t c = 0; c < nk; c++) row[c] = 0;
                    continue;
                }
                const double corr = mx[r] == -INFINITY ? 0.0 : exp(mx[r] - m);
                const double z = WEIGHTS(row, nk, (T)m);
                if (corr != 1.0) {
                    T *ar = acc + r * Ev;
                    for (int64_t t = 0; t < Ev; t++) ar[t] = (T)(ar[t] * corr);
                }
                sum[r] = sum[r] * corr + z;
                mx[r] = m;
            }
            if (Ev > 0)
                GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nq, (int)Ev, (int)nk, (T)1,
                     sb, (int)nk, v + j0 * Ev, (int)Ev, (T)1, acc, (int)Ev);
        }
        T *y = (T *)a->y + (bi * L + i0) * Ev;
        for (int64_t r = 0; r < nq; r++) {
            const double z = sum[r];
            for (int64_t t = 0; t < Ev; t++)
                y[r * Ev + t] = z > 0 && !isnan(mx[r]) ? (T)(acc[r * Ev + t] / z) : (T)NAN;
        }
    }
    td__free(sb);
    td__free(mx);
}
