/* attn_f32_check.c — the index math of backends/gpu/gpu_attention_f32.cu on the host,
 * without a GPU, for every tile configuration the kernel is built in (head dim 64 and 128;
 * BM x BN = 128 x 64, 64 x 64, 128 x 32, 64 x 32; 128 x 64 only at head dim 64), from the formulas
 * of backends/gpu/gpu_attention_f32_layout.h:
 *   1. ownership: every element of the S tile and of the O tile belongs to exactly one
 *      thread, and the 16 threads of a half-warp share their rows (the shuffles' premise);
 *   2. P: each row is written and read by the same half-warp (a __syncwarp suffices);
 *   3. bounds: every shared-memory access lies inside its tile and row, the tiles do not
 *      overlap, the total fits 227 KiB, and the cp.async chunks cover each tile once;
 *   4. banks: the shared-memory wavefronts of each warp-wide access (a bank serves one
 *      4-byte word per wavefront; identical addresses broadcast) equal the least possible,
 *      ceil(distinct bytes / 128);
 *   5. a model of the kernel, phase by phase (per CTA and key tile: the threads' score
 *      chains, the edge and causal masks, the half-warp max and sum, P through the tile,
 *      O += P V, y = O / l), on odd L and S, causal or not, against a double reference.
 * Exit 0 when all hold. */
#include "backends/gpu/gpu_attention_f32_layout.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_bad;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            if (g_bad++ < 20) {                                                                    \
                fprintf(stderr, "attn_f32_check: ");                                               \
                fprintf(stderr, __VA_ARGS__);                                                      \
                fprintf(stderr, "\n");                                                             \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* Wavefronts of one warp-wide access: `word` holds the first 4-byte word offset each lane
 * touches, `nw` words per lane (1 or 4, contiguous). */
static int wavefronts(const int *word, int nw, int *least)
{
    int cnt[32] = {0};
    int seen[32 * 4], ns = 0;
    for (int lane = 0; lane < 32; lane++)
        for (int w = 0; w < nw; w++) {
            const int a = word[lane] + w;
            int dup = 0;
            for (int s = 0; s < ns; s++)
                dup |= seen[s] == a;
            if (dup) continue;
            seen[ns++] = a;
            cnt[((a % 32) + 32) % 32]++;
        }
    int mx = 0;
    for (int b = 0; b < 32; b++)
        if (cnt[b] > mx) mx = cnt[b];
    *least = (ns * 4 + 127) / 128;
    return mx;
}

