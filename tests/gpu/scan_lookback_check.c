/* scan_lookback_check.c — the determinism argument of backends/gpu/gpu_scan.cu's ordered
 * look-back (k_scan_lookback, TENSORD_GPU_SCAN_VARIANT=1), on the host, without a GPU.
 *
 * A model of the kernel's protocol, not its code: tiles are claimed in order, at most R of
 * them in flight, and a random scheduler advances one of them a step at a time. A tile
 * publishes its aggregate (tile 0: its inclusive prefix, incl_0 = agg_0), then looks back:
 * the 32 lanes of a window [hi - 32, hi) each read their predecessor's flag and value at
 * their own step (so a window's snapshot is taken over time, as on the GPU, and a flag may
 * turn from 1 to 2 under it), every lane waiting while its flag is 0; then the highest lane
 * whose flag was 2 is the start j (none: the window moves down by 32), and the prefix is
 * folded as the kernel folds it: incl_j, the window's aggregates above j, then the
 * aggregates of the windows passed over, in ascending order. A tile publishes its inclusive
 * prefix (excl op agg) afterwards — or, at random, never (TENSORD_GPU_SCAN_VARIANT=2's
 * skipping, so later tiles must cross windows). The totals are random with -0.0, +-inf, NaN,
 * huge and tiny magnitudes among them, summed and multiplied in double (f32, f64 lines) and
 * in float (f16, bf16 lines). Every tile's exclusive and inclusive prefix must equal the
 * plain ascending left fold agg_0 op agg_1 op ... bit for bit (a NaN: any NaN, see same()),
 * whatever the schedule.
 * It can fail: folding the window right to left instead (CUB's order, which makes its
 * look-back timing dependent) gave 249969 mismatching prefixes in 318769 look-backs when
 * tried by hand. Exit 0 when all hold. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCAN_MODEL_SEED 0x9e3779b97f4a7c15u
#include "scan_model.h"

enum kind { SUM_F64, PROD_F64, SUM_F32, PROD_F32 };
static const char *const kind_name[] = {"sum/double", "prod/double", "sum/float", "prod/float"};

/* The accumulator's op; float accumulators' values are stored exactly in a double. */
static double op(enum kind k, double a, double b)
{
    switch (k) {
    case SUM_F64: return a + b;
    case PROD_F64: return a * b;
    case SUM_F32: return (double)((float)a + (float)b);
    case PROD_F32: return (double)((float)a * (float)b);
    }
    return 0;
}


/* Bit for bit, except that any NaN equals any NaN: the host compiler may commute the
 * operands of + and * (x86 then returns the other operand's NaN payload and sign). On the
 * GPU only float results are one canonical NaN; double ones keep a payload and sign, so
 * variant 1's NaN bits may depend on timing as the chained scan's did (scan_chain_check.c,
 * which compares NaNs exactly; gpu_scan.cu canon_nan). */
static int same(double a, double b) { return bits(a) == bits(b) || (a != a && b != b); }


/* A tile total: mostly ordinary values, sometimes a special one (`special` in 1/1000). */
static double total(enum kind k, int special)
{
    const int f32 = k == SUM_F32 || k == PROD_F32, prod = k == PROD_F64 || k == PROD_F32;
    double v;
    if ((int)(rnd() % 1000) < special) {
        switch (rnd() % 7) {
        case 0: v = -0.0; break;
        case 1: v = INFINITY; break;
        case 2: v = -INFINITY; break;
        case 3: v = NAN; break;
        case 4: v = f32 ? FLT_MAX / 2 : DBL_MAX / 2; break;
        case 5: v = f32 ? FLT_MIN / 8 : DBL_MIN / 8; break; /* subnormal */
        default: v = 0.0; break;
        }
    } else if (prod) {
        v = 1.0 + (unif() - 0.5) / 64;
    } else {
        v = (unif() - 0.5) * ldexp(1.0, (int)(rnd() % 81) - 40);
    }
    return f32 ? (double)(float)v : v;
}

enum { LANES = 32, MAXT = 700, MAXR = 64 };

/* One tile in flight: where it is in the protocol. */
struct tile {
    int t, phase; /* 0: publish aggregate, 1: read the window, 2: fold and publish, 3: done */
    int64_t hi;
    int seen[LANES]; /* flag a lane read, -1: not yet (or 0: it was 0, read again) */
    double val[LANES];
    int skip; /* never publishes its inclusive prefix */
};

static unsigned g_flag[MAXT];
static double g_agg[MAXT], g_incl[MAXT], g_excl[MAXT];
static long g_crossed, g_started_far, g_lookbacks;

