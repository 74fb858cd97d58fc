/* security.c — client TLS credentials, bearer token metadata, and turning gRPC's bare
 * UNAVAILABLE after a refused handshake into a message with the likely cause
 * (see security.h).
 *
 * Why probe with a TCP connect: gRPC reports "cannot connect" and "the TLS handshake
 * failed" the same way on the client (the server's log has the real reason). If a plain
 * TCP connection to the same address succeeds, something is listening and the handshake
 * is what failed, which is worth saying.
 */
#include "client/security.h"
#include "common/alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <grpc/grpc_security.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define SEC_FILE_MAX ((long)1 << 20)
#define SEC_PROBE_MS 1000

static td_status read_pem(const char *what, const char *path, char **out, char *err,
                          size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "%s '%s': cannot read: %s", what, path, strerror(errno));
        return TD_EIO;
    }
    char *buf = td__malloc((size_t)SEC_FILE_MAX + 1);
    size_t n = buf != NULL ? fread(buf, 1, (size_t)SEC_FILE_MAX + 1, f) : 0;
    fclose(f);
    if (buf == NULL || n == 0 || n > (size_t)SEC_FILE_MAX || strstr(buf, "-----BEGIN") == NULL) {
        if (buf != NULL) buf[n > (size_t)SEC_FILE_MAX ? (size_t)SEC_FILE_MAX : n] = '\0';
        snprintf(err, errlen, "%s '%s': %s", what, path,
                 buf == NULL ? "out of memory" : "not a PEM file");
        td__free(buf);
        return buf == NULL ? TD_ENOMEM : TD_EINVAL;
    }
    buf[n] = '\0';
    *out = buf;
    return TD_OK;
}

td_status td__client_sec_init(td__client_sec *s, bool tls, const td_options *opts, char *err,
                              size_t errlen)
{
    memset(s, 0, sizeof *s);
    td_options none;
    memset(&none, 0, sizeof none);
    const td_options *o = opts != NULL ? opts : &none;
    s->tls = tls || o->tls != 0;
    td_status st = TD_OK;
    if (!s->tls && (o->tls_ca_file || o->tls_cert_file || o->tls_key_file)) {
        snprintf(err, errlen,
                 "TLS files were given but the address is plaintext: use tensords://HOST:PORT "
                 "(or set td_options.tls)");
        return TD_EINVAL;
    }
    if ((o->tls_cert_file == NULL) != (o->tls_key_file == NULL)) {
        snprintf(err, errlen, "a client certificate needs both tls_cert_file and tls_key_file");
        return TD_EINVAL;
    }
    if (o->tls_ca_file) st = read_pem("CA file", o->tls_ca_file, &s->ca_pem, err, errlen);
    if (st == TD_OK && o->tls_cert_file)
        st = read_pem("client certificate", o->tls_cert_file, &s->cert_pem, err, errlen);
    if (st == TD_OK && o->tls_key_file)
        st = read_pem("client key", o->tls_key_file, &s->key_pem, err, errlen);
    const char *token = o->token != NULL ? o->token : getenv("TENSORD_TOKEN");
    if (st == TD_OK && token != NULL && token[0] != '\0') {
        size_t n = strlen(token);
        bool ok = n + 8 <= sizeof s->auth;
        for (size_t i = 0; ok && i < n; i++)
            ok = token[i] > 0x20 && token[i] < 0x7f;
        if (!ok) {
            snprintf(err, errlen, "the bearer token must be at most %zu printable characters "
                                  "without spaces", sizeof s->auth - 8);
            st = TD_EINVAL;
        } else {
            snprintf(s->auth, sizeof s->auth, "Bearer %s", token);
            s->md[0].key = grpc_slice_from_static_string("authorization");
            s->md[0].value = grpc_slice_from_static_string(s->auth);
            s->n_md = 1;
        }
    }
    if (st != TD_OK) td__client_sec_fini(s);
    return st;
}

void td__client_sec_fini(td__client_sec *s)
{
    td__free(s->ca_pem);
    if (s->key_pem != NULL) {
        volatile char *p = s->key_pem;
        while (*p) *p++ = 0;
    }
    td__free(s->key_pem);
    td__free(s->cert_pem);
    memset(s, 0, sizeof *s);
}

grpc_channel_credentials *td__client_sec_creds(const td__client_sec *s)
{
    if (!s->tls) return grpc_insecure_credentials_create();
    grpc_ssl_pem_key_cert_pair pair = {.private_key = s->key_pem, .cert_chain = s->cert_pem};
    return grpc_ssl_credentials_create(s->ca_pem, s->cert_pem != NULL ? &pair : NULL, NULL,
                                       NULL);
}

/* Whether a plain connect to target succeeds within SEC_PROBE_MS. */
static bool tcp_answers(const char *target)
{
    int fd = -1;
    bool ok = false;
    if (strncmp(target, "unix:", 5) == 0) {
        struct sockaddr_un sa;
        memset(&sa, 0, sizeof sa);
        sa.sun_family = AF_UNIX;
        if (strlen(target + 5) >= sizeof sa.sun_path) return false;
        memcpy(sa.sun_path, target + 5, strlen(target + 5));
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
        if (fd >= 0) close(fd);
        return ok;
    }
    char host[256];
    const char *colon = strrchr(target, ':');
    if (colon == NULL || (size_t)(colon - target) >= sizeof host) return false;
    size_t hl = (size_t)(colon - target);
    const char *h = target;
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    memcpy(host, h, hl);
    host[hl] = '\0';
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, colon + 1, &hints, &res) != 0) return false;
    for (struct addrinfo *ai = res; ai != NULL && !ok; ai = ai->ai_next) {
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            ok = true;
        } else if (errno == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int e = 0;
            socklen_t el = sizeof e;
            ok = poll(&p, 1, SEC_PROBE_MS) == 1 &&
                 getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e == 0;
        }
        close(fd);
    }
    freeaddrinfo(res);
    return ok;
}

void td__client_sec_handshake_msg(const char *target, char *err, size_t errlen)
{
    snprintf(err, errlen,
             "TLS handshake with %s failed: wrong CA, missing or rejected client certificate, "
             "or plaintext vs TLS mismatch (the server's log has the reason)",
             target);
}

void td__client_sec_explain(const td__client_sec *s, const char *target, char *err,
                            size_t errlen)
{
    if (!tcp_answers(target)) return;
    if (s->tls)
        td__client_sec_handshake_msg(target, err, errlen);
    else
        snprintf(err, errlen,
                 "connection to %s failed after it was accepted: the server probably requires "
                 "TLS (use tensords://%s with a CA file), refused this client, or is not a "
                 "gRPC server at all (another program on that port)",
                 target, target);
}
