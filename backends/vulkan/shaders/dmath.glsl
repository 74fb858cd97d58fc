// dmath.glsl — exp, expm1 and log in double precision, written for the f32 ops whose GLSL
// built-ins (float only) carry the Vulkan spec's loose bounds (exp: 3 + 2|x| ulp; log: 3 ulp
// or 2^-21 absolute). Evaluated in double and rounded once to f32, they are within one f32
// ulp of the exact value, which keeps EXP/LOG (4 ulp) and the ops built on them inside the
// conformance bounds on any device with shaderFloat64.
// Method: exp by Cody-Waite reduction x = k ln2 + r (|r| <= ln2/2, ln2 split in a high part
// with trailing zero bits and a low part), a degree-13 Taylor polynomial of e^r (truncation
// below 2^-60 relative), scaled by 2^k with ldexp (in two steps so 2^k itself never
// overflows); log by frexp into m in [sqrt(1/2), sqrt 2), s = (m - 1)/(m + 1) and
// log m = 2 atanh s = 2 (s + s^3/3 + ... + s^23/23), |s| < 0.172 (truncation below 2^-60).
const double D_LN2_HI = 6.93147180369123816490e-01LF;
const double D_LN2_LO = 1.90821492927058770002e-10LF;
const double D_INV_LN2 = 1.44269504088896338700e+00LF;

double d_exp_poly(double r)
{
    precise double p = 1.0LF / 6227020800.0LF;
    p = p * r + 1.0LF / 479001600.0LF;
    p = p * r + 1.0LF / 39916800.0LF;
    p = p * r + 1.0LF / 3628800.0LF;
    p = p * r + 1.0LF / 362880.0LF;
    p = p * r + 1.0LF / 40320.0LF;
    p = p * r + 1.0LF / 5040.0LF;
    p = p * r + 1.0LF / 720.0LF;
    p = p * r + 1.0LF / 120.0LF;
    p = p * r + 1.0LF / 24.0LF;
    p = p * r + 1.0LF / 6.0LF;
    p = p * r + 0.5LF;
    p = p * r + 1.0LF;
    return p * r; // e^r - 1
}

// e^x 2^s for finite x with |x| < 746 and small s: the reduction below with 2^(k + s)
// applied by two exact ldexp steps, so a result in range is finite even where e^x alone
// overflows (sinh, cosh: e^x / 2 up to x = 710.47), whatever the compiler does to products.
double d_exp_scaled(double x, int s)
{
    double k = floor(x * D_INV_LN2 + 0.5LF);
    precise double r = (x - k * D_LN2_HI) - k * D_LN2_LO;
    precise double e = 1.0LF + d_exp_poly(r);
    int ki = int(k) + s;
    int k1 = ki / 2;
    return ldexp(ldexp(e, k1), ki - k1);
}

double d_exp(double x)
{
    if (x != x) return x;
    if (x > 709.782712893384LF) return 1.0LF / 0.0LF;
    if (x < -745.2LF) return 0.0LF;
    return d_exp_scaled(x, 0);
}

double d_expm1(double x)
{
    if (abs(x) < 0.25LF) return d_exp_poly(x);
    if (x < -40.0LF) return -1.0LF;
    return d_exp(x) - 1.0LF;
}

double d_log(double x)
{
    if (x != x || x < 0.0LF) return 0.0LF / 0.0LF;
    if (x == 0.0LF) return -1.0LF / 0.0LF;
    if (x > 1.7976931348623157e308LF) return x;
    int e, sub = 0;
    if (x < 2.2250738585072014e-308LF) { // subnormal: GLSL's frexp is undefined there
        x *= 18014398509481984.0LF;      // 2^54, exact
        sub = 54;
    }
    double m = frexp(x, e); // x = m 2^e, m in [0.5, 1)
    e -= sub;
    if (m < 0.70710678118654752440LF) {
        m *= 2.0LF;
        e -= 1;
    }
    precise double s = (m - 1.0LF) / (m + 1.0LF), s2 = s * s;
    precise double p = 1.0LF / 23.0LF;
    p = p * s2 + 1.0LF / 21.0LF;
    p = p * s2 + 1.0LF / 19.0LF;
    p = p * s2 + 1.0LF / 17.0LF;
    p = p * s2 + 1.0LF / 15.0LF;
    p = p * s2 + 1.0LF / 13.0LF;
    p = p * s2 + 1.0LF / 11.0LF;
    p = p * s2 + 1.0LF / 9.0LF;
    p = p * s2 + 1.0LF / 7.0LF;
    p = p * s2 + 1.0LF / 5.0LF;
    p = p * s2 + 1.0LF / 3.0LF;
    p = p * s2 + 1.0LF;
    precise double lm = 2.0LF * s * p;
    precise double res = double(e) * D_LN2_HI + (double(e) * D_LN2_LO + lm);
    return res;
}

