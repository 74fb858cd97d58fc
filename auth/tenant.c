/* tenant.c — tenants, their quotas, and the identity table (see tenant.h).
 *
 * The identity table is swapped whole on reload under a write lock, so a lookup sees
 * either the old file or the new one, never a mix. Quota objects live in a separate,
 * append-only registry keyed by tenant name, which is why they can be borrowed by sessions
 * without reference counts.
 */
#include "auth/tenant.h"
#include "auth/tokens.h"
#include "common/alloc.h"

#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

struct td__tenants {
    char *path; /* NULL: authentication off */
    pthread_rwlock_t lock; /* guards entries, n_entries */
    td__token_entry *entries;
    size_t n_entries;
    pthread_mutex_t reg_mu; /* guards quotas, n_quotas */
    td__quota **quotas;
    size_t n_quotas, cap_quotas;
};

/* The quota of tenant `name`, created on first use. NULL when out of memory. */
static td__quota *quota_get(td__tenants *t, const char *name)
{
    td__quota *q = NULL;
    pthread_mutex_lock(&t->reg_mu);
    for (size_t i = 0; i < t->n_quotas && q == NULL; i++)
        if (strcmp(t->quotas[i]->name, name) == 0) q = t->quotas[i];
    if (q == NULL) {
        if (t->n_quotas == t->cap_quotas) {
            size_t ncap = t->cap_quotas ? t->cap_quotas * 2 : 8;
            td__quota **nv = td__realloc(t->quotas, ncap * sizeof *nv);
            if (nv == NULL) goto out;
            t->quotas = nv;
            t->cap_quotas = ncap;
        }
        q = td__malloc(sizeof *q);
        if (q == NULL) goto out;
        td__quota_init(q, name);
        t->quotas[t->n_quotas++] = q;
    }
out:
    pthread_mutex_unlock(&t->reg_mu);
    return q;
}

/* Limits of every tenant named in entries, from their lines (last setting wins). */
static td_status apply_limits(td__tenants *t, const td__token_entry *v, size_t n, char *err,
                              size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        bool first = true;
        for (size_t k = 0; k < i; k++)
            if (strcmp(v[k].tenant, v[i].tenant) == 0) first = false;
        if (!first) continue;
        td__quota_limits lim = {0};
        uint64_t *dst = (uint64_t *)&lim;
        for (size_t k = i; k < n; k++) {
            if (strcmp(v[k].tenant, v[i].tenant) != 0) continue;
            const uint64_t *src = (const uint64_t *)&v[k].limits;
            for (unsigned f = 0; f < sizeof lim / sizeof(uint64_t); f++)
                if (v[k].limits_set & (1u << f)) dst[f] = src[f];
        }
        td__quota *q = quota_get(t, v[i].tenant);
        if (q == NULL) {
            snprintf(err, errlen, "out of memory for tenant '%s'", v[i].tenant);
            return TD_ENOMEM;
        }
        td__quota_set_limits(q, &lim);
    }
    return TD_OK;
}

td_status td__tenants_create(const char *tokens_path, td__tenants **out, char *err,
                             size_t errlen)
{
    td__tenants *t = td__calloc(1, sizeof *t);
    if (t == NULL) {
        snprintf(err, errlen, "out of memory");
        return TD_ENOMEM;
    }
    pthread_rwlock_init(&t->lock, NULL);
    pthread_mutex_init(&t->reg_mu, NULL);
    td_status st = TD_OK;
    if (quota_get(t, TD_DEFAULT_TENANT) == NULL) {
        snprintf(err, errlen, "out of memory");
        st = TD_ENOMEM;
    }
    if (st == TD_OK && tokens_path != NULL) {
        t->path = td__strdup(tokens_path);
        if (t->path == NULL) {
            snprintf(err, errlen, "out of memory");
            st = TD_ENOMEM;
        }
        size_t n;
        if (st == TD_OK) st = td__tenants_reload(t, &n, err, errlen);
    }
    if (st != TD_OK) {
        td__tenants_destroy(t);
        return st;
    }
    *out = t;
    return TD_OK;
}

void td__tenants_destroy(td__tenants *t)
{
    if (t == NULL) return;
    for (size_t i = 0; i < t->n_quotas; i++) td__free(t->quotas[i]);
    td__free(t->quotas);
    td__free(t->entries);
    td__free(t->path);
    pthread_rwlock_destroy(&t->lock);
    pthread_mutex_destroy(&t->reg_mu);
    td__free(t);
}

bool td__tenants_enabled(const td__tenants *t) { return t != NULL && t->path != NULL; }

td_status td__tenants_reload(td__tenants *t, size_t *n_entries, char *err, size_t errlen)
{
    if (t->path == NULL) {
        *n_entries = 0;
        return TD_OK;
    }
    td__token_entry *v;
    size_t n;
    td_status st = td__tokens_load(t->path, &v, &n, err, errlen);
    if (st != TD_OK) return st;
    st = apply_limits(t, v, n, err, errlen);
    if (st != TD_OK) {
        td__free(v);
        return st;
    }
    pthread_rwlock_wrlock(&t->lock);
    td__token_entry *old = t->entries;
    t->entries = v;
    t->n_entries = n;
    pthread_rwlock_unlock(&t->lock);
    td__free(old);
    *n_entries = n;
    return TD_OK;
}

