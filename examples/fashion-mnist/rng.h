/* rng.h — the host-side pseudo-random generator of the Fashion-MNIST example.
 *
 * SplitMix64 (G. Steele, D. Lea, C. Flood, "Fast splittable pseudorandom number
 * generators", OOPSLA 2014): a 64-bit counter advanced by the golden-ratio constant and
 * passed through a bijective mixer. It is tiny, has no bad seeds, and gives the same
 * sequence on every host, so a run's shuffling is reproduced from --seed alone. It also
 * derives the per-tensor seeds of the device-side initialisers.
 */
#ifndef FM_RNG_H
#define FM_RNG_H

#include <stdint.h>

typedef struct fm_rng {
    uint64_t state;
} fm_rng;

static inline uint64_t fm_rng_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline uint64_t fm_rng_next(fm_rng *r)
{
    r->state += 0x9e3779b97f4a7c15ULL;
    return fm_rng_mix(r->state);
}

/* Uniform integer in [0, n), n > 0, without modulo bias (rejects the short last block). */
static inline uint64_t fm_rng_below(fm_rng *r, uint64_t n)
{
    uint64_t threshold = (0 - n) % n; /* 2^64 mod n */
    for (;;) {
        uint64_t x = fm_rng_next(r);
        if (x >= threshold) return x % n;
    }
}

#endif