double d_log1p(double x)
{
    if (abs(x) < 1e-4LF) {
        double x2 = x * x;
        return x - x2 * (0.5LF - x * (1.0LF / 3.0LF - x * (0.25LF - x * 0.2LF)));
    }
    // u = 1 + x rounds; log(u) x / (u - 1) corrects for that rounding (u - 1 is exact;
    // `precise` keeps the compiler from folding (1 + x) - 1 into x)
    precise double u = 1.0LF + x, um = u - 1.0LF;
    return um == x ? d_log(u) : d_log(u) * (x / um);
}

// sin and cos of r, |r| <= pi/4 (plus a few ulp), in quadrant q: of t = q pi/2 + r. Taylor
// polynomials to r^19 / r^18 (truncation below 2^-60).
void d_sincos_q(double r, int q, out double s, out double c)
{
    double r2 = r * r;
    double ps = -1.0LF / 121645100408832000.0LF;
    ps = ps * r2 + 1.0LF / 355687428096000.0LF;
    ps = ps * r2 - 1.0LF / 1307674368000.0LF;
    ps = ps * r2 + 1.0LF / 6227020800.0LF;
    ps = ps * r2 - 1.0LF / 39916800.0LF;
    ps = ps * r2 + 1.0LF / 362880.0LF;
    ps = ps * r2 - 1.0LF / 5040.0LF;
    ps = ps * r2 + 1.0LF / 120.0LF;
    ps = ps * r2 - 1.0LF / 6.0LF;
    double sr = r + r * r2 * ps;
    double pc = 1.0LF / 6402373705728000.0LF;
    pc = pc * r2 - 1.0LF / 20922789888000.0LF;
    pc = pc * r2 + 1.0LF / 87178291200.0LF;
    pc = pc * r2 - 1.0LF / 479001600.0LF;
    pc = pc * r2 + 1.0LF / 3628800.0LF;
    pc = pc * r2 - 1.0LF / 40320.0LF;
    pc = pc * r2 + 1.0LF / 720.0LF;
    pc = pc * r2 - 1.0LF / 24.0LF;
    pc = pc * r2 + 0.5LF;
    double cr = 1.0LF - r2 * pc;
    q &= 3;
    s = q == 0 ? sr : q == 1 ? cr : q == 2 ? -sr : -cr;
    c = q == 0 ? cr : q == 1 ? -sr : q == 2 ? -cr : sr;
}

// sin and cos of t in [0, 2 pi] (Box-Muller's angle): t = k pi/2 + r with pi/2 in two parts
// (the high part has 21 trailing zero bits, so k * hi is exact for k <= 4), |r| <= pi/4.
void d_sincos(double t, out double s, out double c)
{
    const double PIO2_HI = 1.57079632673412561417e+00LF;
    const double PIO2_LO = 6.07710050650619224932e-11LF;
    double k = floor(t * 0.63661977236758134308LF + 0.5LF);
    double r = (t - k * PIO2_HI) - k * PIO2_LO;
    d_sincos_q(r, int(k), s, c);
}

// ---- the f32 functions of issue 13, evaluated in double (arguments: f32 values) ----
// Each is within a few double ulps of the exact value for every f32 argument, so rounding
// to f32 (or f16/bf16) gives the correctly rounded result or its neighbour, inside the
// conformance bounds (4-16 ulp of the dtype). The trigonometric ones, erf and atan2 are not
// f64-accurate everywhere (the argument reduction assumes a 24-bit significand), so the f64
// dtype does not use them; the hyperbolic ones and their inverses are (vk_ops.c says which).

const double D_PI_HI = 3.141592653589793LF;
const double D_PI_LO = 1.2246467991473532e-16LF;
const double D_PIO2 = 1.5707963267948966LF;
const double D_PIO2_LO = 6.123233995736766e-17LF;