td_status td__tenants_authenticate(td__tenants *t, const char *token, size_t token_len,
                                   const char *cn, td__quota **out, char *err, size_t errlen)
{
    char tenant[TD_TENANT_NAME_MAX] = "";
    if (!td__tenants_enabled(t)) {
        const char *name = cn != NULL && td__tenant_name_ok(cn) ? cn : TD_DEFAULT_TENANT;
        td__quota *q = quota_get(t, name);
        if (q == NULL) {
            snprintf(err, errlen, "out of memory");
            return TD_ENOMEM;
        }
        *out = q;
        return TD_OK;
    }
    uint8_t h[32];
    if (token != NULL) td__token_hash(token, token_len, h);
    pthread_rwlock_rdlock(&t->lock);
    if (token != NULL) {
        /* Every entry is compared, match or not, so timing says nothing about the table. */
        size_t found = SIZE_MAX;
        for (size_t i = 0; i < t->n_entries; i++) {
            const td__token_entry *e = &t->entries[i];
            if (e->kind == TD_IDENT_TOKEN && CRYPTO_memcmp(e->hash, h, 32) == 0 &&
                found == SIZE_MAX)
                found = i;
        }
        if (found != SIZE_MAX) memcpy(tenant, t->entries[found].tenant, sizeof tenant);
    } else if (cn != NULL) {
        for (size_t i = 0; i < t->n_entries && tenant[0] == '\0'; i++) {
            const td__token_entry *e = &t->entries[i];
            if (e->kind == TD_IDENT_CN && strcmp(e->cn, cn) == 0)
                memcpy(tenant, e->tenant, sizeof tenant);
        }
    }
    pthread_rwlock_unlock(&t->lock);
    if (tenant[0] == '\0') {
        if (token != NULL)
            snprintf(err, errlen, "unknown or revoked bearer token");
        else if (cn != NULL)
            snprintf(err, errlen,
                     "client certificate '%.100s' is not in this server's tokens file, and no "
                     "bearer token was sent",
                     cn);
        else
            snprintf(err, errlen,
                     "this server requires authentication: send 'authorization: Bearer TOKEN' "
                     "(td_options.token, $TENSORD_TOKEN, tensorctl --token) or a client "
                     "certificate listed in its tokens file");
        return TD_EUNAUTHENTICATED;
    }
    td__quota *q = quota_get(t, tenant);
    if (q == NULL) {
        snprintf(err, errlen, "out of memory");
        return TD_ENOMEM;
    }
    *out = q;
    return TD_OK;
}

void td__identity_of(const char *token, size_t token_len, const char *cn, td__identity *id)
{
    memset(id, 0, sizeof *id);
    if (token != NULL) {
        id->kind = TD_IDENTITY_TOKEN;
        td__token_hash(token, token_len, id->hash);
    } else if (cn != NULL) {
        id->kind = TD_IDENTITY_CN;
        snprintf(id->cn, sizeof id->cn, "%s", cn);
    }
}

bool td__tenants_still_grants(td__tenants *t, const td__identity *id, const td__quota *q)
{
    if (!td__tenants_enabled(t)) return true;
    bool ok = false;
    pthread_rwlock_rdlock(&t->lock);
    for (size_t i = 0; i < t->n_entries && !ok; i++) {
        const td__token_entry *e = &t->entries[i];
        if (strcmp(e->tenant, q->name) != 0) continue;
        if (id->kind == TD_IDENTITY_TOKEN)
            ok = e->kind == TD_IDENT_TOKEN && CRYPTO_memcmp(e->hash, id->hash, 32) == 0;
        else if (id->kind == TD_IDENTITY_CN)
            ok = e->kind == TD_IDENT_CN && strcmp(e->cn, id->cn) == 0;
    }
    pthread_rwlock_unlock(&t->lock);
    return ok;
}

bool td__tenants_is_admin(td__tenants *t, const td__quota *q)
{
    if (!td__tenants_enabled(t)) return false;
    bool admin = false;
    pthread_rwlock_rdlock(&t->lock);
    for (size_t i = 0; i < t->n_entries && !admin; i++)
        admin = t->entries[i].admin && strcmp(t->entries[i].tenant, q->name) == 0;
    pthread_rwlock_unlock(&t->lock);
    return admin;
}

bool td__tenants_devices(td__tenants *t, const td__quota *q, char *out, size_t outlen)
{
    if (outlen > 0) out[0] = '\0';
    if (!td__tenants_enabled(t) || q == NULL) return false;
    bool set = false;
    pthread_rwlock_rdlock(&t->lock);
    for (size_t i = 0; i < t->n_entries; i++) {
        const td__token_entry *e = &t->entries[i];
        if (e->devices[0] == '\0' || strcmp(e->tenant, q->name) != 0) continue;
        snprintf(out, outlen, "%s", e->devices); /* the last line wins */
        set = true;
    }
    pthread_rwlock_unlock(&t->lock);
    return set;
}

void td__tenants_foreach(td__tenants *t, void (*fn)(void *arg, const td__quota *q), void *arg)
{
    pthread_mutex_lock(&t->reg_mu);
    for (size_t i = 0; i < t->n_quotas; i++) fn(arg, t->quotas[i]);
    pthread_mutex_unlock(&t->reg_mu);
}