static void check_layout(int d, int bm, int bn)
{
    const int nth = 2 * bm, tn = bn / 16, th = d / 64, ty_n = bm / 8;
    const int qs = td_af32_qstride(d), ks = td_af32_kstride(d), vs = td_af32_vstride(d),
              ps = td_af32_pstride(bn);
    /* 1. ownership */
    int *own_s = calloc((size_t)bm * bn, sizeof(int)), *own_o = calloc((size_t)bm * d, sizeof(int));
    for (int tid = 0; tid < nth; tid++) {
        const int tx = tid & 15, ty = tid >> 4;
        for (int i = 0; i < 8; i++) {
            const int r = td_af32_row(ty, i, bm);
            CHECK(r >= 0 && r < bm, "d %d bm %d: row %d out of the block", d, bm, r);
            if (r < 0 || r >= bm) continue;
            for (int j = 0; j < tn; j++) {
                const int c = td_af32_scol(tx, j);
                CHECK(c >= 0 && c < bn, "bn %d: S column %d", bn, c);
                if (c >= 0 && c < bn) own_s[r * bn + c]++;
            }
            for (int h = 0; h < th; h++)
                for (int e = 0; e < 4; e++) {
                    const int c = td_af32_ocol(tx, h) + e;
                    CHECK(c >= 0 && c < d, "d %d: O column %d", d, c);
                    if (c >= 0 && c < d) own_o[r * d + c]++;
                }
        }
    }
    for (int x = 0; x < bm * bn; x++)
        CHECK(own_s[x] == 1, "d %d bm %d bn %d: S (%d, %d) owned %d times", d, bm, bn, x / bn,
              x % bn, own_s[x]);
    for (int x = 0; x < bm * d; x++)
        CHECK(own_o[x] == 1, "d %d bm %d: O (%d, %d) owned %d times", d, bm, x / d, x % d,
              own_o[x]);
    free(own_s);
    free(own_o);
    /* 2. P rows and the shuffles: row r's threads are those with ty = the row's ty, the 16
     * lanes of one half-warp (xor 1..8 stay inside it) */
    for (int r = 0; r < bm; r++) {
        int owner = -1, n = 0;
        for (int ty = 0; ty < ty_n; ty++)
            for (int i = 0; i < 8; i++)
                if (td_af32_row(ty, i, bm) == r) owner = ty, n++;
        CHECK(n == 1, "bm %d: row %d held by %d (ty, i) pairs", bm, r, n);
        (void)owner;
    }
    /* 3. bounds and tiles */
    const int ko = td_af32_k_off(d, bm), vo = td_af32_v_off(d, bm, bn),
              po = td_af32_p_off(d, bm, bn), tot = td_af32_smem_floats(d, bm, bn);
    CHECK(ko >= bm * qs && vo >= ko + 2 * bn * ks && po >= vo + 2 * bn * vs && tot >= po + bm * ps,
          "d %d bm %d bn %d: tiles overlap", d, bm, bn);
    CHECK(tot * 4 <= 227 * 1024, "d %d bm %d bn %d: %d bytes of shared memory", d, bm, bn, tot * 4);
    CHECK(qs >= d && ks >= d && vs >= d && ps >= bn, "strides below the row");
    CHECK(ko % 4 == 0 && vo % 4 == 0 && po % 4 == 0 && qs % 4 == 0 && ks % 4 == 0 && vs % 4 == 0 &&
              ps % 4 == 0,
          "d %d bm %d bn %d: a float4 access misaligned", d, bm, bn);
    const int rows_of[3] = {bm, bn, bn}, str_of[3] = {qs, ks, vs};
    for (int t = 0; t < 3; t++) {
        const int rows = rows_of[t], nchunk = rows * d / 4;
        CHECK(nchunk % nth == 0, "tile %d: %d chunks over %d threads", t, nchunk, nth);
        int *hit = calloc((size_t)rows * str_of[t], sizeof(int));
        for (int it = 0; it < nchunk / nth; it++)
            for (int tid = 0; tid < nth; tid++) {
                int r, c;
                td_af32_chunk(tid + it * nth, d, &r, &c);
                CHECK(r >= 0 && r < rows && c >= 0 && c + 4 <= d && c % 4 == 0,
                      "tile %d: chunk (%d, %d)", t, r, c);
                if (r < 0 || r >= rows || c < 0 || c + 4 > d) continue;
                for (int e = 0; e < 4; e++)
                    hit[r * str_of[t] + c + e]++;
            }
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < d; c++)
                CHECK(hit[r * str_of[t] + c] == 1, "tile %d: (%d, %d) copied %d times", t, r, c,
                      hit[r * str_of[t] + c]);
        free(hit);
    }
    /* 4. banks, per warp (word offsets relative to 16-byte aligned tile starts) */
    for (int w = 0; w < nth / 32; w++) {
        int addr[32], least, wf;
        for (int k4 = 0; k4 < d / 4; k4++) {
            for (int i = 0; i < 8; i++) {
                for (int lane = 0; lane < 32; lane++)
                    addr[lane] = td_af32_row((32 * w + lane) >> 4, i, bm) * qs + 4 * k4;
                wf = wavefronts(addr, 4, &least);
                CHECK(wf == least, "d %d bm %d: Q read wavefronts %d, least %d", d, bm, wf, least);
            }
            for (int j = 0; j < tn; j++) {
                for (int lane = 0; lane < 32; lane++)
                    addr[lane] = td_af32_scol(lane & 15, j) * ks + 4 * k4;
                wf = wavefronts(addr, 4, &least);
                CHECK(wf == least, "d %d bn %d: K read wavefronts %d, least %d", d, bn, wf, least);
            }
        }
        for (int i = 0; i < 8; i++) {
            for (int j = 0; j < tn; j++) {
                for (int lane = 0; lane < 32; lane++)
                    addr[lane] =
                        td_af32_row((32 * w + lane) >> 4, i, bm) * ps + td_af32_scol(lane & 15, j);
                wf = wavefronts(addr, 1, &least);
                CHECK(wf == least, "bm %d bn %d: P write wavefronts %d, least %d", bm, bn, wf,
                      least);
            }
            for (int j4 = 0; j4 < bn / 4; j4++) {
                for (int lane = 0; lane < 32; lane++)
                    addr[lane] = td_af32_row((32 * w + lane) >> 4, i, bm) * ps + 4 * j4;
                wf = wavefronts(addr, 4, &least);
                CHECK(wf == least, "bm %d bn %d: P read wavefronts %d, least %d", bm, bn, wf,
                      least);
            }
        }
        for (int h = 0; h < th; h++) {
            for (int lane = 0; lane < 32; lane++)
                addr[lane] = 3 * vs + td_af32_ocol(lane & 15, h);
            wf = wavefronts(addr, 4, &least);
            CHECK(wf == least, "d %d: V read wavefronts %d, least %d", d, wf, least);
        }
    }
}

