/* security.h — the client side of TLS and bearer tokens, shared by the session transport
 * (remote.c) and the unary calls (info.c).
 *
 * Thread-safety: a td__client_sec is used by one thread at a time.
 */
#ifndef TD_CLIENT_SECURITY_H
#define TD_CLIENT_SECURITY_H

#include "tensord.h"

#include <grpc/grpc.h>
#include <stdbool.h>

typedef struct td__client_sec {
    bool tls;
    char *ca_pem, *cert_pem, *key_pem; /* owned; NULL when not given */
    char auth[600];                    /* "Bearer TOKEN", or "" */
    grpc_metadata md[1];               /* the authorization header, over `auth` */
    size_t n_md;
} td__client_sec;

/* Read the PEM files and the token named by `opts` (may be NULL; the token falls back to
 * $TENSORD_TOKEN). TLS when `tls` or opts->tls. Returns TD_OK, or TD_EINVAL / TD_EIO with
 * a message naming the file or option. */
td_status td__client_sec_init(td__client_sec *s, bool tls, const td_options *opts, char *err,
                              size_t errlen);
void td__client_sec_fini(td__client_sec *s);
/* Channel credentials for s (caller releases). */
grpc_channel_credentials *td__client_sec_creds(const td__client_sec *s);
/* Metadata to send with every call's initial metadata: s->md[0 .. s->n_md). Valid while s. */

/* The connection to `target` failed before any call: rewrite err with the likely cause.
 * Probes the address with a plain TCP connect: if that works, the failure was the
 * TLS/HTTP2 handshake (wrong CA, missing or rejected client certificate, TLS vs
 * plaintext mismatch). Leaves err alone when nothing listens there. */
void td__client_sec_explain(const td__client_sec *s, const char *target, char *err,
                            size_t errlen);
/* The message for a call that a TLS peer ended with UNAVAILABLE right after connecting. */
void td__client_sec_handshake_msg(const char *target, char *err, size_t errlen);
#endif