/* Advance tile p one step; returns 1 when it is done. */
static int step(enum kind k, struct tile *p)
{
    const int t = p->t;
    if (p->phase == 0) {
        if (t == 0) {
            g_incl[0] = g_agg[0];
            g_flag[0] = 2;
            g_excl[0] = NAN; /* none: tile 0 starts from the identity */
            p->phase = 3;
            return 1;
        }
        g_flag[t] = 1;
        p->hi = t;
        for (int l = 0; l < LANES; l++) p->seen[l] = -1;
        p->phase = 1;
        return 0;
    }
    if (p->phase == 1) { /* one lane reads (or re-reads) its predecessor's flag */
        int todo[LANES], nt = 0;
        for (int l = 0; l < LANES; l++)
            if (p->seen[l] <= 0) todo[nt++] = l;
        if (nt > 0) {
            const int l = todo[rnd() % (unsigned)nt];
            const int64_t i = p->hi - LANES + l;
            if (i < 0) {
                p->seen[l] = 3; /* below tile 0: never the start */
            } else {
                p->seen[l] = (int)g_flag[i];
                if (g_flag[i] != 0) p->val[l] = g_flag[i] == 2 ? g_incl[i] : g_agg[i];
            }
            return 0;
        }
        int L = -1;
        for (int l = LANES - 1; l >= 0 && L < 0; l--)
            if (p->seen[l] == 2) L = l;
        if (L < 0) {
            p->hi -= LANES;
            g_crossed++;
            for (int l = 0; l < LANES; l++) p->seen[l] = -1;
            return 0;
        }
        if (p->hi - LANES + L < t - 1) g_started_far++;
        double acc = p->val[L];
        for (int l = L + 1; l < LANES; l++) acc = op(k, acc, p->val[l]);
        for (int64_t i = p->hi; i < t; i++) acc = op(k, acc, g_agg[i]);
        g_excl[t] = acc;
        g_lookbacks++;
        p->phase = 2;
        return 0;
    }
    if (!p->skip) {
        g_incl[t] = op(k, g_excl[t], g_agg[t]);
        g_flag[t] = 2;
    }
    p->phase = 3;
    return 1;
}

/* One line of `tiles` tiles under a random schedule; returns the number of mismatches. */
static int run_line(enum kind k, int tiles, int resident, int skip_pm, int special)
{
    struct tile fl[MAXR];
    int nfl = 0, next = 0, bad = 0;
    static int shown;
    for (int t = 0; t < tiles; t++) {
        g_agg[t] = total(k, special);
        g_flag[t] = 0;
    }
    while (next < tiles || nfl > 0) {
        if (next < tiles && (nfl < resident && (nfl == 0 || rnd() % 4 == 0))) {
            struct tile *p = &fl[nfl++];
            memset(p, 0, sizeof *p);
            p->t = next++;
            p->skip = (int)(rnd() % 1000) < skip_pm;
            continue;
        }
        const int i = (int)(rnd() % (unsigned)nfl);
        if (step(k, &fl[i])) fl[i] = fl[--nfl];
    }
    double ref = g_agg[0]; /* the plain ascending left fold, incl_0 = agg_0 */
    for (int t = 0; t < tiles; t++) {
        if (t > 0) {
            if (!same(g_excl[t], ref)) {
                if (shown++ < 5)
                    fprintf(stderr, "%s: tile %d of %d: exclusive prefix %a, left fold %a\n",
                            kind_name[k], t, tiles, g_excl[t], ref);
                bad++;
            }
            ref = op(k, ref, g_agg[t]);
        }
        if (g_flag[t] == 2 && !same(g_incl[t], ref)) {
            if (shown++ < 5)
                fprintf(stderr, "%s: tile %d of %d: inclusive prefix %a, left fold %a\n",
                        kind_name[k], t, tiles, g_incl[t], ref);
            bad++;
        }
    }
    return bad;
}

int main(void)
{
    int bad = 0;
    long lines = 0;
    for (int k = SUM_F64; k <= PROD_F32; k++)
        for (int r = 0; r < 400; r++) {
            const int tiles = 1 + (int)(rnd() % (r < 200 ? 70 : MAXT));
            const int resident = 1 + (int)(rnd() % MAXR);
            const int skip_pm = r % 4 == 0 ? 0 : (int)(rnd() % 1000); /* 0 to 100 % skipped */
            const int special = r % 3 == 0 ? 0 : (int)(rnd() % 20);
            bad += run_line((enum kind)k, tiles, resident, skip_pm, special);
            lines++;
        }
    printf("scan_lookback_check: %ld lines, %ld look-backs, %ld started below the previous "
           "tile, %ld window moves; %d mismatches\n",
           lines, g_lookbacks, g_started_far, g_crossed, bad);
    /* the schedules must have exercised the paths the argument is about */
    if (g_started_far == 0 || g_crossed == 0) {
        fprintf(stderr, "scan_lookback_check: the schedules never crossed a window\n");
        return 1;
    }
    return bad == 0 ? 0 : 1;
}
