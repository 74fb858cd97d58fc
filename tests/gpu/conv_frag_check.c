/* conv_frag_check.c — the index math of backends/gpu/gpu_conv.cu on the host, without a GPU:
 * every block of the grid of several CONV shapes (1d, 2d, 3d; stride, padding, asymmetric
 * padding, dilation, groups, depthwise, 1x1, 7x7; partial M, N and K tiles) run through
 * gpu_conv_layout.h's functions exactly as the kernel calls them — the per-k and per-column
 * gather tables, the weight tile's cp.async chunks or element pairs, the input tile's
 * gather, the swizzles, the warps' ldmatrix lane addresses (gpu_attention_layout.h), the
 * accumulator -> output mapping — with ldmatrix (.x4, plain and .trans) and mma.sync
 * m16n8k16 modelled from the PTX ISA's fragment tables (not from the kernel). For each tile
 * configuration (128x128, 64x128, 128x64, 64x64) and both weight paths it checks that every
 * shared-memory slot is written once per K tile, that every gathered offset lies inside the
 * input, that ldmatrix rows are 16-byte aligned and each 8-row phase hits 8 different bank
 * groups, that each output element is written exactly once, and that the result equals a
 * direct convolution (small integers: every sum exact). Where C/G is a multiple of 8, the
 * same for the channels-last path (run_cfg_nhwc: the NHWC and weight transposes, the
 * per-chunk table, zero-filled 16-byte chunks for both operands through the cp.async
 * pipeline's stages and wait_group, the plain-ldmatrix B fragments, and split-K: each
 * split's K-tile range, the f32 partials, the reduction's indexing), for no split, the
 * split td_conv_splits picks and the most the K tiles allow. For every shape, the f32 FFMA
 * kernel (run_cfg_f32: both tiles, the same splits over its K tiles): the transposed weight,
 * every thread's cp.async copies through the pipeline's stages, its micro-tile folded in
 * float with fmaf in the kernel's order, the float4 shared loads' alignment and bank
 * wavefronts, the 16-byte epilogue stores. Also that td_conv_shape_init
 * refuses shapes past 32-bit offsets. Exit 0 when all hold. */
#include "backends/gpu/gpu_conv_layout.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct frag2 {
    double v[2];
} frag2; /* one 32-bit register: two 16-bit elements, v[0] in the low half */

static int g_bad;
#define BAD(...)                                                                           \
    do {                                                                                   \
        if (g_bad++ < 12) printf(__VA_ARGS__);                                             \
    } while (0)

/* ldmatrix.x4 (trans or not): addr[lane] is the element offset of the 8 elements of row
 * (lane % 8) of matrix lane / 8; out[lane][i] is lane's register of matrix i. Also checks
 * the alignment of each row and that each matrix's 8 rows fall in 8 bank groups. */
static void ldsm(const double *tile, const int *addr, int trans, frag2 out[32][4])
{
    for (int i = 0; i < 4; i++) {
        int seen = 0;
        for (int r = 0; r < 8; r++) {
            const int a = addr[8 * i + r];
            if (a % 8 != 0) BAD("ldmatrix row address %d not 16-byte aligned\n", a);
            seen |= 1 << ((a / 8) % 8);
        }
        if (seen != 0xff) BAD("ldmatrix matrix %d: bank conflict (groups %#x)\n", i, seen);
    }
    for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 4; i++)
            for (int e = 0; e < 2; e++) {
                int row, col;
                if (!trans) {
                    row = lane / 4;
                    col = 2 * (lane % 4) + e;
                } else {
                    row = 2 * (lane % 4) + e;
                    col = lane / 4;
                }
                out[lane][i].v[e] = tile[addr[8 * i + row] + col];
            }
}

/* mma.m16n8k16: c[lane][0..3] += A B from the lanes' fragments (PTX ISA tables) */
static void mma(double c[32][4], frag2 a[32][4], frag2 b0[32], frag2 b1[32])
{
    double A[16][16], B[16][8];
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane / 4, t = lane % 4;
        for (int e = 0; e < 2; e++) {
            A[g][2 * t + e] = a[lane][0].v[e];
            A[g + 8][2 * t + e] = a[lane][1].v[e];
            A[g][2 * t + 8 + e] = a[lane][2].v[e];
            A[g + 8][2 * t + 8 + e] = a[lane][3].v[e];
            B[2 * t + e][g] = b0[lane].v[e];
            B[2 * t + 8 + e][g] = b1[lane].v[e];
        }
    }
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane / 4, t = lane % 4;
        for (int e = 0; e < 2; e++)
            for (int h = 0; h < 2; h++) {
                double s = 0;
                for (int k = 0; k < 16; k++) s += A[g + 8 * h][k] * B[k][2 * t + e];
                c[lane][2 * h + e] += s;
            }
    }
}

typedef struct conv_case {
    const char *name;
    int64_t n, c, co, groups;
    int64_t in[3], k[3], stride[3], pad_lo[3], pad_hi[3], dil[3];
    int bias;
} conv_case;

/* the output size along d (engine/window.c's rule for CONV) */
static int64_t out_dim(const conv_case *cc, int d)
{
    return (cc->in[d] + cc->pad_lo[d] + cc->pad_hi[d] - cc->dil[d] * (cc->k[d] - 1) - 1) /
               cc->stride[d] + 1;
}

#define MAXACC (8 * 4 * 8 * 32 * 4) /* warps x MT x NT x lanes x 4 (at most) */