// The bits of 2/pi, 32 per word, most significant first (2/pi = 0.a2f9836e 4e441529 ...),
// computed with mpmath at 600 bits of precision.
const uint D_2OPI[8] = uint[8](0xa2f9836eu, 0x4e441529u, 0xfc2757d1u, 0xf534ddc0u,
                               0xdb629599u, 0x3c439041u, 0xfe5163abu, 0xdebbc561u);

// Bits [pos, pos + 32) of the 160-bit integer l (l[0] least significant); pos may be < 0.
uint d_bits160(uint l[5], int pos)
{
    if (pos <= -32) return 0u;
    if (pos < 0) return l[0] << uint(-pos);
    int w = pos >> 5, sh = pos & 31;
    uint lo = w < 5 ? l[w] : 0u, hi = w + 1 < 5 ? l[w + 1] : 0u;
    return sh == 0 ? lo : (lo >> uint(sh)) | (hi << uint(32 - sh));
}

// x = q pi/2 + r, |r| <= pi/4 (a rounding over), for finite x holding an f32 value.
// |x| < 2^19: Cody-Waite with pi/2 in three parts (33, 33 and 53 bits: k times either of the
// first two is exact); larger: Payne-Hanek, x 2/pi mod 4 as an integer product of x's 24-bit
// significand m and 128 bits of 2/pi taken where they matter (the earlier bits only add
// multiples of 4; the later ones change the fraction by less than 2^-70).
double d_rem_pio2(double x, out int q)
{
    const double P1 = 1.5707963267341256LF, P2 = 6.077100506303966e-11LF,
                 P3 = 2.0222662487959506e-21LF;
    double ax = abs(x);
    if (ax < 524288.0LF) {
        double k = floor(x * 0.6366197723675814LF + 0.5LF);
        q = int(k);
        return ((x - k * P1) - k * P2) - k * P3;
    }
    int e;
    double fr = frexp(ax, e);
    uint m = uint(ldexp(fr, 24));
    e -= 24; // ax = m 2^e
    int i0 = e >= 2 ? (e - 2) / 32 : 0;
    int s = 32 * i0 + 128 - e; // the value is l 2^-s
    uint l[5];
    uint64_t carry = 0ul;
    for (int k = 3; k >= 0; k--) {
        uint64_t t = uint64_t(m) * uint64_t(D_2OPI[i0 + k]) + carry;
        l[3 - k] = uint(t & 0xfffffffful);
        carry = t >> 32;
    }
    l[4] = uint(carry);
    uint ip = d_bits160(l, s) & 3u;
    double f = double(d_bits160(l, s - 32)) * 2.3283064365386963e-10LF +
               double(d_bits160(l, s - 64)) * 5.421010862427522e-20LF +
               double(d_bits160(l, s - 96)) * 1.2621774483536189e-29LF;
    if (f >= 0.5LF) {
        f -= 1.0LF;
        ip += 1u;
    }
    double r = f * D_PIO2;
    if (x < 0.0LF) {
        r = -r;
        ip = 4u - (ip & 3u);
    }
    q = int(ip & 3u);
    return r;
}

// sin (which 0), cos (1) or tan (2): NaN for +-inf and NaN; sin and tan keep +-0
double d_trig(double x, int which)
{
    if (isinf(x) || x != x) return 0.0LF / 0.0LF;
    if (x == 0.0LF && which != 1) return x;
    int q;
    double r = d_rem_pio2(x, q), s, c;
    d_sincos_q(r, q, s, c);
    return which == 0 ? s : which == 1 ? c : s / c;
}

// atan: |x| > 1 by pi/2 - atan(1/x); then two halvings atan t = 2 atan(t / (1 + sqrt(1 +
// t^2))) bring t below tan(pi/16) < 0.2, where the series to t^27 is below 2^-60.
double d_atan(double x)
{
    if (x != x || x == 0.0LF) return x;
    double t = abs(x);
    bool inv = t > 1.0LF;
    if (inv) t = 1.0LF / t;
    t = t / (1.0LF + sqrt(1.0LF + t * t));
    t = t / (1.0LF + sqrt(1.0LF + t * t));
    double t2 = t * t, p = 0.0LF;
    for (int k = 13; k >= 0; k--) p = p * t2 + ((k & 1) != 0 ? -1.0LF : 1.0LF) / double(2 * k + 1);
    double a = 4.0LF * t * p;
    if (inv) a = (D_PIO2 - a) + D_PIO2_LO;
    return x < 0.0LF ? -a : a;
}

