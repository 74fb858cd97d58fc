/* scan_chain_check.c — the determinism of backends/gpu/gpu_scan.cu's chained scan
 * (k_scan_chain, TENSORD_GPU_SCAN_VARIANT=3, 4 and the test aid 5) on the host, without a
 * GPU, NaNs compared bit for bit (as tests/unit/backends/conformance.c compares two runs).
 *
 * A model of the kernel's protocol, not its code. Several lines share one launch: tile
 * numbers come from one counter in order (line = id / tiles), at most R tiles are in
 * flight and a random scheduler advances one of them a step at a time. A tile publishes its
 * aggregate word (tile 0 of a line: its inclusive prefix word, incl_0 = agg_0), then looks
 * back: window w, tiles [hi - 32, hi), one lane at a time, each lane waiting until either
 * word of its tile is there and taking the inclusive prefix when it is (chain_poll); no
 * inclusive prefix in the window: the next window down; past CHAIN_WIN windows thread 0
 * walks down alone to an inclusive prefix. The exclusive prefix is folded as the kernel
 * folds it (incl_j, the aggregates above j in its window, the windows above, ascending),
 * and the tile publishes incl_t = excl_t op agg_t (every tile, or tile 0 only: variant 5).
 *
 * The point: an accumulator op is a function of its operands' values, but not of their
 * bits where both are NaN. The double accumulators (f32 and f64 lines) keep NaN payloads
 * and signs on the GPU (CUDA's own double NaN is 0xfff8000000000000, a C NAN input is
 * 0x7ff8000000000000: every long line of conformance.c's "specials" holds both), IEEE 754
 * leaves open which NaN operand's payload a result carries, and a compiler may swap the
 * operands of + and * at one place in the code and not at another. So the same op on the
 * same two NaNs may give different bits at the look-back's fold and at the inclusive
 * prefix's publication, and timing decides which of the two computed a prefix (which
 * incl_j a look-back found). The model's op returns the first NaN operand at the fold and
 * the second at the publication, and the GPU's default NaN (0xfff8...) for an invalid
 * op: without canonicalizing the exclusive prefix (gpu_scan.cu's canon_nan) the prefixes
 * differ from the left fold in bits under some schedules; with it, every tile's prefix
 * equals canon(left fold) bit for bit (every non-NaN value is IEEE-determined, and whether a
 * prefix is NaN does not depend on which NaN it was).
 *
 * Exit 0 when, with canonicalization, all prefixes match and, without it, the model does
 * find mismatches (so it can see the failure). `--no-canon`: the model without the fix
 * only; exit 1 on mismatches (what the kernel did before the fix). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCAN_MODEL_SEED 0x243f6a8885a308d3u
#include "scan_model.h"

enum { LANES = 32, CHAIN_WIN = 16, MAXID = 4096, MAXR = 64 };
enum site { SITE_FOLD, SITE_INCL };

static double of_bits(uint64_t b)
{
    double v;
    memcpy(&v, &b, 8);
    return v;
}
static double quiet(double v) { return of_bits(bits(v) | 0x0008000000000000ull); }

/* The accumulator's op at a place in the code (see the header comment). */
static double op(int prod, double a, double b, enum site s)
{
    const int na = a != a, nb = b != b;
    if (na && nb) return quiet(s == SITE_FOLD ? a : b);
    if (na) return quiet(a);
    if (nb) return quiet(b);
    const double r = prod ? a * b : a + b;
    return r != r ? of_bits(0xfff8000000000000ull) : r; /* the GPU's default NaN */
}

/* gpu_scan.cu's canon_nan: every NaN prefix as the one quiet NaN. */
static double canon(double v) { return v != v ? of_bits(0x7ff8000000000000ull) : v; }


/* A tile aggregate: mostly ordinary, `special` in 100 a NaN of either sign (a payload at
 * times), an infinity or -0. */
static double aggregate(int prod, int special)
{
    if ((int)(rnd() % 100) < special) {
        switch (rnd() % 6) {
        case 0: return of_bits(0x7ff8000000000000ull); /* a C NAN input */
        case 1: return of_bits(0xfff8000000000000ull); /* the GPU's inf - inf */
        case 2: return of_bits(0x7ff8000000001234ull | (rnd() & 1) << 63);
        case 3: return INFINITY;
        case 4: return -INFINITY;
        default: return -0.0;
        }
    }
    return prod ? 1.0 + (unif() - 0.5) / 64 : (unif() - 0.5) * 1e3;
}

