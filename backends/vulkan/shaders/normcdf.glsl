// normcdf.glsl — engine/normcdf.h in GLSL, operation for operation: the standard normal CDF
// and its inverse with IEEE basic operations only, every expression `precise` (no
// reassociation, no fused multiply-add), so TRUNC_NORMAL's draws are the CPU's bits on a
// device whose double +, -, *, /, sqrt are IEEE (lavapipe; the big GPU vendors' too).
// The constants are normcdf.h's hex literals written in decimal (17 digits: exact).
const double ND_LN2_HI = 0.6931467056274414LF;
const double ND_LN2_LO = 4.7493250390316726e-07LF;
const double ND_INV_LN2 = 1.4426950408889634LF;
const double ND_SQRT2 = 1.4142135623730951LF;
const double ND_INV_SQRT_2PI = 0.3989422804014327LF;

double nd_pow2(int k) { return packDouble2x32(uvec2(0u, uint(k + 1023) << 20)); }

double nd_exp(double x)
{
    if (!(x > -745.5LF)) return 0.0LF;
    precise double k = floor(x * ND_INV_LN2 + 0.5LF);
    precise double r = (x - k * ND_LN2_HI) - k * ND_LN2_LO;
    precise double p = 1.0LF;
    for (int n = 13; n >= 1; n--) p = 1.0LF + p * r / double(n);
    int ki = int(k);
    if (ki >= -1022) return p * nd_pow2(ki);
    precise double q = p * nd_pow2(ki + 54);
    return q * nd_pow2(-54);
}

double nd_log(double x)
{
    int e = 0;
    precise double xs = x;
    if (xs < 2.2250738585072014e-308LF) {
        xs = xs * 18014398509481984.0LF;
        e = -54;
    }
    uvec2 w = unpackDouble2x32(xs);
    e += int(w.y >> 20) - 1023;
    precise double m = packDouble2x32(uvec2(w.x, (w.y & 0x000fffffu) | 0x3ff00000u));
    if (m > ND_SQRT2) {
        m = m * 0.5LF;
        e += 1;
    }
    precise double f = m - 1.0LF;
    precise double s = f / (2.0LF + f);
    precise double z = s * s;
    precise double q = 1.0LF / 23.0LF;
    for (int k = 10; k >= 0; k--) q = 1.0LF / double(2 * k + 1) + z * q;
    precise double res = double(e) * ND_LN2_HI + (2.0LF * s * q + double(e) * ND_LN2_LO);
    return res;
}

double nd_pdf(double t)
{
    precise double a = -0.5LF * (t * t);
    precise double r = nd_exp(a) * ND_INV_SQRT_2PI;
    return r;
}

double nd_cdf_lower(double t)
{
    if (!(t < 40.0LF)) return 0.0LF;
    if (t < 3.0LF) {
        precise double z = t * t;
        precise double term = t, s = t;
        for (int n = 3; n < 400; n += 2) {
            term = term * z / double(n);
            precise double s2 = s + term;
            if (s2 == s) break;
            s = s2;
        }
        precise double r = 0.5LF - nd_pdf(t) * s;
        return r;
    }
    precise double f = t, c = t, d = 0.0LF;
    for (int k = 1; k <= 500; k++) {
        d = 1.0LF / (t + double(k) * d);
        c = t + double(k) / c;
        precise double delta = c * d;
        f = f * delta;
        if (abs(delta - 1.0LF) < 1.1102230246251565e-16LF) break;
    }
    precise double r = nd_pdf(t) / f;
    return r;
}

double nd_cdf(double x)
{
    precise double r = x <= 0.0LF ? nd_cdf_lower(-x) : 1.0LF - nd_cdf_lower(x);
    return r;
}

double nd_quantile_lower(double u)
{
    if (!(u > 0.0LF)) return -1.0LF / 0.0LF;
    precise double t = sqrt(-2.0LF * nd_log(u));
    precise double num = 2.515517LF + t * (0.802853LF + t * 0.010328LF);
    precise double den = 1.0LF + t * (1.432788LF + t * (0.189269LF + t * 0.001308LF));
    precise double z = num / den - t;
    for (int it = 0; it < 2; it++) {
        double p = nd_pdf(z);
        if (!(p > 0.0LF)) break;
        precise double h = (nd_cdf(z) - u) / p;
        z = z - h / (1.0LF + 0.5LF * z * h);
    }
    return z;
}

double nd_quantile(double u)
{
    precise double v = 1.0LF - u;
    return u <= 0.5LF ? nd_quantile_lower(u) : -nd_quantile_lower(v);
}