/* One tile configuration over the whole grid; returns the mismatches. */
static void run_cfg(const conv_case *cc, const td_conv_shape *s, const double *x,
                    const double *w, const double *b, const double *want, int bm, int bn,
                    int wm, int av)
{
    const int BK = TD_CONV_BK, wn = 8 / wm, wtm = bm / wm, wtn = bn / wn;
    const int MT = wtm / 16, NT = wtn / 8;
    const int64_t nout = (int64_t)s->n * s->co * s->P, xel = (int64_t)s->n * s->c * s->L;
    double *y = calloc((size_t)nout, sizeof *y);
    int *written = calloc((size_t)nout, sizeof *written);
    double *sa = malloc(sizeof(double) * (size_t)(bm * BK));
    double *sb = malloc(sizeof(double) * (size_t)(BK * bn));
    int *wa = malloc(sizeof(int) * (size_t)(bm * BK)), *wb = malloc(sizeof(int) * (size_t)(BK * bn));
    static double acc[MAXACC];
    td_conv_kent *tab = malloc(sizeof *tab * (size_t)(s->nk * BK));
    for (int k = 0; k < s->nk * BK; k++) tab[k] = td_conv_kentry(s, k);
    const int bad0 = g_bad;
    const int gx = (s->N + bn - 1) / bn, gy = (s->cog + bm - 1) / bm;
    for (int g = 0; g < s->groups; g++)
        for (int by = 0; by < gy; by++)
            for (int bx = 0; bx < gx; bx++) {
                const int m0 = by * bm, n0 = bx * bn;
                memset(acc, 0, sizeof acc);
                for (int kt = 0; kt < s->nk; kt++) {
                    memset(wa, 0, sizeof(int) * (size_t)(bm * BK));
                    memset(wb, 0, sizeof(int) * (size_t)(BK * bn));
                    for (int tid = 0; tid < TD_CONV_THREADS; tid++) {
                        /* A: the weight tile */
                        if (av) {
                            for (int i = 0; i < bm / 64; i++) {
                                int r, ch;
                                td_conv_a_chunk(tid, i, &r, &ch);
                                const int kc = kt * BK + ch * 8;
                                const int in = m0 + r < s->cog && kc < s->K;
                                const int o = td_conv_swz_a(r, ch * 8);
                                for (int e = 0; e < 8; e++) {
                                    sa[o + e] = in ? w[((int64_t)g * s->cog + m0 + r) * s->K + kc + e] : 0;
                                    wa[o + e]++;
                                }
                            }
                        } else {
                            for (int i = 0; i < bm / 16; i++) {
                                int r, c;
                                td_conv_a_pair(tid, i, &r, &c);
                                const int kc = kt * BK + c, rin = m0 + r < s->cog;
                                const int o = td_conv_swz_a(r, c);
                                if (o % 2 != 0) BAD("a pair store not 4-byte aligned\n");
                                for (int e = 0; e < 2; e++) {
                                    sa[o + e] = rin && kc + e < s->K
                                                    ? w[((int64_t)g * s->cog + m0 + r) * s->K + kc + e]
                                                    : 0;
                                    wa[o + e]++;
                                }
                            }
                        }
                        /* B: the gathered input tile */
                        int bcol, bk0, bkstep;
                        td_conv_b_thread(tid, bn, &bcol, &bk0, &bkstep);
                        td_conv_col cols[2] = {td_conv_column(s, g, n0 + bcol),
                                               td_conv_column(s, g, n0 + bcol + 1)};
                        for (int i = 0; i < bn / 16; i++) {
                            const int kl = bk0 + i * bkstep;
                            const td_conv_kent ke = tab[kt * BK + kl];
                            const int o = td_conv_swz_b(kl, bcol, bn);
                            if (o % 2 != 0) BAD("b pair store not 4-byte aligned\n");
                            for (int e = 0; e < 2; e++) {
                                double v = 0;
                                if (td_conv_inside(s, cols[e], ke)) {
                                    const uint32_t off = td_conv_gather_off(cols[e], ke);
                                    if ((int64_t)off >= xel)
                                        BAD("%s: gather offset %u outside %lld\n", cc->name, off,
                                            (long long)xel);
                                    else
                                        v = x[off];
                                }
                                sb[o + e] = v;
                                wb[o + e]++;
                            }
                        }
                    }
                    for (int i = 0; i < bm * BK; i++)
                        if (wa[i] != 1) BAD("A slot %d written %d times\n", i, wa[i]);
                    for (int i = 0; i < BK * bn; i++)
                        if (wb[i] != 1) BAD("B slot %d written %d times\n", i, wb[i]);
                    if (g_bad > bad0) goto done;
                    /* the warps' mma steps */
                    for (int warp = 0; warp < 8; warp++) {
                        int wr0, wc0;
                        td_conv_warp(warp, bm, bn, wm, &wr0, &wc0);
                        for (int kk = 0; kk < BK / 16; kk++) {
                            static frag2 af[8][32][4];
                            int addr[32];
                            for (int mt = 0; mt < MT; mt++) {
                                for (int lane = 0; lane < 32; lane++) {
                                    int r, c;
                                    td_attn_q_rc(lane, wr0 + mt * 16, kk, &r, &c);
                                    addr[lane] = td_conv_swz_a(r, c);
                                }
                                ldsm(sa, addr, 0, af[mt]);
                            }
                            for (int np = 0; np < NT / 2; np++) {
                                frag2 bf[32][4], b0[32], b1[32], b2[32], b3[32];
                                for (int lane = 0; lane < 32; lane++) {
                                    int r, c;
                                    td_attn_v_rc(lane, kk, np, &r, &c);
                                    addr[lane] = td_conv_swz_b(r, wc0 + c, bn);
                                }
                                ldsm(sb, addr, 1, bf);
                                for (int lane = 0; lane < 32; lane++) {
                                    b0[lane] = bf[lane][0];
                                    b1[lane] = bf[lane][1];
                                    b2[lane] = bf[lane][2];
                                    b3[lane] = bf[lane][3];
                                }
                                for (int mt = 0; mt < MT; mt++) {
                                    double(*a0)[4] = (double(*)[4]) &
                                        acc[(((warp * MT + mt) * NT + 2 * np) * 32) * 4];
                                    double(*a1)[4] = (double(*)[4]) &
                                        acc[(((warp * MT + mt) * NT + 2 * np + 1) * 32) * 4];
                                    mma(a0, af[mt], b0, b1);
                                    mma(a1, af[mt], b2, b3);
                                }
                            }
                        }
                    }
                }
                /* epilogue: + bias, to the output */
                for (int warp = 0; warp < 8; warp++) {
                    int wr0, wc0;
                    td_conv_warp(warp, bm, bn, wm, &wr0, &wc0);
                    for (int lane = 0; lane < 32; lane++)
                        for (int mt = 0; mt < MT; mt++)
                            for (int nt = 0; nt < NT; nt++)
                                for (int h = 0; h < 2; h++)
                                    for (int e = 0; e < 2; e++) {
                                        const int m = m0 + wr0 + mt * 16 + lane / 4 + 8 * h;
                                        const int j = n0 + wc0 + nt * 8 + 2 * (lane % 4) + e;
                                        if (m >= s->cog || j >= s->N) continue;
                                        const int32_t o = td_conv_out_off(s, g, m, j);
                                        if (o < 0 || o >= nout) {
                                            BAD("output offset %d outside\n", o);
                                            continue;
                                        }
                                        y[o] = acc[(((warp * MT + mt) * NT + nt) * 32 + lane) * 4 +
                                                   2 * h + e] +
                                               (b != NULL ? b[g * s->cog + m] : 0);
                                        written[o]++;
                                    }
                }
            }
    for (int64_t i = 0; i < nout; i++) {
        if (written[i] != 1) BAD("%s: output %lld written %d times\n", cc->name, (long long)i, written[i]);
        else if (y[i] != want[i])
            BAD("%s %dx%d %s: output %lld got %g want %g\n", cc->name, bm, bn,
                av ? "cp.async" : "pairs", (long long)i, y[i], want[i]);
    }
done:
    printf("conv_frag_check: %-28s tile %3dx%-3d (%d warps along M) weights by %-8s: %s\n",
           cc->name, bm, bn, wm, av ? "cp.async" : "pairs", g_bad > bad0 ? "FAIL" : "ok");
    free(y);
    free(written);
    free(sa);
    free(sb);
    free(wa);
    free(wb);
    free(tab);
}

