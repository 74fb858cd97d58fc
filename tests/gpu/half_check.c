/* half_check.c — backends/gpu/gpu_half.h's f32 -> f16 / bf16 narrowing against the reference
 * rules of engine/convert.h (the CPU backend's), bit for bit, on the host.
 *
 * The GPU kernels narrow with gpu_half.h's 32-bit versions; they must give the reference's
 * bits for every f32 input (NaN inputs call the reference itself). Default: every f32 whose
 * bit pattern is a multiple of 61 (about 70 million, every exponent and sign), and for every
 * sign, exponent and top mantissa bits the low bits on both sides of each rounding point of
 * the two formats (the 16 low bits for bf16, the 13 for normal f16, the 14 to 24 bits a
 * subnormal f16 drops). `--all`: all 2^32 patterns (about a minute). Prints the first
 * mismatches and exits 1 on any.
 */
#include "backends/gpu/gpu_half.h"
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static uint64_t g_checked, g_bad;

static void check(uint32_t u)
{
    const float f = td__f32_from_bits(u);
    const uint16_t rb = td__f32_to_bf16(f), gb = td__gpu_f32_to_bf16(f);
    const uint16_t rh = td__f32_to_f16(f), gh = td__gpu_f32_to_f16(f);
    g_checked++;
    if (rb != gb || rh != gh) {
        if (g_bad < 20)
            printf("f32 0x%08" PRIx32 ": bf16 ref 0x%04x got 0x%04x, f16 ref 0x%04x got 0x%04x\n", u,
                   rb, gb, rh, gh);
        g_bad++;
    }
}

/* Low-bit patterns around the rounding point of dropping `bits` low bits. */
static void around(uint32_t high, int bits)
{
    const uint32_t half = 1u << (bits - 1), mask = (1u << bits) - 1;
    const uint32_t lows[] = {0, 1, half - 1, half, half + 1, mask - 1, mask};
    for (size_t i = 0; i < sizeof lows / sizeof lows[0]; i++) check((high & ~mask) | lows[i]);
}

int main(int argc, char **argv)
{
    const int all = argc > 1 && strcmp(argv[1], "--all") == 0;
    if (all) {
        uint32_t u = 0;
        do check(u); while (++u != 0);
    } else {
        for (uint64_t u = 0; u <= UINT32_MAX; u += 61) check((uint32_t)u);
        /* every sign, exponent and the kept mantissa bits of bf16 (7) and f16 (10) */
        for (uint32_t se = 0; se < 512; se++) {
            for (uint32_t m = 0; m < 1024; m++) {
                const uint32_t high = se << 23 | m << 13;
                around(high, 13);
                around(high, 16);
                for (int b = 14; b <= 24; b++) around(high, b);
            }
        }
    }
    printf("%" PRIu64 " f32 values checked, %" PRIu64 " mismatches\n", g_checked, g_bad);
    return g_bad == 0 ? 0 : 1;
}
