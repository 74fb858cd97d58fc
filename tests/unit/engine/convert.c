/* convert.c — engine/convert.h's f16/bf16 conversions against independent references:
 * hand-picked bit patterns (each derived in its comment), numpy's float16 rounding of f32
 * and f64 values (convert_reference.h, from gen_convert_reference.py), and a bf16
 * reference computed here from the f32 bits with integer arithmetic written apart from the
 * code under test. */
#include "convert_reference.h"
#include "engine/convert.h"
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

static float fb(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t bf(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

#define H16(x, want)                                                                       \
    cr_expect_eq(td__f64_to_f16(x), (want), "f16(%a) = 0x%04x, want 0x%04x", (double)(x),  \
                 td__f64_to_f16(x), (unsigned)(want))
#define B16(x, want)                                                                       \
    cr_expect_eq(td__f64_to_bf16(x), (want), "bf16(%a) = 0x%04x, want 0x%04x", (double)(x), \
                 td__f64_to_bf16(x), (unsigned)(want))

Test(convert, f16_hand_picked)
{
    H16(1.0, 0x3c00);
    H16(-2.0, 0xc000);
    H16(0.0, 0x0000);
    H16(-0.0, 0x8000);
    H16(65504.0, 0x7bff);           /* largest finite */
    H16(65519.0, 0x7bff);           /* below the halfway point to 65536 */
    H16(65520.0, 0x7c00);           /* the tie 65504 + 16: 0x3ff is odd, rounds up: inf */
    H16(-65520.0, 0xfc00);
    H16(1e10, 0x7c00);
    H16(INFINITY, 0x7c00);
    H16(-INFINITY, 0xfc00);
    H16(0x1p-24, 0x0001);           /* smallest subnormal */
    H16(0x1p-25, 0x0000);           /* half of it: tie to even 0 */
    H16(-0x1p-25, 0x8000);
    H16(0x1.000002p-25, 0x0001);    /* above the tie */
    H16(0x1.8p-24, 0x0002);         /* 1.5 units: tie between 1 and 2, to even 2 */
    H16(0x1.4p-23, 0x0002);         /* 2.5 units: tie to even 2 */
    H16(1023 * 0x1p-24, 0x03ff);    /* largest subnormal */
    H16(1023.5 * 0x1p-24, 0x0400);  /* tie between 0x3ff and 0x400: to even (smallest normal) */
    H16(0x1p-14, 0x0400);           /* smallest normal */
    H16(1.0 + 0x1p-11, 0x3c00);     /* tie, even mantissa 0 */
    H16(1.0 + 3 * 0x1p-11, 0x3c02); /* tie, rounds up to even mantissa 2 */
    H16(2049.0, 0x6800);            /* 2048 + 1 (ulp 2): tie, to 2048 */
    H16(2051.0, 0x6802);            /* tie, to 2052 */
    /* rounded once from f64: just above the tie; going through f32 first would land on the
     * tie and round down to 0x3c00 */
    H16(1.0 + 0x1p-11 + 0x1p-40, 0x3c01);
    cr_expect_eq(td__f32_to_f16((float)(1.0 + 0x1p-11 + 0x1p-40)), 0x3c00);
    /* NaN: quiet, sign and top payload bits kept */
    cr_expect_eq(td__f32_to_f16(fb(0x7fc00000u)), 0x7e00);
    cr_expect_eq(td__f32_to_f16(fb(0xffc00000u)), 0xfe00);
    cr_expect_eq(td__f32_to_f16(fb(0x7f800001u)), 0x7e00); /* signalling: quieted */
    cr_expect_eq(td__f32_to_f16(fb(0x7fa00000u)), 0x7f00); /* payload bit 21 -> bit 8 */
    /* integers, rounded once */
    cr_expect_eq(td__i64_to_f16(2049), 0x6800);
    cr_expect_eq(td__i64_to_f16(-65520), 0xfc00);
    cr_expect_eq(td__i64_to_f16(INT64_MIN), 0xfc00);
    cr_expect_eq(td__i64_to_f16(0), 0x0000);
}

Test(convert, f16_widening)
{
    cr_expect_eq(td__f16_to_f32(0x0001), 0x1p-24f);
    cr_expect_eq(td__f16_to_f32(0x03ff), 1023 * 0x1p-24f);
    cr_expect_eq(td__f16_to_f32(0x0400), 0x1p-14f);
    cr_expect_eq(td__f16_to_f32(0x7bff), 65504.0f);
    cr_expect_eq(td__f16_to_f32(0x3555), 0x1.554p-2f);
    cr_expect(isinf(td__f16_to_f32(0xfc00)) && td__f16_to_f32(0xfc00) < 0);
    cr_expect_eq(bf(td__f16_to_f32(0x8000)), 0x80000000u);
    cr_expect_eq(bf(td__f16_to_f32(0x7e00)), 0x7fc00000u);
    cr_expect_eq(bf(td__f16_to_f32(0xfc01)), 0xffc02000u); /* signalling: quieted, sign kept */
    /* every finite or infinite f16 survives the round trip; NaNs stay NaN */
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = td__f16_to_f32((uint16_t)h);
        if ((h & 0x7fff) > 0x7c00) {
            cr_assert(isnan(f), "0x%04x", h);
            cr_assert_eq(td__f32_to_f16(f), h | 0x0200, "NaN 0x%04x comes back quiet", h);
        } else {
            cr_assert_eq(td__f32_to_f16(f), h, "round trip of 0x%04x", h);
        }
    }
}

Test(convert, f16_matches_numpy)
{
    for (size_t i = 0; i < sizeof ref_f32_bits / sizeof ref_f32_bits[0]; i++)
        cr_expect_eq(td__f32_to_f16(fb(ref_f32_bits[i][0])), ref_f32_bits[i][1],
                     "f32 0x%08x: got 0x%04x, numpy 0x%04x", ref_f32_bits[i][0],
                     td__f32_to_f16(fb(ref_f32_bits[i][0])), ref_f32_bits[i][1]);
    for (size_t i = 0; i < sizeof ref_f64 / sizeof ref_f64[0]; i++)
        cr_expect_eq(td__f64_to_f16(ref_f64[i].x), ref_f64[i].h, "f64 %a: got 0x%04x, numpy 0x%04x",
                     ref_f64[i].x, td__f64_to_f16(ref_f64[i].x), ref_f64[i].h);
}

/* bf16 of an f32, by the textbook integer rule: keep the top 16 bits and add one when the
 * dropped half is above 0x8000, or equal to it with the kept part odd (a carry into the
 * exponent gives the next binade or inf, which the encoding makes right); NaN -> quiet. */
static uint16_t bf16_ref(uint32_t u)
{
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    uint32_t top = u >> 16, low = u & 0xffffu;
    if (low > 0x8000u || (low == 0x8000u && (top & 1))) top++;
    return (uint16_t)top;
}

Test(convert, bf16_hand_picked)
{
    B16(1.0, 0x3f80);
    B16(1.0 + 0x1p-8, 0x3f80);            /* tie, even (mantissa 0) */
    B16(1.0 + 3 * 0x1p-8, 0x3f82);        /* tie, up to even */
    B16(1.0 + 0x1p-8 + 0x1p-20, 0x3f81);  /* above the tie */
    B16(1.0 + 0x1p-8 + 0x1p-40, 0x3f81);  /* above the tie by less than f32 can hold */
    B16(3.0e38, 0x7f62);                  /* f32 0x7f61b1e6: low half 0xb1e6 rounds up */
    B16(0x1.ffp127, 0x7f80);              /* past the largest finite 0x1.fep127: inf */
    B16(0x1.fep127, 0x7f7f);
    B16(1e-45, 0x0000);                   /* 0x1.6p-150 is below half of 2^-133: 0 */
    B16(0x1p-133, 0x0001);                /* smallest bf16 subnormal */
    B16(0x1p-134, 0x0000);                /* tie to 0 */
    B16(0x1.8p-133, 0x0002);              /* tie to even 2 */
    B16(-INFINITY, 0xff80);
    B16(-0.0, 0x8000);
    cr_expect_eq(td__f32_to_bf16(fb(0x7f800001u)), 0x7fc0);
    cr_expect_eq(td__f32_to_bf16(fb(0xff812345u)), 0xffc1);
    cr_expect_eq(td__f32_to_bf16(fb(0x7f7fffffu)), 0x7f80); /* f32 max rounds to inf */
    cr_expect_eq(td__f32_to_bf16(fb(0x00008000u)), 0x0000); /* f32 subnormal tie: even 0 */
    cr_expect_eq(td__f32_to_bf16(fb(0x00018000u)), 0x0002);
    cr_expect_eq(td__f32_to_bf16(fb(0x00008001u)), 0x0001);
    /* 2^60 + 2^52 + 1 rounds up to 2^60 + 2^53 (bf16 0x5d81); via double it would be the
     * tie 2^60 + 2^52 and round to even 0x5d80 */
    cr_expect_eq(td__i64_to_bf16((1ll << 60) + (1ll << 52) + 1), 0x5d81);
    cr_expect_eq(td__i64_to_bf16(-(1ll << 60) - (1ll << 52)), 0xdd80);
    cr_expect_eq(bf(td__bf16_to_f32(0x3f81)), 0x3f810000u);
    cr_expect_eq(bf(td__bf16_to_f32(0x7f81)), 0x7fc10000u); /* quieted */
}

Test(convert, bf16_matches_integer_reference)
{
    uint32_t s = 12345;
    for (int i = 0; i < 200000; i++) {
        s = s * 1664525u + 1013904223u;
        uint32_t u = s ^ (s >> 7);
        if (i % 4 == 0) u = (u & 0xffff0000u) | 0x8000u; /* exact ties */
        cr_assert_eq(td__f32_to_bf16(fb(u)), bf16_ref(u), "f32 0x%08x: 0x%04x, want 0x%04x", u,
                     td__f32_to_bf16(fb(u)), bf16_ref(u));
    }
    for (uint32_t h = 0; h < 0x10000; h++)
        if ((h & 0x7fff) <= 0x7f80)
            cr_assert_eq(td__f32_to_bf16(td__bf16_to_f32((uint16_t)h)), h, "0x%04x", h);
}

Test(convert, saturating_small_ints)
{
    cr_expect_eq(td__sat_i8(127.9), 127);
    cr_expect_eq(td__sat_i8(128.0), 127);
    cr_expect_eq(td__sat_i8(-128.9), -128);
    cr_expect_eq(td__sat_i8(-1e30), -128);
    cr_expect_eq(td__sat_i8(-3.7), -3);
    cr_expect_eq(td__sat_i8(NAN), 0);
    cr_expect_eq(td__sat_i8(INFINITY), 127);
    cr_expect_eq(td__sat_i16(32767.5), 32767);
    cr_expect_eq(td__sat_i16(-32769.0), -32768);
    cr_expect_eq(td__sat_i16(-INFINITY), -32768);
    cr_expect_eq(td__sat_i16(NAN), 0);
    cr_expect_eq(td__sat_i16(2.99), 2);
}