/* Where a run's results go: the output and the split partials, with write counts. */
typedef struct results {
    double *y, *part;
    int *written, *pwritten;
    int64_t nout, pel;
} results;
/* accumulator a of output (g, m, j), split sp of S, as the kernels' epilogues put it: S 1:
 * + bias, to the output; else to the partials */
static void put_result(const td_conv_shape *s, results *r, int S, int sp, int g, int m, int j,
                       double a, const double *b)
{
    if (S == 1) {
        const int32_t o = td_conv_out_off(s, g, m, j);
        if (o < 0 || o >= r->nout) {
            BAD("output offset %d outside\n", o);
            return;
        }
        r->y[o] = a + (b != NULL ? b[g * s->cog + m] : 0);
        r->written[o]++;
    } else {
        const int64_t o = td_conv_part_off(s, sp, g, m, j);
        if (o < 0 || o >= r->pel) {
            BAD("partial offset %lld outside\n", (long long)o);
            return;
        }
        r->part[o] = a;
        r->pwritten[o]++;
    }
}

/* The cp.async pipeline's bookkeeping (gpu_conv.cu's stage_pipeline): the tile each stage
 * holds and the commit group that copied it. */
typedef struct pipe_model {
    int tile[8], group[8], committed;
} pipe_model;
static void pipe_init(pipe_model *p)
{
    for (int st = 0; st < 8; st++) p->tile[st] = p->group[st] = -1;
    p->committed = 0;
}
static void pipe_loaded(pipe_model *p, int st, int kt)
{
    p->tile[st] = kt;
    p->group[st] = p->committed;
}
/* Before tile kt is read from stage cur, cp.async.wait_group ST - 2 (all but the newest
 * ST - 2 groups done) must have completed the group that copied it. */
static void pipe_check(const conv_case *cc, const pipe_model *p, int ST, int kt, int cur)
{
    if (p->tile[cur] != kt || p->group[cur] >= p->committed - (ST - 2))
        BAD("%s: tile %d read from stage %d holding tile %d (group %d of %d)\n", cc->name, kt,
            cur, p->tile[cur], p->group[cur], p->committed);
}
/* every one of the n slots of a shared tile written once per K tile */
static void slots_once(const char *what, const int *count, int n)
{
    for (int i = 0; i < n; i++)
        if (count[i] != 1) BAD("%s slot %d written %d times\n", what, i, count[i]);
}

/* The S partials summed in ascending split, + bias (k_conv_reduce: one output element a
 * thread, in NCHW order) into y, counting writes; false (and BAD) if a partial was not
 * written exactly once. */
static int reduce_partials(const conv_case *cc, const td_conv_shape *s, int S,
                           const double *part, const int *pwritten, const double *b, double *y,
                           int *written)
{
    const int64_t nout = (int64_t)s->n * s->co * s->P, pel = (int64_t)S * s->co * s->N;
    for (int64_t i = 0; i < pel; i++)
        if (pwritten[i] != 1) {
            BAD("%s: partial %lld written %d times\n", cc->name, (long long)i, pwritten[i]);
            return 0;
        }
    for (int64_t i = 0; i < nout; i++) {
        const int32_t img = (int32_t)(i / ((int64_t)s->co * s->P));
        const int32_t r = (int32_t)(i % ((int64_t)s->co * s->P));
        const int32_t o = r / s->P, p = r % s->P, g = o / s->cog, m = o % s->cog;
        const int32_t j = img * s->P + p;
        double a = 0;
        for (int sp = 0; sp < S; sp++) a += part[td_conv_part_off(s, sp, g, m, j)];
        if (b != NULL) a += b[o];
        y[i] = a;
        written[i]++;
    }
    return 1;
}

/* The splits to try for a grid of `blocks` blocks: none, the pick (td_conv_splits, or for
 * the channels-last path td_conv_splits_wave at `wave` blocks an SM when wave > 0), and the
 * most the K tiles allow (0: skip) */
static void split_set(const td_conv_shape *s, int64_t blocks, int wave, int out[3])
{
    int most = s->nk < TD_CONV_SPLIT_MAX ? s->nk : TD_CONV_SPLIT_MAX;
    if (most > 1) most = (s->nk + (s->nk + most - 1) / most - 1) / ((s->nk + most - 1) / most);
    out[0] = 1;
    out[1] = wave > 0 ? td_conv_splits_wave(s, blocks, wave) : td_conv_splits(s, blocks);
    out[2] = most;
    if (out[1] == 1) out[1] = 0;
    if (out[2] == 1 || out[2] == out[1]) out[2] = 0;
}


/* The channels-last path (td_conv_nhwc_ok) for one tile configuration and split count S:
 * the NHWC input and the transposed weight built with the header's formulas, the per-chunk
 * table, both operands by 16-byte chunks (zero-filled outside, as cp.async with src-size 0
 * does) through the TD_CONV_STAGES(bm, bn)-deep pipeline the kernel runs (which stage a tile goes
 * to, and that its cp.async group is complete under wait_group STAGES - 2 when it is read),
 * B read by plain ldmatrix (td_attn_k_rc), and, for S > 1, the f32 partials and the
 * reduction kernel's index mapping. */