/* ---- 5. the kernel's phases, one CTA after another, its threads one after another ---- */

static float model_ex2(float x)
{
    return exp2f(x);
}

static void model_attention(int d, int bm, int bn, int l, int s, int causal, float scale,
                            const float *q, const float *k, const float *v, float *y)
{
    const int nth = 2 * bm, tn = bn / 16, th = d / 64;
    const int qs = td_af32_qstride(d), ks = td_af32_kstride(d), vs = td_af32_vstride(d),
              ps = td_af32_pstride(bn);
    float *sm = calloc((size_t)td_af32_smem_floats(d, bm, bn), sizeof(float));
    float *sq = sm, *sk = sm + td_af32_k_off(d, bm), *sv = sm + td_af32_v_off(d, bm, bn),
          *sp = sm + td_af32_p_off(d, bm, bn);
    /* per-thread state */
    float(*o)[8][8] = calloc((size_t)nth, sizeof *o); /* [tid][i][4 th] (th <= 2) */
    float(*mrow)[8] = calloc((size_t)nth, sizeof *mrow),
    (*lrow)[8] = calloc((size_t)nth, sizeof *lrow);
    float(*sreg)[8][8] = calloc((size_t)nth, sizeof *sreg); /* [tid][i][tn] (tn <= 4) */
    const int nblk = (l + bm - 1) / bm;
    for (int blk = 0; blk < nblk; blk++) {
        const int m0 = blk * bm;
        const int kv_end = causal ? (s < m0 + bm ? s : m0 + bm) : s;
        const int ntiles = (kv_end + bn - 1) / bn;
        for (int x = 0; x < bm * d / 4; x++) {
            int r, c;
            td_af32_chunk(x, d, &r, &c);
            for (int e = 0; e < 4; e++)
                sq[r * qs + c + e] = m0 + r < l ? q[(size_t)(m0 + r) * d + c + e] : 0.0f;
        }
        for (int tid = 0; tid < nth; tid++)
            for (int i = 0; i < 8; i++) {
                mrow[tid][i] = -INFINITY;
                lrow[tid][i] = 0.0f;
                for (int c = 0; c < 8; c++)
                    o[tid][i][c] = 0.0f;
            }
        for (int jt = 0; jt < ntiles; jt++) {
            const int buf = jt & 1, kv0 = jt * bn;
            float *kb = sk + buf * bn * ks, *vb = sv + buf * bn * vs;
            for (int x = 0; x < bn * d / 4; x++) {
                int r, c;
                td_af32_chunk(x, d, &r, &c);
                for (int e = 0; e < 4; e++) {
                    kb[r * ks + c + e] = kv0 + r < s ? k[(size_t)(kv0 + r) * d + c + e] : 0.0f;
                    vb[r * vs + c + e] = kv0 + r < s ? v[(size_t)(kv0 + r) * d + c + e] : 0.0f;
                }
            }
            const int edge = kv0 + bn > s || (causal && kv0 + bn - 1 > m0);
            /* scores, scale, mask, per-thread max */
            float mxt[512][8];
            for (int tid = 0; tid < nth; tid++) {
                const int tx = tid & 15, ty = tid >> 4;
                for (int i = 0; i < 8; i++) {
                    const int rl = td_af32_row(ty, i, bm), row = m0 + rl;
                    float mx = mrow[tid][i];
                    for (int j = 0; j < tn; j++) {
                        const int cl = td_af32_scol(tx, j);
                        float acc = 0.0f;
                        for (int kk = 0; kk < d; kk++)
                            acc = fmaf(sq[rl * qs + kk], kb[cl * ks + kk], acc);
                        float t = acc * scale;
                        if (edge && (kv0 + cl >= s || (causal && kv0 + cl > row))) t = -INFINITY;
                        sreg[tid][i][j] = t;
                        mx = fmaxf(mx, t);
                    }
                    mxt[tid][i] = mx;
                }
            }
            /* the half-warp's xor shuffles (1, 2, 4, 8), then exp, P, rescale */
            for (int tid = 0; tid < nth; tid++) {
                const int tx = tid & 15, ty = tid >> 4;
                for (int i = 0; i < 8; i++) {
                    float m4[16];
                    for (int x = 0; x < 16; x++)
                        m4[x] = mxt[(tid & ~15) + x][i];
                    for (int sh = 1; sh < 16; sh <<= 1) {
                        float n4[16];
                        for (int x = 0; x < 16; x++)
                            n4[x] = fmaxf(m4[x], m4[x ^ sh]);
                        memcpy(m4, n4, sizeof m4);
                    }
                    const float mx = m4[tx];
                    const int rl = td_af32_row(ty, i, bm);
                    const float mu = mx == -INFINITY ? 0.0f : mx;
                    const float alpha = model_ex2((mrow[tid][i] - mu) * 1.44269504088896340736f);
                    mrow[tid][i] = mx;
                    float ls = 0.0f;
                    for (int j = 0; j < tn; j++) {
                        const float p = model_ex2((sreg[tid][i][j] - mu) * 1.44269504088896340736f);
                        sp[rl * ps + td_af32_scol(tx, j)] = p;
                        ls += p;
                    }
                    lrow[tid][i] = lrow[tid][i] * alpha + ls;
                    for (int c = 0; c < 4 * th; c++)
                        o[tid][i][c] *= alpha;
                }
            }
            /* O += P V */
            for (int tid = 0; tid < nth; tid++) {
                const int tx = tid & 15, ty = tid >> 4;
                for (int i = 0; i < 8; i++) {
                    const int rl = td_af32_row(ty, i, bm);
                    for (int jj = 0; jj < bn; jj++) {
                        const float p = sp[rl * ps + jj];
                        for (int h = 0; h < th; h++)
                            for (int e = 0; e < 4; e++)
                                o[tid][i][4 * h + e] = fmaf(
                                    p, vb[jj * vs + td_af32_ocol(tx, h) + e], o[tid][i][4 * h + e]);
                    }
                }
            }
        }
        for (int tid = 0; tid < nth; tid++) {
            const int tx = tid & 15, ty = tid >> 4;
            for (int i = 0; i < 8; i++) {
                float l4[16];
                for (int x = 0; x < 16; x++)
                    l4[x] = lrow[(tid & ~15) + x][i];
                for (int sh = 1; sh < 16; sh <<= 1) {
                    float n4[16];
                    for (int x = 0; x < 16; x++)
                        n4[x] = l4[x] + l4[x ^ sh];
                    memcpy(l4, n4, sizeof l4);
                }
                const float lsum = l4[tx];
                const int row = m0 + td_af32_row(ty, i, bm);
                if (row >= l) continue;
                for (int h = 0; h < th; h++)
                    for (int e = 0; e < 4; e++)
                        y[(size_t)row * d + td_af32_ocol(tx, h) + e] = o[tid][i][4 * h + e] / lsum;
            }
        }
    }
    free(sm);
    free(o);
    free(mrow);
    free(lrow);
    free(sreg);
}

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float gen(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) * 0x1p-52 - 1.0);
}

