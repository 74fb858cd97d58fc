/* attn_frag_check.c — the index math of backends/gpu/gpu_attention.cu on the host, without
 * a GPU: the tile copies, the swizzle and the ldmatrix lane addresses of
 * backends/gpu/gpu_attention_layout.h, fed to a model of ldmatrix (.x4, plain and .trans)
 * and mma.sync.m16n8k16 written from the PTX ISA's fragment tables (not from the kernel),
 * for every warp of a block, for each cut the kernels use: head dims 64 and 128, 1 or 2 m16
 * tiles a warp, 4 or 8 warps, 64- or 128-key tiles. k_attention2's addresses (a base per
 * thread plus an immediate: copies, K and V fragments, a 64-key half of a 128-key buffer)
 * are checked equal to the formulas, and its copy by 128 or 256 threads to fill the tile
 * as load_tile's does, each element once. Checks that
 * the warp's S = Q K^T accumulators hold Q K^T at the rows and columns the kernel assumes
 * (row lane / 4 (+ 8), column 2 (lane % 4) + e of each n8 tile), and that O = P V, with P
 * moved from the S accumulators into A fragments as the kernel does, equals the product
 * computed directly. Small integers, so every sum is exact. Exit 0 when all match. */
#include "backends/gpu/gpu_attention_layout.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXBN 128
#define MAXD 128
#define MAXM 256

typedef struct frag2 {
    double v[2];
} frag2; /* one 32-bit register: two 16-bit elements, v[0] in the low half */

static double tq[MAXM * MAXD], tk[MAXBN * MAXD], tv[MAXBN * MAXD]; /* shared-memory tiles */
static double gq[MAXM][MAXD], gk[MAXBN][MAXD], gv[MAXBN][MAXD];   /* the matrices */

/* the kernel's load_tile: chunk idx -> (r, ch), 8 elements to td_attn_swz(r, 8 ch) */
static void load(double *tile, const double (*g)[MAXD], int rows, int d)
{
    for (int idx = 0; idx < rows * d / 8; idx++) {
        int r, ch;
        td_attn_chunk(idx, d, &r, &ch);
        for (int j = 0; j < 8; j++) tile[td_attn_swz(r, ch * 8, d) + j] = g[r][ch * 8 + j];
    }
}

/* k_attention2's copy (attn_copy::rows) by `threads` threads: thread tid's chunk at
 * td_attn_copy_base + td_attn_copy_imm(i), rows threads / (d / 8) apart; against `tile`
 * (load's), every element written once. Returns the mismatches. */
static int load2_check(const double *tile, const double (*g)[MAXD], int rows, int d,
                       int threads)
{
    static double t2[MAXM * MAXD];
    static int hits[MAXM * MAXD];
    const int rs = threads / (d / 8);
    int bad = 0;
    memset(hits, 0, sizeof hits);
    for (int tid = 0; tid < threads; tid++) {
        int crow, cch;
        td_attn_chunk(tid, d, &crow, &cch);
        for (int i = 0; i < rows / rs; i++) {
            const int off = td_attn_copy_base(tid, d) + td_attn_copy_imm(i, threads, d);
            for (int j = 0; j < 8; j++) {
                t2[off + j] = g[crow + i * rs][cch * 8 + j];
                hits[off + j]++;
            }
        }
    }
    for (int e = 0; e < rows * d; e++)
        if ((hits[e] != 1 || t2[e] != tile[e]) && bad++ < 5)
            printf("d %d, %d threads, %d rows: copy element %d written %d times, %g want %g\n", d,
                   threads, rows, e, hits[e], t2[e], tile[e]);
    return bad;
}

/* ldmatrix.x4 (trans or not): addr[lane] is the element offset of the 8 elements of row
 * (lane % 8) of matrix lane / 8; out[lane][i] is lane's register of matrix i. */
static void ldsm(const double *tile, const int *addr, int trans, frag2 out[32][4])
{
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
static void mma(double c[32][4], frag2 a[32][4], frag2 b[32][2])
{
    double A[16][16], B[16][8], C[16][8];
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane / 4, t = lane % 4;
        for (int e = 0; e < 2; e++) {
            A[g][2 * t + e] = a[lane][0].v[e];
            A[g + 8][2 * t + e] = a[lane][1].v[e];
            A[g][2 * t + 8 + e] = a[lane][2].v[e];
            A[g + 8][2 * t + 8 + e] = a[lane][3].v[e];
            B[2 * t + e][g] = b[lane][0].v[e];
            B[2 * t + 8 + e][g] = b[lane][1].v[e];
        }
    }
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
            C[i][j] = 0;
            for (int k = 0; k < 16; k++) C[i][j] += A[i][k] * B[k][j];
        }
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane / 4, t = lane % 4;
        for (int e = 0; e < 2; e++) {
            c[lane][e] += C[g][2 * t + e];
            c[lane][2 + e] += C[g + 8][2 * t + e];
        }
    }
}

