/* tenant.h — who is calling: bearer tokens and certificate names mapped to tenants.
 *
 * A td__tenants holds the parsed tokens file and one td__quota per tenant name. Quotas are
 * never freed before td__tenants_destroy, so sessions may keep a borrowed td__quota* for
 * their whole life, across reloads (a reload updates limits in place; a tenant dropped
 * from the file keeps its running sessions but gets no new calls).
 *
 * Without a tokens file authentication is off: every caller is tenant "default" (no
 * quotas), except a verified TLS client certificate, whose common name is then the tenant
 * (when it is a valid tenant name), so that mTLS alone already separates tenants.
 * Thread-safety: every function is safe from any thread; reload excludes lookups briefly.
 */
#ifndef TD_AUTH_TENANT_H
#define TD_AUTH_TENANT_H

#include "engine/quota.h"

#include <stdbool.h>
#include <stddef.h>

#define TD_DEFAULT_TENANT "default"

typedef struct td__tenants td__tenants;

/* tokens_path NULL: authentication off. Otherwise loads the file (errors as
 * td__tokens_load). On success *out is a new registry. */
td_status td__tenants_create(const char *tokens_path, td__tenants **out, char *err,
                             size_t errlen);
/* NULL is a no-op. No session may still use one of its quotas. */
void td__tenants_destroy(td__tenants *t);
/* Whether a tokens file is configured (every call must then authenticate). */
bool td__tenants_enabled(const td__tenants *t);
/* Re-read the tokens file. On failure the previous table stays in force and err says why.
 * *n_entries receives the number of entries loaded. */
td_status td__tenants_reload(td__tenants *t, size_t *n_entries, char *err, size_t errlen);

/* Map a caller to its tenant's quota. `token` is the bearer token sent (NULL if none);
 * `cn` the common name of a client certificate that TLS verified (NULL if none). A token,
 * when sent, decides alone. Returns TD_OK with *out borrowed (valid until destroy), or
 * TD_EUNAUTHENTICATED with a message for the client. Hashes are compared in constant
 * time, against every entry. */
td_status td__tenants_authenticate(td__tenants *t, const char *token, size_t token_len,
                                   const char *cn, td__quota **out, char *err, size_t errlen);

/* What a caller authenticated with, as td__tenants_authenticate decided: the token's hash
 * when a token was sent, else the certificate name, else nothing. Holds no secret. */
enum td__identity_kind { TD_IDENTITY_NONE, TD_IDENTITY_TOKEN, TD_IDENTITY_CN };
typedef struct td__identity {
    enum td__identity_kind kind;
    unsigned char hash[32]; /* SHA-256 of the token (TD_IDENTITY_TOKEN) */
    char cn[256];           /* the certificate's common name (TD_IDENTITY_CN) */
} td__identity;

/* Fill *id for a caller that sent `token` (NULL if none) and certificate name `cn` (NULL
 * if none); names longer than the field are cut (they never match a tokens-file line). */
void td__identity_of(const char *token, size_t token_len, const char *cn, td__identity *id);

/* The device allow-list of tenant `q` (devices= in the tokens file, auth/tokens.h): true
 * with the list copied into out[outlen] (comma-separated entries for
 * td__device_list_match), or false with out "" when the tenant may use every device (no
 * tokens file, or no devices= for it). Any thread. */
bool td__tenants_devices(td__tenants *t, const td__quota *q, char *out, size_t outlen);

/* Whether tenant `q` has role=admin in the table in force (false without a tokens file:
 * the admin methods then answer nobody). */
bool td__tenants_is_admin(td__tenants *t, const td__quota *q);

/* Call fn(arg, q) for every tenant's quota known so far (those of the tokens file, and
 * "default" or certificate names once seen), in creation order, under the registry's lock:
 * fn must not call back into t. For the metrics scrape. */
void td__tenants_foreach(td__tenants *t, void (*fn)(void *arg, const td__quota *q), void *arg);

/* Whether the table in force still maps `id` to tenant `q` (true when authentication is
 * off: nothing can be revoked then). For ending sessions whose token was removed. */
bool td__tenants_still_grants(td__tenants *t, const td__identity *id, const td__quota *q);
#endif
