// philox.glsl — Philox4x32-10 as engine/philox.h: block b of a seed is philox((b_lo, b_hi,
// 0, 0), (seed_lo, seed_hi)), so the device draws the CPU's words bit for bit (RAND_*,
// DROPOUT).
uvec4 philox(uint seed_lo, uint seed_hi, uint b_lo, uint b_hi)
{
    uvec4 c = uvec4(b_lo, b_hi, 0u, 0u);
    uint k0 = seed_lo, k1 = seed_hi;
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint hi0, lo0, hi1, lo1;
        umulExtended(0xD2511F53u, c.x, hi0, lo0);
        umulExtended(0xCD9E8D57u, c.z, hi1, lo1);
        c = uvec4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
    }
    return c;
}
