/* fingerprint.c — XXH3-128 over a size-independent sample of the bytes (fingerprint.h). */
#include "common/fingerprint.h"

#include <string.h>
#include <xxhash.h>

bool td__fingerprint(const void *data, size_t nbytes, uint8_t out[TD_FINGERPRINT_LEN])
{
    XXH3_state_t *st = XXH3_createState();
    if (st == NULL || XXH3_128bits_reset(st) != XXH_OK) {
        XXH3_freeState(st);
        return false;
    }
    uint64_t n64 = (uint64_t)nbytes;
    bool ok = XXH3_128bits_update(st, &n64, sizeof n64) == XXH_OK;
    const uint8_t *p = data;
    if (nbytes <= TD_FINGERPRINT_SAMPLE_BYTES) {
        ok = ok && (nbytes == 0 || XXH3_128bits_update(st, p, nbytes) == XXH_OK);
    } else {
        /* Piece i starts at floor(i * span / (PIECES - 1)), written so that nothing
         * overflows: q * i <= span and r * i < 2^20. */
        size_t span = nbytes - TD_FINGERPRINT_PIECE, d = TD_FINGERPRINT_PIECES - 1;
        size_t q = span / d, r = span % d;
        for (size_t i = 0; ok && i < TD_FINGERPRINT_PIECES; i++) {
            size_t off = q * i + (r * i) / d;
            ok = XXH3_128bits_update(st, p + off, TD_FINGERPRINT_PIECE) == XXH_OK;
        }
    }
    XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    if (!ok) return false;
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    memcpy(out, c.digest, TD_FINGERPRINT_LEN);
    return true;
}
