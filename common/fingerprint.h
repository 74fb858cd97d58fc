/* fingerprint.h — a cheap first-pass key of a tensor's bytes, for the blob offer.
 *
 * Why not SHA-256 on every upload: SHA-256 runs at ~1.5-2 GB/s here, about the speed of the
 * wire, so hashing fresh data on both ends cost most of an upload (BENCHMARKS.md, P3), and
 * even XXH3 over every byte (~17 GB/s, memory bound) is 12% of a 64 MiB upload on these
 * machines. A fingerprint is XXH3-128 of the size and of a fixed sample of the bytes
 * (everything up to TD_FINGERPRINT_SAMPLE_BYTES; above that TD_FINGERPRINT_PIECES pieces of
 * TD_FINGERPRINT_PIECE bytes spread evenly, the first at 0 and the last ending at the end),
 * ~15 us whatever the size. Equal bytes give equal fingerprints; different bytes that agree
 * on the sample collide, and a hostile client can make collisions at will. So a fingerprint
 * only decides when to pay for SHA-256 (on a repeat), never which bytes are served: the
 * server's blob store stays keyed by the SHA-256 it computes itself (server/candidates.h).
 * Thread-safety: any thread.
 */
#ifndef TD_COMMON_FINGERPRINT_H
#define TD_COMMON_FINGERPRINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TD_FINGERPRINT_LEN 16 /* = TD_FINGERPRINT_BYTES on the wire */
#define TD_FINGERPRINT_PIECES 1024
#define TD_FINGERPRINT_PIECE 256
#define TD_FINGERPRINT_SAMPLE_BYTES ((size_t)TD_FINGERPRINT_PIECES * TD_FINGERPRINT_PIECE)

/* Fingerprint of `nbytes` at `data` into out. Returns false only when out of memory. */
bool td__fingerprint(const void *data, size_t nbytes, uint8_t out[TD_FINGERPRINT_LEN]);
#endif
