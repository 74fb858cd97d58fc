/* scan_model.h — what the host models of gpu_scan.cu's look-backs share
 * (scan_lookback_check.c, scan_chain_check.c): a double's bits, and a seeded xorshift64*
 * stream (Marsaglia, "Xorshift RNGs", J. Stat. Softw. 8(14), 2003, with the output
 * multiplier of Vigna's xorshift64*). Each model defines SCAN_MODEL_SEED (its own nonzero
 * seed) before the include, so its schedules stay its own. Single-threaded test programs. */
#ifndef TD_TESTS_GPU_SCAN_MODEL_H
#define TD_TESTS_GPU_SCAN_MODEL_H

#include <stdint.h>
#include <string.h>

#ifndef SCAN_MODEL_SEED
#error "define SCAN_MODEL_SEED (the model's xorshift64* seed, nonzero) before scan_model.h"
#endif

static uint64_t bits(double v)
{
    uint64_t b;
    memcpy(&b, &v, 8);
    return b;
}

static uint64_t g_rng = SCAN_MODEL_SEED;
static uint64_t rnd(void) /* xorshift64* */
{
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 0x2545f4914f6cdd1du;
}
/* Uniform in [0, 1): the top 53 bits. */
static double unif(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

#endif