static void check_model(int d, int bm, int bn, int l, int s, int causal, float scale)
{
    float *q = malloc(sizeof(float) * (size_t)l * d), *k = malloc(sizeof(float) * (size_t)s * d),
          *v = malloc(sizeof(float) * (size_t)s * d), *y = malloc(sizeof(float) * (size_t)l * d);
    for (int i = 0; i < l * d; i++)
        q[i] = 2 * gen();
    for (int i = 0; i < s * d; i++)
        k[i] = 2 * gen(), v[i] = gen();
    for (int i = 0; i < l * d; i++)
        y[i] = NAN;
    model_attention(d, bm, bn, l, s, causal, scale, q, k, v, y);
    double worst = 0;
    for (int r = 0; r < l; r++) {
        const int n = causal ? (r + 1 < s ? r + 1 : s) : s;
        double *w = malloc(sizeof(double) * (size_t)n), mx = -INFINITY, sum = 0;
        for (int j = 0; j < n; j++) {
            double acc = 0;
            for (int kk = 0; kk < d; kk++)
                acc += (double)q[r * d + kk] * k[j * d + kk];
            w[j] = acc * scale;
            if (w[j] > mx) mx = w[j];
        }
        for (int j = 0; j < n; j++)
            sum += (w[j] = exp(w[j] - mx));
        for (int c = 0; c < d; c++) {
            double want = 0;
            for (int j = 0; j < n; j++)
                want += w[j] * v[j * d + c];
            want /= sum;
            const double err = fabs(want - y[r * d + c]);
            if (!(err <= worst)) worst = isnan(err) ? INFINITY : err;
        }
        free(w);
    }
    /* far above f32 rounding (these sums are short), far below any index mistake */
    CHECK(worst <= 1e-5, "model d %d bm %d bn %d l %d s %d causal %d scale %g: max|err| %.3g", d,
          bm, bn, l, s, causal, scale, worst);
    printf("model d %3d bm %3d bn %2d  L %3d S %3d %s scale %6.3f: max|err| %.2e\n", d, bm, bn, l,
           s, causal ? "causal" : "full  ", scale, worst);
    free(q), free(k), free(v), free(y);
}

int main(void)
{
    /* the configurations gpu_attention_f32.cu instantiates (head dim 128 not at 128 x 64:
     * its 236 KiB do not fit) */
    static const int cfg[7][3] = {{64, 128, 64},  {64, 64, 64},  {64, 128, 32}, {64, 64, 32},
                                  {128, 128, 32}, {128, 64, 64}, {128, 64, 32}};
    for (int c = 0; c < 7; c++) {
        const int d = cfg[c][0], bm = cfg[c][1], bn = cfg[c][2];
        check_layout(d, bm, bn);
        /* odd lengths (L, S not multiples of the tiles), L < S and L > S, causal */
        check_model(d, bm, bn, bm + 37, 2 * bn + 5, 0, 0.125f);
        check_model(d, bm, bn, bm + 37, 2 * bn + 5, 1, 0.125f);
        check_model(d, bm, bn, 2 * bm + 3, bn - 7, 1, -0.2f);
        check_model(d, bm, bn, 5, 3 * bn + 1, 1, 0.3f);
    }
    printf("attn_f32_check: %s\n", g_bad ? "FAILED" : "ok");
    return g_bad ? 1 : 0;
}
