/* tls.c — start-up checks of the server's TLS files (see tls.h). */
#include "auth/tls.h"
#include "common/alloc.h"

#include <errno.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <string.h>

#define TLS_FILE_MAX ((long)1 << 20)

/* The whole file as a NUL-terminated string. */
static td_status read_text(const char *path, char **out, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        return TD_EIO;
    }
    char *buf = td__malloc((size_t)TLS_FILE_MAX + 1);
    size_t n = buf != NULL ? fread(buf, 1, (size_t)TLS_FILE_MAX + 1, f) : 0;
    bool bad = ferror(f) != 0;
    fclose(f);
    if (buf == NULL || bad || n > (size_t)TLS_FILE_MAX || n == 0) {
        snprintf(err, errlen, "%s: %s", path,
                 buf == NULL ? "out of memory"
                 : bad       ? "read error"
                 : n == 0    ? "file is empty"
                             : "larger than 1 MiB, not a PEM file");
        if (buf != NULL) OPENSSL_cleanse(buf, n > (size_t)TLS_FILE_MAX ? (size_t)TLS_FILE_MAX : n);
        td__free(buf);
        return buf == NULL ? TD_ENOMEM : bad ? TD_EIO : TD_EINVAL;
    }
    buf[n] = '\0';
    *out = buf;
    return TD_OK;
}

static const char *ssl_reason(void)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e != 0 ? ERR_reason_error_string(e) : NULL;
    return r != NULL ? r : "not PEM";
}

static void free_secret(char *p)
{
    if (p == NULL) return;
    OPENSSL_cleanse(p, strlen(p));
    td__free(p);
}

/* pem_password_cb that gives no passphrase (an encrypted key then fails to load). */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf;
    (void)size;
    (void)rwflag;
    (void)u;
    return -1;
}

td_status td__tls_files_load(const char *cert, const char *key, const char *client_ca,
                             td__tls_files *out, char *err, size_t errlen)
{
    td__tls_files f;
    memset(&f, 0, sizeof f);
    X509 *x = NULL;
    EVP_PKEY *pk = NULL;
    BIO *b = NULL;
    td_status st = read_text(cert, &f.cert_pem, err, errlen);
    if (st == TD_OK) st = read_text(key, &f.key_pem, err, errlen);
    if (st == TD_OK && client_ca != NULL) st = read_text(client_ca, &f.client_ca_pem, err, errlen);
    if (st != TD_OK) goto done;
    ERR_clear_error();
    b = BIO_new_mem_buf(f.cert_pem, -1);
    x = b != NULL ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    if (x == NULL) {
        snprintf(err, errlen, "%s: not a PEM certificate (%s)", cert, ssl_reason());
        st = TD_EINVAL;
        goto done;
    }
    ERR_clear_error();
    b = BIO_new_mem_buf(f.key_pem, -1);
    /* no_passphrase: OpenSSL's default would prompt on the terminal and block a service */
    pk = b != NULL ? PEM_read_bio_PrivateKey(b, NULL, no_passphrase, NULL) : NULL;
    BIO_free(b);
    if (pk == NULL && strstr(f.key_pem, "ENCRYPTED") != NULL) {
        snprintf(err, errlen, "%s: the private key is encrypted (passphrase-protected); tensord "
                 "needs it unencrypted (`openssl pkey -in KEY -out PLAIN` writes one; keep it "
                 "readable by tensord only)", key);
        st = TD_EINVAL;
        goto done;
    }
    if (pk == NULL) {
        snprintf(err, errlen, "%s: not an unencrypted PEM private key (%s)", key, ssl_reason());
        st = TD_EINVAL;
        goto done;
    }
    if (X509_check_private_key(x, pk) != 1) {
        snprintf(err, errlen, "%s: this private key does not match the certificate in %s", key,
                 cert);
        st = TD_EINVAL;
        goto done;
    }
    if (X509_cmp_current_time(X509_get0_notAfter(x)) <= 0) {
        snprintf(err, errlen, "%s: certificate has expired", cert);
        st = TD_EINVAL;
        goto done;
    }
    if (X509_cmp_current_time(X509_get0_notBefore(x)) >= 0) {
        snprintf(err, errlen, "%s: certificate is not valid yet", cert);
        st = TD_EINVAL;
        goto done;
    }
    X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, f.subject_cn,
                              sizeof f.subject_cn);
    if (f.client_ca_pem != NULL) {
        ERR_clear_error();
        b = BIO_new_mem_buf(f.client_ca_pem, -1);
        X509 *ca = b != NULL ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
        BIO_free(b);
        if (ca == NULL) {
            snprintf(err, errlen, "%s: no PEM CA certificate in it (%s)", client_ca,
                     ssl_reason());
            st = TD_EINVAL;
            goto done;
        }
        X509_free(ca);
    }
done:
    X509_free(x);
    EVP_PKEY_free(pk);
    ERR_clear_error();
    if (st != TD_OK) {
        td__tls_files_fini(&f);
        return st;
    }
    *out = f;
    return TD_OK;
}

void td__tls_files_fini(td__tls_files *f)
{
    td__free(f->cert_pem);
    free_secret(f->key_pem);
    td__free(f->client_ca_pem);
    memset(f, 0, sizeof *f);
}
