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
    double p = 1.0LF / 6227020800.0LF;
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

double d_exp(double x)
{
    if (x != x) return x;
    if (x > 709.0LF) return 1.0LF / 0.0LF;
    if (x < -745.2LF) return 0.0LF;
    double k = floor(x * D_INV_LN2 + 0.5LF);
    double r = (x - k * D_LN2_HI) - k * D_LN2_LO;
    double e = 1.0LF + d_exp_poly(r);
    int ki = int(k);
    int k1 = ki / 2;
    return ldexp(ldexp(e, k1), ki - k1);
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
    int e;
    double m = frexp(x, e); // x = m 2^e, m in [0.5, 1)
    if (m < 0.70710678118654752440LF) {
        m *= 2.0LF;
        e -= 1;
    }
    double s = (m - 1.0LF) / (m + 1.0LF), s2 = s * s;
    double p = 1.0LF / 23.0LF;
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
    double lm = 2.0LF * s * p;
    return double(e) * D_LN2_HI + (double(e) * D_LN2_LO + lm);
}

double d_log1p(double x)
{
    if (abs(x) < 1e-4LF) {
        double x2 = x * x;
        return x - x2 * (0.5LF - x * (1.0LF / 3.0LF - x * (0.25LF - x * 0.2LF)));
    }
    return d_log(1.0LF + x);
}

// sin and cos of t in [0, 2 pi] (Box-Muller's angle): t = k pi/2 + r with pi/2 in two parts
// (the high part has 21 trailing zero bits, so k * hi is exact for k <= 4), |r| <= pi/4,
// then Taylor polynomials to r^19 / r^18 (truncation below 2^-60).
void d_sincos(double t, out double s, out double c)
{
    const double PIO2_HI = 1.57079632673412561417e+00LF;
    const double PIO2_LO = 6.07710050650619224932e-11LF;
    double k = floor(t * 0.63661977236758134308LF + 0.5LF);
    double r = (t - k * PIO2_HI) - k * PIO2_LO, r2 = r * r;
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
    int q = int(k) & 3;
    s = q == 0 ? sr : q == 1 ? cr : q == 2 ? -sr : -cr;
    c = q == 0 ? cr : q == 1 ? -sr : q == 2 ? -cr : sr;
}