/* The words of every tile of every line (index: line * tiles + tile). */
static int g_has_agg[MAXID], g_has_incl[MAXID];
static double g_agg[MAXID], g_incl[MAXID], g_pre[MAXID];
static long g_lookbacks, g_far, g_crossed, g_walks;

struct tile {
    int id, line, t, phase; /* 0: publish, 1: windows, 2: walk, 3: fold and publish */
    int64_t hi;
    int w, seen[CHAIN_WIN][LANES]; /* 2: inclusive prefix, 1: aggregate, 0: below tile 0 */
    double v[CHAIN_WIN][LANES];
    int64_t j; /* the walk */
    double acc;
};

struct cfg {
    int prod, tiles, every, fix;
};

/* chain_poll, once: 2 (inclusive prefix), 1 (aggregate) or -1 (neither yet). */
static int poll_word(int base, int64_t i, double *v)
{
    if (g_has_incl[base + i]) {
        *v = g_incl[base + i];
        return 2;
    }
    if (g_has_agg[base + i]) {
        *v = g_agg[base + i];
        return 1;
    }
    return -1;
}

/* Advance tile p one step; returns 1 when it is done. */
static int step(const struct cfg *c, struct tile *p)
{
    const int base = p->line * c->tiles, t = p->t;
    const double id = c->prod ? 1.0 : 0.0;
    if (p->phase == 0) {
        if (t == 0) {
            g_has_incl[base] = 1; /* incl_0 = agg_0 */
            g_incl[base] = g_agg[base];
            return 1;
        }
        g_has_agg[base + t] = 1;
        p->hi = t;
        p->w = 0;
        for (int l = 0; l < LANES; l++) p->seen[0][l] = -1;
        p->phase = 1;
        return 0;
    }
    if (p->phase == 1) { /* one lane of window w polls its tile */
        int todo[LANES], nt = 0;
        for (int l = 0; l < LANES; l++)
            if (p->seen[p->w][l] < 0) todo[nt++] = l;
        if (nt > 0) {
            const int l = todo[rnd() % (unsigned)nt];
            const int64_t i = p->hi - LANES + l;
            if (i < 0) {
                p->seen[p->w][l] = 0;
                p->v[p->w][l] = id;
            } else {
                p->seen[p->w][l] = poll_word(base, i, &p->v[p->w][l]);
            }
            return 0;
        }
        int L = -1;
        for (int l = LANES - 1; l >= 0 && L < 0; l--)
            if (p->seen[p->w][l] == 2) L = l;
        if (L >= 0) {
            if (p->hi - LANES + L < t - 1) g_far++;
            p->acc = p->v[p->w][L];
            for (int l = L + 1; l < LANES; l++) p->acc = op(c->prod, p->acc, p->v[p->w][l], SITE_FOLD);
            p->phase = 3;
            return 0;
        }
        g_crossed++;
        p->hi -= LANES;
        if (++p->w == CHAIN_WIN) {
            p->j = p->hi - 1;
            p->phase = 2;
            g_walks++;
            return 0;
        }
        for (int l = 0; l < LANES; l++) p->seen[p->w][l] = -1;
        return 0;
    }
    if (p->phase == 2) { /* thread 0 walks down: one poll a step */
        double v;
        const int f = poll_word(base, p->j, &v);
        if (f == 1) p->j--;
        if (f != 2) return 0;
        p->acc = v;
        for (int64_t i = p->j + 1; i < p->hi; i++) /* every one was seen: it is there */
            p->acc = op(c->prod, p->acc, g_agg[base + i], SITE_FOLD);
        p->phase = 3;
        return 0;
    }
    /* phase 3: the windows above, ascending; then the prefix and its publication */
    const int top = p->w == CHAIN_WIN ? CHAIN_WIN : p->w;
    for (int ww = top - 1; ww >= 0; ww--)
        for (int l = 0; l < LANES; l++) p->acc = op(c->prod, p->acc, p->v[ww][l], SITE_FOLD);
    const double pre = c->fix ? canon(p->acc) : p->acc;
    g_pre[base + t] = pre;
    g_lookbacks++;
    if (t % c->every == 0) {
        g_incl[base + t] = op(c->prod, pre, g_agg[base + t], SITE_INCL);
        g_has_incl[base + t] = 1;
    }
    return 1;
}