static void run_cfg_nhwc(const conv_case *cc, const td_conv_shape *s, const double *x,
                         const double *w, const double *b, const double *want, int bm, int bn,
                         int wm, int S)
{
    const int BK = TD_CONV_BK, ST = TD_CONV_STAGES(bm, bn), wn = 8 / wm, wtm = bm / wm, wtn = bn / wn;
    const int MT = wtm / 16, NT = wtn / 8;
    const int64_t nout = (int64_t)s->n * s->co * s->P, xel = (int64_t)s->n * s->c * s->L;
    const int64_t wel = (int64_t)s->co * s->K, pel = (int64_t)S * s->co * s->N;
    double *y = calloc((size_t)nout, sizeof *y);
    int *written = calloc((size_t)nout, sizeof *written);
    double *part = calloc((size_t)pel, sizeof *part);
    int *pwritten = calloc((size_t)pel, sizeof *pwritten);
    results res = {y, part, written, pwritten, nout, pel};
    double *sa = malloc(sizeof(double) * (size_t)(ST * bm * BK));
    double *sb = malloc(sizeof(double) * (size_t)(ST * BK * bn));
    int *wa = malloc(sizeof(int) * (size_t)(bm * BK)), *wb = malloc(sizeof(int) * (size_t)(BK * bn));
    double *xt = malloc(sizeof *xt * (size_t)xel), *wt = malloc(sizeof *wt * (size_t)wel);
    static double acc[MAXACC];
    const int ntab = s->nk * (BK / 8);
    td_conv_kent *tab = malloc(sizeof *tab * (size_t)ntab);
    for (int q = 0; q < ntab; q++) tab[q] = td_conv_kentry_nhwc(s, q);
    /* the transposes, as k_conv_to_nhwc and k_conv_prep_nhwc index them */
    for (int64_t img = 0; img < s->n; img++)
        for (int64_t c = 0; c < s->c; c++)
            for (int64_t p = 0; p < s->L; p++)
                xt[(img * s->L + p) * s->c + c] = x[(img * s->c + c) * s->L + p];
    for (int64_t i = 0; i < wel; i++) {
        const int64_t src = td_conv_wt_src(s, i / s->K, (int32_t)(i % s->K));
        if (src < 0 || src >= wel) BAD("weight transpose source %lld outside\n", (long long)src);
        else wt[i] = w[src];
    }
    const int bad0 = g_bad;
    const int gx = (s->N + bn - 1) / bn, gy = (s->cog + bm - 1) / bm;
    pipe_model pm;
    for (int z = 0; z < s->groups * S; z++)
        for (int by = 0; by < gy; by++)
            for (int bx = 0; bx < gx; bx++) {
                const int g = z / S, sp = z % S, m0 = by * bm, n0 = bx * bn;
                int kt0, kt1;
                td_conv_split_range(s, S, sp, &kt0, &kt1);
                if (kt0 >= kt1) BAD("%s: split %d of %d empty\n", cc->name, sp, S);
                memset(acc, 0, sizeof acc);
                pipe_init(&pm);
                /* one tile's copies (every thread's chunks) into stage st */
#define LOAD_TILE(KT, STG)                                                                 \
    do {                                                                                   \
        const int kt_ = (KT), st_ = (STG);                                                 \
        double *sa_ = sa + (size_t)st_ * bm * BK, *sb_ = sb + (size_t)st_ * bn * BK;       \
        memset(wa, 0, sizeof(int) * (size_t)(bm * BK));                                    \
        memset(wb, 0, sizeof(int) * (size_t)(BK * bn));                                    \
        for (int tid = 0; tid < TD_CONV_THREADS; tid++) {                                  \
            for (int i_ = 0; i_ < bm / 64; i_++) {                                            \
                int r, ch;                                                                 \
                td_conv_a_chunk(tid, i_, &r, &ch);                                          \
                const int kc = kt_ * BK + ch * 8;                                          \
                const int in = m0 + r < s->cog && kc < s->K;                               \
                const int o = td_conv_swz_a(r, ch * 8);                                    \
                for (int e = 0; e < 8; e++) {                                              \
                    sa_[o + e] = in ? wt[((int64_t)g * s->cog + m0 + r) * s->K + kc + e] : 0; \
                    wa[o + e]++;                                                           \
                }                                                                          \
            }                                                                              \
            for (int i_ = 0; i_ < bn / 64; i_++) {                                            \
                int r, ch;                                                                 \
                td_conv_a_chunk(tid, i_, &r, &ch);                                          \
                const td_conv_col col = td_conv_column_nhwc(s, g, n0 + r);                 \
                const td_conv_kent ke = tab[kt_ * (BK / 8) + ch];                          \
                const int o = td_conv_swz_a(r, ch * 8);                                    \
                const int in = td_conv_inside(s, col, ke);                                 \
                const uint32_t off = in ? td_conv_gather_off(col, ke) : 0;                 \
                if (in && (off % 8 != 0 || (int64_t)off + 8 > xel)) {                      \
                    BAD("%s: chunk offset %u unaligned or outside %lld\n", cc->name, off,  \
                        (long long)xel);                                                   \
                    continue;                                                              \
                }                                                                          \
                for (int e = 0; e < 8; e++) {                                              \
                    sb_[o + e] = in ? xt[off + e] : 0; /* src-size 0: zeros */              \
                    wb[o + e]++;                                                           \
                }                                                                          \
            }                                                                              \
        }                                                                                  \
        slots_once("A", wa, bm * BK);                                                      \
        slots_once("B", wb, BK * bn);                                                      \
        pipe_loaded(&pm, st_, kt_);                                                        \
    } while (0)
                for (int st = 0; st < ST - 1; st++, pm.committed++)
                    if (kt0 + st < kt1) LOAD_TILE(kt0 + st, st);
                for (int kt = kt0; kt < kt1; kt++, pm.committed++) {
                    const int i = kt - kt0, cur = i % ST;
                    pipe_check(cc, &pm, ST, kt, cur);
                    if (kt + ST - 1 < kt1) LOAD_TILE(kt + ST - 1, (i + ST - 1) % ST);
                    if (g_bad > bad0) goto done;
                    const double *sac = sa + (size_t)cur * bm * BK, *sbc = sb + (size_t)cur * bn * BK;
                    for (int warp = 0; warp < 8; warp++) {
                        int wr0, wc0;
                        td_conv_warp(warp, bm, bn, wm, &wr0, &wc0);
                        for (int kk = 0; kk < BK / 16; kk++) {
                            static frag2 af[8][32][4];
                            int addr[32];
                            for (int mt = 0; mt < MT; mt++) {
                                for (int lane = 0; lane < 32; lane++) {
                                    int r, c;
                                    td_attn_q_rc(lane, wr0 + mt * 16, kk, &r, &c);
                                    addr[lane] = td_conv_swz_a(r, c);
                                }
                                ldsm(sac, addr, 0, af[mt]);
                            }
                            for (int np = 0; np < NT / 2; np++) {
                                frag2 bf[32][4], b0[32], b1[32], b2[32], b3[32];
                                for (int lane = 0; lane < 32; lane++) {
                                    int r, c;
                                    td_attn_k_rc(lane, np, kk, &r, &c);
                                    addr[lane] = td_conv_swz_a(wc0 + r, c);
                                }
                                ldsm(sbc, addr, 0, bf);
                                for (int lane = 0; lane < 32; lane++) {
                                    b0[lane] = bf[lane][0];
                                    b1[lane] = bf[lane][1];
                                    b2[lane] = bf[lane][2];
                                    b3[lane] = bf[lane][3];
                                }
                                for (int mt = 0; mt < MT; mt++) {
                                    double(*a0)[4] = (double(*)[4]) &
                                        acc[(((warp * MT + mt) * NT + 2 * np) * 32) * 4];
                                    double(*a1)[4] = (double(*)[4]) &
                                        acc[(((warp * MT + mt) * NT + 2 * np + 1) * 32) * 4];
                                    mma(a0, af[mt], b0, b1);
                                    mma(a1, af[mt], b2, b3);
                                }
                            }
                        }
                    }
                }
#undef LOAD_TILE
                /* epilogue: S 1: + bias, to the output; else to the partials */
                for (int warp = 0; warp < 8; warp++) {
                    int wr0, wc0;
                    td_conv_warp(warp, bm, bn, wm, &wr0, &wc0);
                    for (int lane = 0; lane < 32; lane++)
                        for (int mt = 0; mt < MT; mt++)
                            for (int nt = 0; nt < NT; nt++)
                                for (int h = 0; h < 2; h++)
                                    for (int e = 0; e < 2; e++) {
                                        const int m = m0 + wr0 + mt * 16 + lane / 4 + 8 * h;
                                        const int j = n0 + wc0 + nt * 8 + 2 * (lane % 4) + e;
                                        if (m >= s->cog || j >= s->N) continue;
                                        const double a =
                                            acc[(((warp * MT + mt) * NT + nt) * 32 + lane) * 4 + 2 * h + e];
                                        if (e == 0 && j + 1 < s->N) {
                                            /* the kernel's paired stores */
                                            const int32_t o0 = td_conv_out_off(s, g, m, j);
                                            if (j % 2 != 0 ||
                                                (s->P % 2 == 0 && (o0 % 2 != 0 ||
                                                                   td_conv_out_off(s, g, m, j + 1) != o0 + 1)) ||
                                                (s->N % 2 == 0 &&
                                                 td_conv_part_off(s, sp, g, m, j) % 2 != 0))
                                                BAD("%s: columns %d, %d not one aligned pair\n", cc->name, j, j + 1);
                                        }
                                        put_result(s, &res, S, sp, g, m, j, a, b);
                                    }
                }
            }
    if (S > 1 && !reduce_partials(cc, s, S, part, pwritten, b, y, written)) goto done;
    for (int64_t i = 0; i < nout; i++) {
        if (written[i] != 1) BAD("%s: output %lld written %d times\n", cc->name, (long long)i, written[i]);
        else if (y[i] != want[i])
            BAD("%s %dx%d nhwc split %d: output %lld got %g want %g\n", cc->name, bm, bn, S,
                (long long)i, y[i], want[i]);
    }
done:
    printf("conv_frag_check: %-28s tile %3dx%-3d (%d warps along M) channels-last split %d (%d stages): %s\n",
           cc->name, bm, bn, wm, S, ST, g_bad > bad0 ? "FAIL" : "ok");
    free(y);
    free(written);
    free(part);
    free(pwritten);
    free(sa);
    free(sb);
    free(wa);
    free(wb);
    free(xt);
    free(wt);
    free(tab);
}

