/* bytes.h — byte counts as operators write them (flags, config files, environment). */
#ifndef TD_COMMON_BYTES_H
#define TD_COMMON_BYTES_H
#include <stdint.h>

/* Parse a byte count: digits with an optional binary suffix (K, M, G, T = 2^10 .. 2^40,
 * optionally followed by "i" and/or "B"; a bare "B" is bytes). Returns 0 and sets *out, or
 * -1 on anything else (a sign, junk, overflow), leaving *out untouched.
 * Thread-safety: any thread. */
int td__parse_bytes(const char *text, uint64_t *out);
#endif
