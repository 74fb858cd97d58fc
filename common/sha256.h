/* sha256.h — SHA-256 (FIPS 180-4) through OpenSSL's EVP interface, for content addresses.
 *
 * The blob store is shared between sessions, so its keys must be collision resistant:
 * SHA-256, never a fast non-cryptographic hash. OpenSSL uses the CPU's SHA extensions
 * where present (about 1.5-2 GB/s on this project's machines).
 * Thread-safety: any thread; a td__sha256_ctx is used by one thread at a time.
 */
#ifndef TD_COMMON_SHA256_H
#define TD_COMMON_SHA256_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TD_SHA256_BYTES 32
#define TD_SHA256_HEX (2 * TD_SHA256_BYTES + 1) /* hex digits plus NUL */

/* One-shot digest of nbytes at data (data may be NULL when nbytes is 0). Returns false
 * only when OpenSSL fails (out of memory). */
bool td__sha256(const void *data, size_t nbytes, uint8_t out[TD_SHA256_BYTES]);

/* Incremental digest: create, update any number of times, final (frees the context).
 * td__sha256_abort frees a context without a result; NULL is a no-op. */
typedef struct td__sha256_ctx td__sha256_ctx;
td__sha256_ctx *td__sha256_begin(void);
bool td__sha256_update(td__sha256_ctx *c, const void *data, size_t nbytes);
bool td__sha256_final(td__sha256_ctx *c, uint8_t out[TD_SHA256_BYTES]);
void td__sha256_abort(td__sha256_ctx *c);

/* Lowercase hex of a digest into buf (TD_SHA256_HEX bytes). */
void td__sha256_hex(const uint8_t digest[TD_SHA256_BYTES], char buf[TD_SHA256_HEX]);
#endif