static int check(int d, int mtiles, int warps, int bn)
{
    const int bm = 16 * mtiles * warps, kt = d / 16, nt = bn / 8, dt = d / 8;
    int bad = 0;
    for (int r = 0; r < bm; r++)
        for (int c = 0; c < d; c++) gq[r][c] = (double)(rand() % 7 - 3);
    for (int r = 0; r < bn; r++)
        for (int c = 0; c < d; c++) {
            gk[r][c] = (double)(rand() % 7 - 3);
            gv[r][c] = (double)(rand() % 7 - 3);
        }
    load(tq, (const double(*)[MAXD])gq, bm, d);
    load(tk, (const double(*)[MAXD])gk, bn, d);
    load(tv, (const double(*)[MAXD])gv, bn, d);
    bad += load2_check(tq, (const double(*)[MAXD])gq, bm, d, 32 * warps);
    bad += load2_check(tk, (const double(*)[MAXD])gk, bn, d, 32 * warps);
    /* k_attention2's base + immediate addresses of K and V fragments; a 64-key half of a
     * 128-key buffer (SUB 2) starts 64 d elements in */
    for (int lane = 0; lane < 32; lane++) {
        for (int kk = 0; kk < kt; kk++)
            for (int np = 0; np < nt / 2; np++) {
                int r, c;
                td_attn_k_rc(lane, np, kk, &r, &c);
                if (td_attn_swz(r, c, d) !=
                        td_attn_k_base(lane, kk & 3, d) + td_attn_k_imm(np, kk, d) &&
                    bad++ < 5)
                    printf("d %d: K base + imm of lane %d np %d kk %d\n", d, lane, np, kk);
                if (bn == 64 && td_attn_swz(r + 64, c, d) != td_attn_swz(r, c, d) + 64 * d &&
                    bad++ < 5)
                    printf("d %d: K half-buffer offset of lane %d np %d kk %d\n", d, lane, np, kk);
            }
        for (int kk = 0; kk < bn / 16; kk++)
            for (int dp = 0; dp < dt / 2; dp++) {
                int r, c;
                td_attn_v_rc(lane, kk, dp, &r, &c);
                if (td_attn_swz(r, c, d) !=
                        td_attn_v_base(lane, dp & 3, d) + td_attn_v_imm(kk, dp, d) &&
                    bad++ < 5)
                    printf("d %d: V base + imm of lane %d kk %d dp %d\n", d, lane, kk, dp);
                if (bn == 64 && td_attn_swz(r + 64, c, d) != td_attn_swz(r, c, d) + 64 * d &&
                    bad++ < 5)
                    printf("d %d: V half-buffer offset of lane %d kk %d dp %d\n", d, lane, kk, dp);
            }
    }
    static double s[2][MAXBN / 8][32][4], o[2][MAXD / 8][32][4];
    static frag2 qf[2][MAXD / 16][32][4];
    for (int warp = 0; warp < warps; warp++) {
        const int wr0 = warp * 16 * mtiles;
        int addr[32];
        memset(s, 0, sizeof s);
        memset(o, 0, sizeof o);
        for (int mt = 0; mt < mtiles; mt++)
            for (int kk = 0; kk < kt; kk++) {
                for (int lane = 0; lane < 32; lane++) {
                    int r, c;
                    td_attn_q_rc(lane, wr0 + mt * 16, kk, &r, &c);
                    addr[lane] = td_attn_swz(r, c, d);
                }
                ldsm(tq, addr, 0, qf[mt][kk]);
            }
        for (int kk = 0; kk < kt; kk++)
            for (int np = 0; np < nt / 2; np++) {
                frag2 b[32][4], b01[32][2], b23[32][2];
                for (int lane = 0; lane < 32; lane++) {
                    int r, c;
                    td_attn_k_rc(lane, np, kk, &r, &c);
                    addr[lane] = td_attn_swz(r, c, d);
                }
                ldsm(tk, addr, 0, b);
                for (int lane = 0; lane < 32; lane++) {
                    b01[lane][0] = b[lane][0], b01[lane][1] = b[lane][1];
                    b23[lane][0] = b[lane][2], b23[lane][1] = b[lane][3];
                }
                for (int mt = 0; mt < mtiles; mt++) {
                    mma(s[mt][2 * np], qf[mt][kk], b01);
                    mma(s[mt][2 * np + 1], qf[mt][kk], b23);
                }
            }
        /* S against Q K^T at the kernel's (row, column) of each accumulator */
        for (int mt = 0; mt < mtiles; mt++)
            for (int n = 0; n < nt; n++)
                for (int lane = 0; lane < 32; lane++)
                    for (int i = 0; i < 4; i++) {
                        const int row = wr0 + mt * 16 + lane / 4 + 8 * (i / 2);
                        const int col = n * 8 + 2 * (lane % 4) + (i % 2);
                        double want = 0;
                        for (int k = 0; k < d; k++) want += gq[row][k] * gk[col][k];
                        if (s[mt][n][lane][i] != want && bad++ < 5)
                            printf("d %d warp %d S[%d][%d]: got %g want %g\n", d, warp, row, col,
                                   s[mt][n][lane][i], want);
                    }
        /* P = S into A fragments as the kernel packs them, then O += P V */
        for (int kk = 0; kk < bn / 16; kk++) {
            static frag2 pa[2][32][4];
            for (int mt = 0; mt < mtiles; mt++)
                for (int lane = 0; lane < 32; lane++) {
                    const double *c0 = s[mt][2 * kk][lane], *c1 = s[mt][2 * kk + 1][lane];
                    pa[mt][lane][0] = (frag2){{c0[0], c0[1]}};
                    pa[mt][lane][1] = (frag2){{c0[2], c0[3]}};
                    pa[mt][lane][2] = (frag2){{c1[0], c1[1]}};
                    pa[mt][lane][3] = (frag2){{c1[2], c1[3]}};
                }
            for (int dp = 0; dp < dt / 2; dp++) {
                frag2 b[32][4], b01[32][2], b23[32][2];
                for (int lane = 0; lane < 32; lane++) {
                    int r, c;
                    td_attn_v_rc(lane, kk, dp, &r, &c);
                    addr[lane] = td_attn_swz(r, c, d);
                }
                ldsm(tv, addr, 1, b);
                for (int lane = 0; lane < 32; lane++) {
                    b01[lane][0] = b[lane][0], b01[lane][1] = b[lane][1];
                    b23[lane][0] = b[lane][2], b23[lane][1] = b[lane][3];
                }
                for (int mt = 0; mt < mtiles; mt++) {
                    mma(o[mt][2 * dp], pa[mt], b01);
                    mma(o[mt][2 * dp + 1], pa[mt], b23);
                }
            }
        }
        for (int mt = 0; mt < mtiles; mt++)
            for (int n = 0; n < dt; n++)
                for (int lane = 0; lane < 32; lane++)
                    for (int i = 0; i < 4; i++) {
                        const int row = wr0 + mt * 16 + lane / 4 + 8 * (i / 2);
                        const int col = n * 8 + 2 * (lane % 4) + (i % 2);
                        double want = 0;
                        for (int j = 0; j < bn; j++) {
                            double sj = 0;
                            for (int k = 0; k < d; k++) sj += gq[row][k] * gk[j][k];
                            want += sj * gv[j][col];
                        }
                        if (o[mt][n][lane][i] != want && bad++ < 5)
                            printf("d %d warp %d O[%d][%d]: got %g want %g\n", d, warp, row, col,
                                   o[mt][n][lane][i], want);
                    }
    }
    /* the swizzle is a permutation of each row's chunks */
    for (int r = 0; r < 8; r++) {
        int seen[MAXD / 8] = {0};
        for (int c = 0; c < d; c += 8) seen[(td_attn_swz(r, c, d) - r * d) / 8]++;
        for (int c = 0; c < d / 8; c++)
            if (seen[c] != 1 && bad++ < 5)
                printf("d %d: swizzle of row %d not a permutation\n", d, r);
    }
    printf("attn_frag_check: head dim %d, %d m16 tiles a warp, %d warps, %d-key tiles: %s\n", d,
           mtiles, warps, bn, bad ? "MISMATCH" : "ok");
    return bad;
}

int main(void)
{
    srand(1);
    int bad = 0;
    for (int warps = 4; warps <= 8; warps += 4)
        for (int bn = 32; bn <= 128; bn *= 2) {
            bad += check(64, 2, warps, bn) + check(128, 1, warps, bn);
            bad += check(64, 1, warps, bn) + check(128, 2, warps, bn);
        }
    return bad ? 1 : 0;
}