double d_asin(double x)
{
    if (x != x || abs(x) > 1.0LF) return 0.0LF / 0.0LF;
    if (x == 0.0LF) return x;
    return d_atan(x / sqrt((1.0LF - x) * (1.0LF + x)));
}

double d_acos(double x)
{
    if (x != x || abs(x) > 1.0LF) return 0.0LF / 0.0LF;
    return 2.0LF * d_atan(sqrt((1.0LF - x) / (1.0LF + x)));
}

// atan2 with C99 Annex F's special cases (signed zeros, infinities)
double d_atan2(double y, double x)
{
    if (x != x || y != y) return 0.0LF / 0.0LF;
    bool yneg = (unpackDouble2x32(y).y >> 31) != 0u, xneg = (unpackDouble2x32(x).y >> 31) != 0u;
    double a;
    if (y == 0.0LF) {
        a = xneg ? D_PI_HI : 0.0LF;
    } else if (isinf(y)) {
        a = isinf(x) ? (xneg ? 2.356194490192345LF : 0.7853981633974483LF) : D_PIO2;
    } else if (x == 0.0LF) {
        a = D_PIO2;
    } else if (isinf(x)) {
        a = xneg ? D_PI_HI : 0.0LF;
    } else {
        a = d_atan(abs(y) / abs(x));
        if (xneg) a = (D_PI_HI - a) + D_PI_LO;
    }
    return yneg ? -a : a;
}

double d_sinh(double x)
{
    if (x != x || x == 0.0LF) return x;
    double t = abs(x), s;
    if (t < 1.0LF) {
        double em = d_expm1(t);
        s = 0.5LF * (em + em / (em + 1.0LF));
    } else if (t > 709.0LF) { // e^t overflows before e^t / 2 does (e^-t is below its ulp)
        s = t > 711.0LF ? 1.0LF / 0.0LF : d_exp_scaled(t, -1);
    } else {
        double e = d_exp(t);
        s = 0.5LF * (e - 1.0LF / e);
    }
    return x < 0.0LF ? -s : s;
}

// Past |x| = 709 e^|x| / 2 is formed as one scaled exponential: the earlier (e^(|x|/2) / 2)
// e^(|x|/2) came out inf between 709.78 and 710.47 on NVIDIA's driver (CONFORMANCE.md,
// 2026-12-05), its compiler presumably reassociating the product to e^(|x|/2)^2 / 2.
double d_cosh(double x)
{
    double t = abs(x);
    if (t > 709.0LF) return t > 711.0LF ? 1.0LF / 0.0LF : d_exp_scaled(t, -1);
    double e = d_exp(t);
    return 0.5LF * (e + 1.0LF / e);
}

double d_asinh(double x)
{
    if (x != x || x == 0.0LF || isinf(x)) return x;
    double t = abs(x), t2 = t * t;
    double a = d_log1p(t + t2 / (1.0LF + sqrt(1.0LF + t2)));
    return x < 0.0LF ? -a : a;
}

double d_acosh(double x)
{
    if (x != x || x < 1.0LF) return 0.0LF / 0.0LF;
    double t = x - 1.0LF;
    return d_log1p(t + sqrt(2.0LF * t + t * t));
}

double d_atanh(double x)
{
    if (x != x || abs(x) > 1.0LF) return 0.0LF / 0.0LF;
    if (x == 0.0LF) return x;
    double t = abs(x); // odd: on |x| the argument of log1p stays positive (no cancellation)
    double r = 0.5LF * d_log1p(2.0LF * t / (1.0LF - t));
    return x < 0.0LF ? -r : r;
}

// erf by its Maclaurin series for |x| < 2 (50 terms; the largest, near n = 4, costs 3 bits);
// erfc by the continued fraction erfc z = e^(-z^2) / sqrt(pi) / (z + (1/2) / (z + 1 / (z +
// (3/2) / ...))), 60 levels evaluated from the bottom, for z >= 2 (relative 2^-52 there).
double d_erf_series(double x)
{
    double x2 = x * x, t = x, s = 0.0LF;
    for (int n = 0; n < 50; n++) {
        s += t / double(2 * n + 1);
        t *= -x2 / double(n + 1);
    }
    return s * 1.1283791670955126LF;
}

