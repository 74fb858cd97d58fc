/* tls.h — check and load the server's TLS files before gRPC sees them.
 *
 * gRPC reports a bad certificate or key only as a failed bind or, worse, as handshakes
 * that fail later with a message in its own log. tensord checks the files itself at
 * start-up with OpenSSL, so an operator gets one clear error naming the file: unreadable,
 * not PEM, key not matching the certificate, certificate expired or not yet valid.
 * Thread-safety: no shared state.
 */
#ifndef TD_AUTH_TLS_H
#define TD_AUTH_TLS_H

#include "tensord.h"

#include <stddef.h>

typedef struct td__tls_files {
    char *cert_pem;      /* server certificate chain (PEM text, owned) */
    char *key_pem;       /* its private key */
    char *client_ca_pem; /* NULL: no client certificates; else required and verified */
    char subject_cn[256];
} td__tls_files;

/* Read and validate. client_ca may be NULL. On failure returns TD_EIO (unreadable) or
 * TD_EINVAL (bad content) with "FILE: reason" in err, and *out holds nothing. */
td_status td__tls_files_load(const char *cert, const char *key, const char *client_ca,
                             td__tls_files *out, char *err, size_t errlen);
/* Wipe and free the texts (the key is cleared first). */
void td__tls_files_fini(td__tls_files *f);
#endif
