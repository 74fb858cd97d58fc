/* sha256.c — SHA-256 via OpenSSL EVP (see sha256.h). A thin wrapper so the rest of the tree
 * never includes OpenSSL headers, and so the hash can be swapped (e.g. for BLAKE3) in one
 * place. Large inputs are fed in 64 MiB pieces: EVP takes size_t, but keeping pieces
 * bounded makes the cost of one update call predictable. */
#include "common/sha256.h"

#include <openssl/evp.h>

#define SHA_PIECE ((size_t)64 << 20)

struct td__sha256_ctx {
    EVP_MD_CTX *md;
};

td__sha256_ctx *td__sha256_begin(void)
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (md == NULL) return NULL;
    if (EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(md);
        return NULL;
    }
    /* The context is the EVP object itself: no second allocation to fail. */
    return (td__sha256_ctx *)md;
}

bool td__sha256_update(td__sha256_ctx *c, const void *data, size_t nbytes)
{
    EVP_MD_CTX *md = (EVP_MD_CTX *)c;
    const unsigned char *p = data;
    while (nbytes > 0) {
        size_t n = nbytes < SHA_PIECE ? nbytes : SHA_PIECE;
        if (EVP_DigestUpdate(md, p, n) != 1) return false;
        p += n;
        nbytes -= n;
    }
    return true;
}

bool td__sha256_final(td__sha256_ctx *c, uint8_t out[TD_SHA256_BYTES])
{
    EVP_MD_CTX *md = (EVP_MD_CTX *)c;
    unsigned int len = 0;
    bool ok = EVP_DigestFinal_ex(md, out, &len) == 1 && len == TD_SHA256_BYTES;
    EVP_MD_CTX_free(md);
    return ok;
}

void td__sha256_abort(td__sha256_ctx *c)
{
    if (c != NULL) EVP_MD_CTX_free((EVP_MD_CTX *)c);
}

bool td__sha256(const void *data, size_t nbytes, uint8_t out[TD_SHA256_BYTES])
{
    td__sha256_ctx *c = td__sha256_begin();
    if (c == NULL) return false;
    if (!td__sha256_update(c, data, nbytes)) {
        td__sha256_abort(c);
        return false;
    }
    return td__sha256_final(c, out);
}

void td__sha256_hex(const uint8_t digest[TD_SHA256_BYTES], char buf[TD_SHA256_HEX])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < TD_SHA256_BYTES; i++) {
        buf[2 * i] = hex[digest[i] >> 4];
        buf[2 * i + 1] = hex[digest[i] & 15];
    }
    buf[2 * TD_SHA256_BYTES] = '\0';
}