/* Bank wavefronts of one float4 shared load by a warp: addr[lane] (a float offset) must be
 * 16-byte aligned, and the distinct 16-byte chunks must fall in distinct bank groups (one
 * wavefront; lanes reading the same chunk share it). */
static void ld4_banks(const char *what, const int *addr)
{
    int chunk_of_group[8];
    for (int i = 0; i < 8; i++) chunk_of_group[i] = -1;
    for (int lane = 0; lane < 32; lane++) {
        if (addr[lane] % 4 != 0) BAD("%s: lane %d float4 at %d unaligned\n", what, lane, addr[lane]);
        const int ch = addr[lane] / 4, gr = ch % 8;
        if (chunk_of_group[gr] >= 0 && chunk_of_group[gr] != ch)
            BAD("%s: lanes read chunks %d and %d of bank group %d\n", what, chunk_of_group[gr], ch, gr);
        chunk_of_group[gr] = ch;
    }
}

/* The f32 kernel (k_conv_f32) with tile BM x BN (TN columns a thread: 16 BN / TN threads)
 * and split S over the whole grid:
 * the transposed weight and per-k table built with the header's formulas, every thread's
 * cp.async copies (16-byte weight chunks, 4-byte input elements, zero-filled outside) into
 * the TD_CONVF_STAGES-deep pipeline (which stage, and that its group is complete under
 * wait_group STAGES - 2), every thread's micro-tile folded in float with fmaf over k in
 * the kernel's order, its float4 shared loads (alignment, one wavefront each), the epilogue's
 * 16-byte stores (adjacent, aligned), the partials and the reduction. The data are small
 * integers, so every f32 sum is exact and must equal the direct convolution. */
