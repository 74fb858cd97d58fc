/* unit/common/fingerprint.c — the blob offer's first-pass key (common/fingerprint.h): equal
 * bytes give equal fingerprints whatever the size; the size, and any sampled byte, change
 * it; a byte outside the sample does not (what the SHA-256 check on a repeat is for). */
#include "common/fingerprint.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

static void fp(const uint8_t *p, size_t n, uint8_t out[TD_FINGERPRINT_LEN])
{
    cr_assert(td__fingerprint(p, n, out));
}

Test(fingerprint, equal_bytes_equal_keys_size_and_samples_count)
{
    size_t sizes[] = {0, 1, 255, TD_FINGERPRINT_SAMPLE_BYTES, TD_FINGERPRINT_SAMPLE_BYTES + 1,
                      (size_t)8 << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        uint8_t *a = malloc(n + 1), *b = malloc(n + 1);
        for (size_t i = 0; i < n + 1; i++) a[i] = (uint8_t)(i * 7 + k);
        memcpy(b, a, n + 1);
        uint8_t fa[TD_FINGERPRINT_LEN], fb[TD_FINGERPRINT_LEN];
        fp(a, n, fa);
        fp(b, n, fb);
        cr_expect(memcmp(fa, fb, sizeof fa) == 0, "size %zu: equal bytes, different keys", n);
        fp(a, n + 1, fb);
        cr_expect(memcmp(fa, fb, sizeof fa) != 0, "size %zu: size not in the key", n);
        if (n > 0) {
            /* first and last bytes are always sampled */
            b[0] ^= 1;
            fp(b, n, fb);
            cr_expect(memcmp(fa, fb, sizeof fa) != 0, "size %zu: first byte not sampled", n);
            b[0] ^= 1;
            b[n - 1] ^= 1;
            fp(b, n, fb);
            cr_expect(memcmp(fa, fb, sizeof fa) != 0, "size %zu: last byte not sampled", n);
        }
        free(a);
        free(b);
    }
}

Test(fingerprint, bytes_between_pieces_are_not_sampled)
{
    size_t n = (size_t)8 << 20; /* pieces start every ~8200 bytes; byte 300 is in none */
    uint8_t *a = calloc(n, 1);
    uint8_t fa[TD_FINGERPRINT_LEN], fb[TD_FINGERPRINT_LEN];
    fp(a, n, fa);
    a[300] = 1;
    fp(a, n, fb);
    cr_expect(memcmp(fa, fb, sizeof fa) == 0, "byte 300 should be outside the sample");
    free(a);
}
