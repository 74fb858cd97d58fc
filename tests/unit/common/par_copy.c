/* unit/common/par_copy.c — td__par_memcpy gives memcpy's bytes for sizes around the
 * threshold and the page rounding, at odd offsets, and uses several threads for large
 * copies where there are CPUs for them. Expected bytes: a byte loop (the reference). */
#include "common/par_copy.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (uint8_t)x;
    }
}

Test(par_copy, same_bytes_as_a_byte_loop)
{
    const size_t T = TD_PAR_COPY_MIN_BYTES;
    const size_t sizes[] = {0, 1, 4095, T - 1, T, T + 1, T + 4095, 3 * T + 12345,
                            (size_t)17 << 20};
    const size_t skews[] = {0, 1, 4097};
    size_t max = ((size_t)17 << 20) + 8192;
    uint8_t *src = malloc(max), *dst = malloc(max), *want = malloc(max);
    cr_assert(src && dst && want);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        for (size_t k = 0; k < 3; k++) {
            size_t n = sizes[i], so = skews[k], dso = skews[2 - k];
            fill(src, max, (uint32_t)(i * 3 + k));
            fill(dst, max, 999);
            memcpy(want, dst, max);
            for (size_t b = 0; b < n; b++) want[dso + b] = src[so + b];
            int t = td__par_memcpy(dst + dso, src + so, n);
            cr_expect(t >= 1 && t <= TD_PAR_COPY_MAX_THREADS, "%d threads", t);
            cr_expect(memcmp(dst, want, max) == 0,
                      "%zu bytes (source skew %zu, destination skew %zu) differ, or bytes "
                      "outside the copy changed", n, so, dso);
        }
    }
    free(src);
    free(dst);
    free(want);
}

Test(par_copy, threads_only_when_large_and_cpus_allow)
{
    size_t n = (size_t)16 << 20;
    uint8_t *a = malloc(n), *b = malloc(n);
    cr_assert(a && b);
    memset(a, 7, n);
    cr_expect_eq(td__par_memcpy(b, a, TD_PAR_COPY_MIN_BYTES - 1), 1, "below the threshold");
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int want = cpus < 2 ? 1 : cpus < TD_PAR_COPY_MAX_THREADS ? (int)cpus : TD_PAR_COPY_MAX_THREADS;
    cr_expect_eq(td__par_memcpy(b, a, n), want, "16 MiB with %ld CPUs", cpus);
    cr_expect(b[0] == 7 && b[n - 1] == 7);
    free(a);
    free(b);
}