static void run_cfg_f32(const conv_case *cc, const td_conv_shape *s0, const double *x,
                        const double *w, const double *b, const double *want, int bm, int BN,
                        int TN, int S)
{
    const td_conv_shape sv = td_convf_shape(s0), *s = &sv;
    const int BK = TD_CONVF_BK, TM = bm / 16, ST = TD_CONVF_STAGES(bm, BN);
    const int NTX = BN / TN, NT = 16 * NTX;
    const int AP = BK * bm / (4 * NT), BP = BK * BN / NT;
    const int32_t cogp = td_convf_cogp(s);
    const int64_t nout = (int64_t)s->n * s->co * s->P, xel = (int64_t)s->n * s->c * s->L;
    const int64_t wel = (int64_t)s->co * s->K, pel = (int64_t)S * s->co * s->N;
    const int64_t ntab = (int64_t)s->nk * BK, nwt = (int64_t)s->groups * ntab * cogp;
    const int bad0 = g_bad;
    double *y = calloc((size_t)nout, sizeof *y), *part = calloc((size_t)pel, sizeof *part);
    int *written = calloc((size_t)nout, sizeof *written);
    int *pwritten = calloc((size_t)pel, sizeof *pwritten);
    results res = {y, part, written, pwritten, nout, pel};
    float *xf = malloc(sizeof(float) * (size_t)xel), *wt = malloc(sizeof(float) * (size_t)nwt);
    td_conv_kent *tab = malloc(sizeof *tab * (size_t)ntab);
    float *sa = malloc(sizeof(float) * (size_t)(ST * BK * bm));
    float *sb = malloc(sizeof(float) * (size_t)(ST * BK * BN));
    int *wa = malloc(sizeof(int) * (size_t)(BK * bm)), *wb = malloc(sizeof(int) * (size_t)(BK * BN));
    static float acc[256][8][8];
    if (NT > 256 || TM > 8 || TN > 8 || NT % BN != 0 || AP * 4 * NT != BK * bm ||
        BP * NT != BK * BN || (NTX != 8 && NTX != 16)) {
        BAD("%s: f32 tile %dx%d TN %d: no such thread grid\n", cc->name, bm, BN, TN);
        return;
    }
    for (int64_t i = 0; i < xel; i++) xf[i] = (float)x[i];
    /* k_conv_prep_f32 */
    for (int64_t i = 0; i < nwt; i++) {
        const int64_t src = td_convf_wt_src(s, i);
        if (src >= wel) BAD("%s: transposed weight %lld from %lld\n", cc->name, (long long)i, (long long)src);
        wt[i] = src >= 0 && src < wel ? (float)w[src] : 0.0f;
    }
    for (int64_t i = 0; i < ntab; i++) tab[i] = td_conv_kentry(s, (int32_t)i);
    if (g_bad > bad0) goto done;

    for (int g = 0; g < s->groups; g++)
        for (int sp = 0; sp < S; sp++)
            for (int m0 = 0; m0 < s->cog; m0 += bm)
                for (int n0 = 0; n0 < s->N; n0 += BN) {
                    int kt0, kt1;
                    pipe_model pm;
                    pipe_init(&pm);
                    td_conv_split_range(s, S, sp, &kt0, &kt1);
                    memset(acc, 0, sizeof acc);
#define LOAD_F32(kt_, st_)                                                                 \
    do {                                                                                   \
        float *sa_ = sa + (size_t)(st_) * BK * bm, *sb_ = sb + (size_t)(st_) * BK * BN;    \
        memset(wa, 0, sizeof(int) * (size_t)(BK * bm));                                    \
        memset(wb, 0, sizeof(int) * (size_t)(BK * BN));                                    \
        for (int tid = 0; tid < NT; tid++) {                                               \
            for (int ia_ = 0; ia_ < AP; ia_++) {                                                 \
                int k, m;                                                                  \
                td_convf_a_chunk(tid, ia_, NT, bm, &k, &m);                                  \
                const int in = m0 + m < cogp;                                              \
                const int64_t src = (int64_t)g * ntab * cogp +                             \
                                    (int64_t)((kt_) * BK + k) * cogp + m0 + m;             \
                if (k < 0 || k >= BK || m % 4 != 0 || m + 4 > bm ||                        \
                    (in && (src % 4 != 0 || src + 4 > nwt))) {                             \
                    BAD("%s: A chunk k %d m %d (source %lld) outside\n", cc->name, k, m,   \
                        (long long)src);                                                   \
                    continue;                                                              \
                }                                                                          \
                for (int e = 0; e < 4; e++) {                                              \
                    sa_[k * bm + m + e] = in ? wt[src + e] : 0.0f;                         \
                    wa[k * bm + m + e]++;                                                  \
                }                                                                          \
            }                                                                              \
            int bk0, bcol;                                                                 \
            td_convf_b_elem(tid, 0, NT, BN, &bk0, &bcol);                                  \
            const td_conv_col col = td_conv_column(s, g, n0 + bcol);                       \
            for (int ib_ = 0; ib_ < BP; ib_++) {                                                 \
                int k, c;                                                                  \
                td_convf_b_elem(tid, ib_, NT, BN, &k, &c);                                   \
                if (k < 0 || k >= BK || c < 0 || c >= BN) {                                \
                    BAD("%s: B element k %d column %d outside the tile\n", cc->name, k, c); \
                    continue;                                                              \
                }                                                                          \
                const td_conv_kent ke = tab[(kt_) * BK + k];                               \
                const int in = td_conv_inside(s, col, ke);                                 \
                const uint32_t off = in ? td_conv_gather_off(col, ke) : 0;                 \
                if (in && (int64_t)off >= xel) {                                           \
                    BAD("%s: gather offset %u outside %lld\n", cc->name, off, (long long)xel); \
                    continue;                                                              \
                }                                                                          \
                sb_[k * BN + c] = in ? xf[off] : 0.0f;                                     \
                wb[k * BN + c]++;                                                          \
            }                                                                              \
        }                                                                                  \
        slots_once("A", wa, BK * bm);                                                      \
        slots_once("B", wb, BK * BN);                                                      \
        pipe_loaded(&pm, st_, kt_);                                                        \
    } while (0)
                    for (int st = 0; st < ST - 1; st++, pm.committed++)
                        if (kt0 + st < kt1) LOAD_F32(kt0 + st, st);
                    for (int kt = kt0; kt < kt1; kt++, pm.committed++) {
                        const int i = kt - kt0, cur = i % ST;
                        pipe_check(cc, &pm, ST, kt, cur);
                        if (kt + ST - 1 < kt1) LOAD_F32(kt + ST - 1, (i + ST - 1) % ST);
                        if (g_bad > bad0) goto done;
                        const float *ac = sa + (size_t)cur * BK * bm, *bc = sb + (size_t)cur * BK * BN;
                        for (int k = 0; k < BK; k++) {
                            /* each warp's float4 loads, in the first block's first tile */
                            if (g == 0 && sp == 0 && m0 == 0 && n0 == 0 && kt == kt0)
                                for (int warp = 0; warp < NT / 32; warp++)
                                    for (int q = 0; q < 2; q++) {
                                        int aad[32], bad_[32];
                                        for (int lane = 0; lane < 32; lane++) {
                                            int ty, tx;
                                            td_convf_thread(warp * 32 + lane, NTX, &ty, &tx);
                                            aad[lane] = k * bm + td_convf_row(ty, 4 * (q % (TM / 4)));
                                            bad_[lane] = k * BN +
                                                         td_convf_col(tx, NTX, 4 * (q % (TN / 4)));
                                        }
                                        ld4_banks("A float4", aad);
                                        ld4_banks("B float4", bad_);
                                    }
                            for (int tid = 0; tid < NT; tid++) {
                                int ty, tx;
                                td_convf_thread(tid, NTX, &ty, &tx);
                                for (int r = 0; r < TM; r++)
                                    for (int e = 0; e < TN; e++)
                                        acc[tid][r][e] = fmaf(ac[k * bm + td_convf_row(ty, r)],
                                                              bc[k * BN + td_convf_col(tx, NTX, e)],
                                                              acc[tid][r][e]);
                            }
                        }
                    }
#undef LOAD_F32
                    /* epilogue: S 1: + bias, to the output; else to the partials; runs of 4
                     * columns by one 16-byte store where the kernel makes one */
                    const int v4 = S == 1 ? s->P % 4 == 0 : s->N % 4 == 0;
                    for (int tid = 0; tid < NT; tid++) {
                        int ty, tx;
                        td_convf_thread(tid, NTX, &ty, &tx);
                        for (int q = 0; q < TN / 4; q++) {
                            const int j = n0 + td_convf_col(tx, NTX, 4 * q);
                            if (j >= s->N) continue;
                            for (int r = 0; r < TM; r++) {
                                const int m = m0 + td_convf_row(ty, r);
                                if (m >= s->cog) continue;
                                if (v4 && j + 3 < s->N) {
                                    const int64_t o0 = S == 1 ? td_conv_out_off(s, g, m, j)
                                                              : td_conv_part_off(s, sp, g, m, j);
                                    for (int e = 1; e < 4; e++) {
                                        const int64_t oe = S == 1 ? td_conv_out_off(s, g, m, j + e)
                                                                  : td_conv_part_off(s, sp, g, m, j + e);
                                        if (o0 % 4 != 0 || oe != o0 + e)
                                            BAD("%s: columns %d..%d not one aligned run\n", cc->name, j, j + 3);
                                    }
                                }
                                /* (float + small integer: exact in double too) */
                                for (int e = 0; e < 4 && j + e < s->N; e++)
                                    put_result(s, &res, S, sp, g, m, j + e, acc[tid][r][4 * q + e], b);
                            }
                        }
                    }
                }
    if (S > 1 && !reduce_partials(cc, s, S, part, pwritten, b, y, written)) goto done;
    for (int64_t i = 0; i < nout; i++) {
        if (written[i] != 1) BAD("%s: output %lld written %d times\n", cc->name, (long long)i, written[i]);
        else if (y[i] != want[i])
            BAD("%s f32 %dx%d split %d: output %lld got %g want %g\n", cc->name, bm, BN, S,
                (long long)i, y[i], want[i]);
    }
done:
    printf("conv_frag_check: %-28s tile %3dx%-3d f32 (FFMA, %d threads) split %d (%d stages): "
           "%s\n", cc->name, bm, BN, NT, S, ST, g_bad > bad0 ? "FAIL" : "ok");
    free(y);
    free(part);
    free(written);
    free(pwritten);
    free(xf);
    free(wt);
    free(tab);
    free(sa);
    free(sb);
    free(wa);
    free(wb);
}