/* One launch of `lines` lines under a random schedule; returns the number of mismatches. */
static int run_launch(const struct cfg *c, int lines, int resident, int special)
{
    static struct tile fl[MAXR];
    static int shown;
    const int n = lines * c->tiles;
    int nfl = 0, next = 0, bad = 0;
    for (int i = 0; i < n; i++) {
        g_agg[i] = aggregate(c->prod, special);
        g_has_agg[i] = g_has_incl[i] = 0;
    }
    while (next < n || nfl > 0) {
        if (next < n && nfl < resident && (nfl == 0 || rnd() % 3 == 0)) {
            struct tile *p = &fl[nfl++];
            p->id = next++; /* take_tile: the counter, then line and tile */
            p->line = p->id / c->tiles;
            p->t = p->id % c->tiles;
            p->phase = 0;
            continue;
        }
        const int i = (int)(rnd() % (unsigned)nfl);
        if (step(c, &fl[i])) fl[i] = fl[--nfl];
    }
    for (int ln = 0; ln < lines; ln++) {
        const int base = ln * c->tiles;
        double ref = g_agg[base]; /* the ascending left fold, as the fold computes it */
        for (int t = 1; t < c->tiles; t++) {
            const double want = c->fix ? canon(ref) : ref;
            if (bits(g_pre[base + t]) != bits(want)) {
                if (c->fix && shown++ < 5)
                    fprintf(stderr, "line %d tile %d of %d: prefix %016llx, left fold %016llx\n",
                            ln, t, c->tiles, (unsigned long long)bits(g_pre[base + t]),
                            (unsigned long long)bits(want));
                bad++;
            }
            ref = op(c->prod, ref, g_agg[base + t], SITE_FOLD);
        }
    }
    return bad;
}

static int run_all(int fix, long *launches)
{
    int bad = 0;
    for (int prod = 0; prod < 2; prod++)
        for (int r = 0; r < 300; r++) {
            struct cfg c = {.prod = prod, .fix = fix, .every = 1};
            int lines;
            if (r % 10 == 9) { /* variant 5: tile 0's inclusive prefix only, the walk */
                c.tiles = 513 + (int)(rnd() % 600);
                c.every = 1 << 30;
                lines = 1 + (int)(rnd() % 3);
            } else {
                c.tiles = 1 + (int)(rnd() % (r % 2 ? 40 : 200));
                lines = 1 + (int)(rnd() % 8);
            }
            while (lines * c.tiles > MAXID) lines--;
            const int resident = 1 + (int)(rnd() % MAXR);
            const int special = r % 4 == 0 ? 0 : 1 + (int)(rnd() % 30);
            bad += run_launch(&c, lines, resident, special);
            (*launches)++;
        }
    return bad;
}

int main(int argc, char **argv)
{
    const int only_nofix = argc > 1 && strcmp(argv[1], "--no-canon") == 0;
    long launches = 0;
    const uint64_t seed = g_rng;
    const int bad_nofix = run_all(0, &launches);
    printf("scan_chain_check: without canonical NaN prefixes: %d mismatching prefixes\n",
           bad_nofix);
    if (only_nofix) return bad_nofix == 0 ? 0 : 1;
    g_rng = seed;
    g_lookbacks = g_far = g_crossed = g_walks = 0;
    const int bad = run_all(1, &launches);
    printf("scan_chain_check: %ld launches, %ld look-backs, %ld started below the previous "
           "tile, %ld window moves, %ld walks; with canonical NaN prefixes %d mismatches\n",
           launches / 2, g_lookbacks, g_far, g_crossed, g_walks, bad);
    if (g_far == 0 || g_crossed == 0 || g_walks == 0) {
        fprintf(stderr, "scan_chain_check: the schedules missed a path\n");
        return 1;
    }
    if (bad_nofix == 0) {
        fprintf(stderr, "scan_chain_check: the model found no NaN mismatch without the fix\n");
        return 1;
    }
    return bad == 0 ? 0 : 1;
}