double d_erfc_cf(double z)
{
    double f = z;
    for (int n = 60; n >= 1; n--) f = z + (0.5LF * double(n)) / f;
    return d_exp(-z * z) * 0.5641895835477563LF / f;
}

double d_erf(double x)
{
    if (x != x || x == 0.0LF) return x;
    double t = abs(x);
    double r = t < 2.0LF ? d_erf_series(t) : (t > 6.0LF ? 1.0LF : 1.0LF - d_erfc_cf(t));
    return x < 0.0LF ? -r : r;
}

double d_erfc(double z)
{
    if (z != z) return z;
    if (abs(z) < 2.0LF) return 1.0LF - d_erf_series(z);
    if (z < 0.0LF) return z < -6.0LF ? 2.0LF : 2.0LF - d_erfc_cf(-z);
    return z > 27.3LF ? 0.0LF : d_erfc_cf(z);
}

// ---- double-double helpers for pow: a value as hi + lo, |lo| <= ulp(hi) / 2 ----
// Dekker's exact product of two doubles (Veltkamp split by 2^27 + 1), no FMA needed.
dvec2 d_two_prod(double a, double b)
{
    precise double p = a * b;
    precise double ca = 134217729.0LF * a, ah = ca - (ca - a), al = a - ah;
    precise double cb = 134217729.0LF * b, bh = cb - (cb - b), bl = b - bh;
    precise double err = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
    return dvec2(p, err);
}

dvec2 d_two_sum(double a, double b)
{
    precise double s = a + b, bb = s - a, err = (a - (s - bb)) + (b - bb);
    return dvec2(s, err);
}

// log x for finite x > 0 as hi + lo, relative error below 2^-62: e ln2 + 2 atanh s with
// s = (m - 1)/(m + 1) in double-double (m + 1 as an exact sum too: rounding it alone cost
// 2^-53 relative, 200 ulp of pow(1.0000001, 2^32)), s^3/3 in double-double, the rest of the
// series (relative weight below 2^-12) in double.
dvec2 d_log_dd(double x)
{
    int e, sub = 0;
    if (x < 2.2250738585072014e-308LF) {
        x *= 18014398509481984.0LF;
        sub = 54;
    }
    double m = frexp(x, e);
    e -= sub;
    if (m < 0.70710678118654752440LF) {
        m *= 2.0LF;
        e -= 1;
    }
    precise double num = m - 1.0LF; // exact (Sterbenz)
    dvec2 den = d_two_sum(m, 1.0LF);
    precise double sh = num / den.x;
    dvec2 q = d_two_prod(sh, den.x);
    precise double sl = (((num - q.x) - q.y) - sh * den.y) / den.x;
    dvec2 s2 = d_two_prod(sh, sh);
    precise double s2l = s2.y + 2.0LF * sh * sl;
    dvec2 s3 = d_two_prod(sh, s2.x);
    precise double s3l = s3.y + (sh * s2l + sl * s2.x);
    precise double t3h = s3.x / 3.0LF;
    dvec2 q3 = d_two_prod(t3h, 3.0LF);
    precise double t3l = (((s3.x - q3.x) - q3.y) + s3l) / 3.0LF; // s^3/3 = t3h + t3l
    precise double s4 = s2.x * s2.x, p = 1.0LF / 25.0LF;
    for (int k = 11; k >= 2; k--) p = p * s2.x + 1.0LF / double(2 * k + 1);
    precise double tail = sh * s4 * p; // s^5/5 + s^7/7 + ...
    dvec2 t = d_two_sum(sh, t3h); // s + s^3/3
    precise double tl = t.y + (sl + (t3l + tail));
    t = d_two_sum(t.x, tl);
    double de = double(e);
    dvec2 h = d_two_sum(de * D_LN2_HI, 2.0LF * t.x);
    precise double lo = h.y + (2.0LF * t.y + de * D_LN2_LO);
    return d_two_sum(h.x, lo);
}