static void run_case(const conv_case *cc)
{
    int64_t out[3];
    for (int d = 0; d < 3; d++) out[d] = out_dim(cc, d);
    td_conv_shape s;
    if (!td_conv_shape_init(&s, cc->n, cc->c, cc->co, cc->groups, cc->in, out, cc->k,
                            cc->stride, cc->pad_lo, cc->dil)) {
        BAD("%s: td_conv_shape_init refused it\n", cc->name);
        return;
    }
    const int64_t cg = cc->c / cc->groups, cog = cc->co / cc->groups;
    const int64_t xel = cc->n * cc->c * s.L, wel = cc->co * s.K;
    const int64_t nout = cc->n * cc->co * s.P;
    double *x = malloc(sizeof *x * (size_t)xel), *w = malloc(sizeof *w * (size_t)wel);
    double *b = malloc(sizeof *b * (size_t)cc->co), *want = malloc(sizeof *want * (size_t)nout);
    for (int64_t i = 0; i < xel; i++) x[i] = (double)(rand() % 7 - 3);
    for (int64_t i = 0; i < wel; i++) w[i] = (double)(rand() % 7 - 3);
    for (int64_t i = 0; i < cc->co; i++) b[i] = (double)(rand() % 7 - 3);
    /* direct convolution */
    for (int64_t img = 0; img < cc->n; img++)
        for (int64_t o = 0; o < cc->co; o++)
            for (int64_t od = 0; od < out[0]; od++)
                for (int64_t oh = 0; oh < out[1]; oh++)
                    for (int64_t ow = 0; ow < out[2]; ow++) {
                        const int64_t gi = o / cog;
                        double sum = cc->bias ? b[o] : 0;
                        for (int64_t c = 0; c < cg; c++)
                            for (int64_t kd = 0; kd < cc->k[0]; kd++)
                                for (int64_t kh = 0; kh < cc->k[1]; kh++)
                                    for (int64_t kw = 0; kw < cc->k[2]; kw++) {
                                        const int64_t id = od * cc->stride[0] - cc->pad_lo[0] + kd * cc->dil[0];
                                        const int64_t ih = oh * cc->stride[1] - cc->pad_lo[1] + kh * cc->dil[1];
                                        const int64_t iw = ow * cc->stride[2] - cc->pad_lo[2] + kw * cc->dil[2];
                                        if (id < 0 || id >= cc->in[0] || ih < 0 || ih >= cc->in[1] ||
                                            iw < 0 || iw >= cc->in[2])
                                            continue;
                                        sum += x[(((img * cc->c + gi * cg + c) * cc->in[0] + id) *
                                                      cc->in[1] + ih) * cc->in[2] + iw] *
                                               w[(((o * cg + c) * cc->k[0] + kd) * cc->k[1] + kh) *
                                                     cc->k[2] + kw];
                                    }
                        want[((img * cc->co + o) * out[0] + od) * out[1] * out[2] + oh * out[2] + ow] = sum;
                    }
    static const int cfg[4][3] = {{128, 128, 2}, {64, 128, 2}, {128, 64, 4}, {64, 64, 2}};
    for (int i = 0; i < 4; i++)
        for (int av = 0; av < 2; av++) {
            if (av && s.K % 8 != 0) continue; /* the kernel takes pairs there */
            run_cfg(cc, &s, x, w, cc->bias ? b : NULL, want, cfg[i][0], cfg[i][1], cfg[i][2], av);
        }
    /* the channels-last path: no split, the split td_conv_splits_wave picks for the tile's
     * grid, and the most the K tiles allow */
    if (td_conv_nhwc_ok(&s))
        for (int i = 0; i < 4; i++) {
            const int64_t blocks = (int64_t)((s.N + cfg[i][1] - 1) / cfg[i][1]) *
                                   ((s.cog + cfg[i][0] - 1) / cfg[i][0]) * s.groups;
            int splits[3];
            split_set(&s, blocks, cfg[i][0] == 128 && cfg[i][1] == 64 ? 3 : 2, splits);
            for (int k = 0; k < 3; k++)
                if (splits[k] > 0)
                    run_cfg_nhwc(cc, &s, x, w, cc->bias ? b : NULL, want, cfg[i][0],
                                 cfg[i][1], cfg[i][2], splits[k]);
        }
    /* the f32 kernel: every tile (BM, BN, TN: gpu_conv.cu's f32_pick), no split, the split
     * td_conv_splits picks over its K tiles and the most they allow */
    static const int fcfg[4][3] = {{128, 128, 8}, {64, 128, 8}, {128, 64, 8}, {128, 64, 4}};
    for (int i = 0; i < 4; i++) {
        const td_conv_shape sf = td_convf_shape(&s);
        const int64_t blocks = (int64_t)((s.N + fcfg[i][1] - 1) / fcfg[i][1]) *
                               ((s.cog + fcfg[i][0] - 1) / fcfg[i][0]) * s.groups;
        int splits[3];
        split_set(&sf, blocks, 0, splits);
        for (int k = 0; k < 3; k++)
            if (splits[k] > 0)
                run_cfg_f32(cc, &s, x, w, cc->bias ? b : NULL, want, fcfg[i][0], fcfg[i][1],
                            fcfg[i][2], splits[k]);
    }
    free(x);
    free(w);
    free(b);
    free(want);
}

int main(void)
{
    srand(13);
    static const conv_case cases[] = {
        /* name, n, c, co, groups, in, k, stride, pad_lo, pad_hi, dil, bias */
        {"2d 3x3 pad 1", 2, 8, 24, 1, {1, 7, 7}, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}, {1, 1, 1}, 1},
        {"2d 7x7/2 pad 3 (conv1)", 2, 3, 16, 1, {1, 15, 15}, {1, 7, 7}, {1, 2, 2}, {0, 3, 3}, {0, 3, 3}, {1, 1, 1}, 0},
        {"2d 1x1", 3, 40, 70, 1, {1, 5, 5}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {1, 1, 1}, 1},
        {"2d 1x1/2", 2, 16, 32, 1, {1, 9, 9}, {1, 1, 1}, {1, 2, 2}, {0, 0, 0}, {0, 0, 0}, {1, 1, 1}, 0},
        {"2d groups 2 dil 2", 2, 16, 20, 2, {1, 9, 9}, {1, 3, 3}, {1, 1, 1}, {0, 2, 2}, {0, 2, 2}, {1, 2, 2}, 1},
        {"2d depthwise", 2, 8, 16, 8, {1, 6, 6}, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}, {1, 1, 1}, 1},
        {"2d pad lo 0 hi 1, stride 2", 3, 5, 9, 1, {1, 8, 7}, {1, 3, 2}, {1, 2, 2}, {0, 0, 0}, {0, 1, 1}, {1, 1, 1}, 1},
        {"3d", 1, 4, 8, 1, {5, 6, 7}, {3, 2, 3}, {2, 1, 2}, {1, 0, 1}, {1, 0, 1}, {1, 2, 1}, 1},
        {"1d M 130 stride 3", 3, 6, 130, 1, {1, 1, 50}, {1, 1, 5}, {1, 1, 3}, {0, 0, 2}, {0, 0, 2}, {1, 1, 1}, 1},
        {"2d 3x3 K 576 full tiles", 2, 64, 128, 1, {1, 8, 8}, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}, {1, 1, 1}, 0},
        {"2d groups 4 M 40", 1, 32, 160, 4, {1, 7, 5}, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}, {1, 1, 1}, 1},
        /* channels-last shapes (C/G a multiple of 8), ResNet-like at small sizes */
        {"layer1-like 3x3 64->64", 2, 64, 64, 1, {1, 10, 10}, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}, {1, 1, 1}, 0},
        {"layer4-like 3x3 64->136 7x7", 2, 64, 136, 1, {1, 7, 7}, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}, {1, 1, 1}, 1},
        {"layer3-like 1x1 128->64", 2, 128, 64, 1, {1, 7, 7}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {1, 1, 1}, 1},
        {"3x3/2 pad 1 C 16", 3, 16, 24, 1, {1, 9, 8}, {1, 3, 3}, {1, 2, 2}, {0, 1, 1}, {0, 1, 1}, {1, 1, 1}, 1},
        {"3d groups 2 C/G 8", 2, 16, 12, 2, {4, 5, 6}, {3, 2, 3}, {2, 1, 2}, {1, 0, 1}, {1, 0, 1}, {1, 2, 1}, 1},
        {"conformance split-K groups 2", 2, 128, 16, 2, {1, 4, 4}, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}, {1, 1, 1}, 1},
        {"5x5 kernel over 3x3 input", 2, 8, 8, 1, {1, 3, 3}, {1, 5, 5}, {1, 1, 1}, {0, 2, 2}, {0, 2, 2}, {1, 1, 1}, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);

    /* split-K ranges: for every K tile count up to 400 and every grid below the split
     * threshold, the S td_conv_splits picks has splits that tile [0, nk) in order, none
     * empty, each but the last at least TD_CONV_SPLIT_MIN_TILES long */
    {
        td_conv_shape s;
        memset(&s, 0, sizeof s);
        for (s.nk = 1; s.nk <= 400; s.nk++)
            for (int64_t blocks = 1; blocks <= TD_CONV_SPLIT_BLOCKS; blocks++) {
                const int S = td_conv_splits(&s, blocks);
                int next = 0;
                if (S < 1 || S > TD_CONV_SPLIT_MAX) BAD("nk %d: %d splits\n", s.nk, S);
                for (int sp = 0; sp < S; sp++) {
                    int kt0, kt1;
                    td_conv_split_range(&s, S, sp, &kt0, &kt1);
                    if (kt0 != next || kt1 <= kt0 || (S > 1 && sp < S - 1 && kt1 - kt0 < TD_CONV_SPLIT_MIN_TILES))
                        BAD("nk %d: split %d of %d is [%d, %d)\n", s.nk, sp, S, kt0, kt1);
                    next = kt1;
                }
                if (next != s.nk) BAD("nk %d: %d splits end at tile %d\n", s.nk, S, next);
            }
    }
    /* td_conv_shape_init's limits: 32-bit offsets */
    {
        td_conv_shape s;
        const int64_t one[3] = {1, 1, 1}, zero[3] = {0, 0, 0}, k3[3] = {1, 3, 3};
        const int64_t in_ok[3] = {1, 224, 224}, in_big[3] = {1, 2048, 2048};
        if (!td_conv_shape_init(&s, 32, 64, 64, 1, in_ok, in_ok, k3, one, one, one))
            BAD("shape_init refused [32, 64, 224, 224]\n");
        /* 32 x 64 x 2048^2 = 2^33 input elements */
        if (td_conv_shape_init(&s, 32, 64, 64, 1, in_big, in_big, k3, one, one, one))
            BAD("shape_init took [32, 64, 2048, 2048] (past 2^31 elements)\n");
        if (td_conv_shape_init(&s, 1, 64, 64, 1, in_ok, in_ok, k3, one, zero, one) &&
            s.K != 576)
            BAD("shape_init: K %d, want 576\n", s.K);
        if (td_conv_shape_init(&s, 1, 6, 4, 4, in_ok, in_ok, k3, one, zero, one))
            BAD("shape_init took channels 6 in 4 groups\n");
    }
    printf("conv_frag_check: %s\n", g_bad == 0 ? "all match" : "FAILED");
    return g_bad == 0 ? 0 : 1;
}