// b (hi + lo) as hi + lo
dvec2 d_mul_dd(double b, dvec2 v)
{
    dvec2 p = d_two_prod(b, v.x);
    precise double lo = p.y + b * v.y;
    return d_two_sum(p.x, lo);
}

// e^(hi + lo): d_exp's reduction on hi, lo added to the reduced argument
double d_exp_dd(dvec2 v)
{
    double x = v.x;
    if (x != x) return x;
    if (x > 709.782712893384LF) return 1.0LF / 0.0LF;
    if (x < -745.2LF) return 0.0LF;
    double k = floor(x * D_INV_LN2 + 0.5LF);
    precise double r = ((x - k * D_LN2_HI) - k * D_LN2_LO) + v.y;
    precise double e = 1.0LF + d_exp_poly(r);
    int ki = int(k);
    int k1 = ki / 2;
    return ldexp(ldexp(e, k1), ki - k1);
}

// pow with C99 Annex F's special cases (huge |b| included); otherwise e^(b log|a|) with log and the product in
// double-double (so b log|a| is accurate to far below an ulp of the result even when it is
// near +-745), with the sign of an odd integer power of a negative base (a non-integer power
// of a negative base is NaN).
double d_pow(double a, double b)
{
    if (b == 0.0LF || a == 1.0LF) return 1.0LF;
    if (a != a || b != b) return 0.0LF / 0.0LF;
    bool bint = floor(b) == b;
    bool bodd = bint && abs(b) < 9007199254740992.0LF && floor(b * 0.5LF) != b * 0.5LF;
    double inf = 1.0LF / 0.0LF;
    if (isinf(b)) {
        double aa = abs(a);
        if (aa == 1.0LF) return 1.0LF;
        return (aa < 1.0LF) == (b < 0.0LF) ? inf : 0.0LF;
    }
    bool aneg = (unpackDouble2x32(a).y >> 31) != 0u;
    if (a == 0.0LF || isinf(a)) {
        bool big = (a == 0.0LF) == (b < 0.0LF); // the magnitude is inf, else 0
        double m = big ? inf : 0.0LF;
        return aneg && bodd ? -m : m;
    }
    if (a < 0.0LF && !bint) return 0.0LF / 0.0LF;
    if (abs(b) >= 18446744073709551616.0LF) {
        // |b| >= 2^64: an even integer, and |b log|a|| > 2048 for every double |a| != 1, so
        // the power overflows or underflows (and 2^27 b, Dekker's split, would overflow)
        double aa = abs(a);
        if (aa == 1.0LF) return 1.0LF;
        return (aa < 1.0LF) == (b < 0.0LF) ? inf : 0.0LF;
    }
    double r = d_exp_dd(d_mul_dd(b, d_log_dd(abs(a))));
    return a < 0.0LF && bodd ? -r : r;
}

// The exponent of finite nonzero x (x = m 2^e, 1 <= m < 2), from its bits: GLSL leaves
// frexp undefined for subnormal doubles.
int d_ilogb(double x)
{
    uvec2 w = unpackDouble2x32(x);
    int e = int((w.y >> 20) & 0x7ffu);
    if (e != 0) return e - 1023;
    uint hi = w.y & 0xfffffu;
    return (hi != 0u ? findMSB(hi) + 32 : findMSB(w.x)) - 1074;
}

// 2^k for -1022 <= k <= 1023, from its bits
double d_pow2(int k) { return packDouble2x32(uvec2(0u, uint(k + 1023) << 20)); }

// C's fmod, exact: subtract |b| 2^k for k from the exponent gap down to 0 (each difference
// is exact by Sterbenz's lemma: t <= r < 2t). |b| 2^k is formed by multiplying with powers
// of two (exact while it stays at most r), for subnormal operands too.
double d_fmod(double a, double b)
{
    if (a != a || b != b || isinf(a) || b == 0.0LF) return 0.0LF / 0.0LF;
    if (isinf(b)) return a;
    double r = abs(a), y = abs(b);
    if (r < y) return a;
    for (int k = d_ilogb(r) - d_ilogb(y); k >= 0; k--) {
        double t = y;
        int kk = k;
        for (; kk > 1000; kk -= 1000) t *= d_pow2(1000);
        t *= d_pow2(kk);
        if (r >= t) r -= t;
    }
    return a < 0.0LF ? -r : r;
}
