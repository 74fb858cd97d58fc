/* tokens.c — tokens-file parsing, token hashing and generation (see tokens.h).
 *
 * The file holds hashes only, so a leaked file (backups, a world-readable /etc) gives no
 * one access; a token has 256 random bits, so a fast unsalted hash is enough (there is
 * nothing to brute-force, unlike a password). Parsing is strict and line-numbered: a typo
 * in a quota must not silently leave a tenant unlimited.
 */
#include "auth/tokens.h"
#include "common/alloc.h"
#include "common/sha256.h"

#include <ctype.h>
#include <errno.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKENS_LINE_MAX 2048

void td__token_hash(const char *token, size_t len, uint8_t out[32])
{
    if (!td__sha256(token, len, out)) memset(out, 0, 32);
}

td_status td__token_new(char buf[TD_TOKEN_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[32];
    if (RAND_bytes(raw, sizeof raw) != 1) return TD_EINTERNAL;
    memcpy(buf, TD_TOKEN_PREFIX, 4);
    for (size_t i = 0; i < 32; i++) {
        buf[4 + 2 * i] = hex[raw[i] >> 4];
        buf[5 + 2 * i] = hex[raw[i] & 15];
    }
    buf[TD_TOKEN_LEN] = '\0';
    return TD_OK;
}

bool td__tenant_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n >= TD_TENANT_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (!isalnum(c) && c != '.' && c != '_' && c != '-') return false;
    }
    return true;
}

bool td__token_label_ok(const char *label)
{
    size_t n = strlen(label);
    if (n == 0 || n > TD_TOKEN_LABEL_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)label[i];
        if (!isalnum(c) && strchr("._:@/+-", c) == NULL) return false;
    }
    return true;
}

/* "YYYY-MM-DDTHH:MM:SSZ" with digits where digits go (the shape, not the calendar). */
static bool created_ok(const char *t)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:ddZ";
    if (strlen(t) != sizeof shape - 1) return false;
    for (size_t i = 0; t[i] != '\0'; i++)
        if (shape[i] == 'd' ? !isdigit((unsigned char)t[i]) : t[i] != shape[i]) return false;
    return true;
}

static int parse_count(const char *text, bool bytes, uint64_t *out)
{
    if (!isdigit((unsigned char)text[0])) return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0) return -1;
    unsigned shift = 0;
    if (*end != '\0') {
        if (!bytes) return -1;
        switch (toupper((unsigned char)*end)) {
        case 'K': shift = 10; break;
        case 'M': shift = 20; break;
        case 'G': shift = 30; break;
        case 'T': shift = 40; break;
        default: return -1;
        }
        end++;
        if (*end == 'i' || *end == 'I') end++;
        if (*end == 'b' || *end == 'B') end++;
        if (*end != '\0') return -1;
    }
    if (shift != 0 && v > (UINT64_MAX >> shift)) return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

int td__quota_kv_parse(const char *kv, td__quota_limits *lim, unsigned *set, char *err,
                       size_t errlen)
{
    static const struct {
        const char *key;
        size_t off;
        bool bytes;
    } keys[] = {
        {"max_bytes", offsetof(td__quota_limits, max_bytes), true},
        {"max_sessions", offsetof(td__quota_limits, max_sessions), false},
        {"max_tensors", offsetof(td__quota_limits, max_tensors), false},
        {"max_tensor_bytes", offsetof(td__quota_limits, max_tensor_bytes), true},
        {"max_queued_batches", offsetof(td__quota_limits, max_queued_batches), false},
    };
    const char *eq = strchr(kv, '=');
    if (eq == NULL) {
        snprintf(err, errlen, "expected QUOTA=VALUE, got '%.64s'", kv);
        return -1;
    }
    size_t kl = (size_t)(eq - kv);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (strlen(keys[i].key) != kl || strncmp(kv, keys[i].key, kl) != 0) continue;
        uint64_t v;
        if (parse_count(eq + 1, keys[i].bytes, &v) != 0) {
            snprintf(err, errlen, "%s: '%.64s' is not a %s", keys[i].key, eq + 1,
                     keys[i].bytes ? "byte count (e.g. 1048576, 512M, 4G)"
                                   : "non-negative integer");
            return -1;
        }
        memcpy((char *)lim + keys[i].off, &v, sizeof v);
        *set |= 1u << (keys[i].off / sizeof(uint64_t));
        return 0;
    }
    snprintf(err, errlen,
             "unknown quota '%.*s' (known: max_bytes, max_sessions, max_tensors, "
             "max_tensor_bytes, max_queued_batches)",
             (int)(kl > 64 ? 64 : kl), kv);
    return -1;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int td__token_line_parse(char *line, td__token_entry *e, char *err, size_t errlen)
{
    memset(e, 0, sizeof *e);
    char *save = NULL;
    char *ident = strtok_r(line, " \t", &save);
    char *tenant = strtok_r(NULL, " \t", &save);
    if (ident == NULL || tenant == NULL) {
        snprintf(err, errlen, "expected 'sha256:HEX TENANT [QUOTA=VALUE ...]' or "
                              "'cn:NAME TENANT [QUOTA=VALUE ...]'");
        return -1;
    }
    if (strncmp(ident, "sha256:", 7) == 0) {
        const char *h = ident + 7;
        if (strlen(h) != 64) {
            snprintf(err, errlen, "sha256: needs 64 hex digits, got %zu characters", strlen(h));
            return -1;
        }
        for (size_t i = 0; i < 32; i++) {
            int hi = hexval(h[2 * i]), lo = hexval(h[2 * i + 1]);
            if (hi < 0 || lo < 0) {
                snprintf(err, errlen, "sha256: '%c%c' is not hex", h[2 * i], h[2 * i + 1]);
                return -1;
            }
            e->hash[i] = (uint8_t)(hi << 4 | lo);
        }
        e->kind = TD_IDENT_TOKEN;
    } else if (strncmp(ident, "cn:", 3) == 0) {
        if (ident[3] == '\0' || strlen(ident + 3) >= TD_CN_MAX) {
            snprintf(err, errlen, "cn: needs a common name of 1..%d characters", TD_CN_MAX - 1);
            return -1;
        }
        snprintf(e->cn, sizeof e->cn, "%s", ident + 3);
        e->kind = TD_IDENT_CN;
    } else {
        snprintf(err, errlen, "identity '%.40s' must start with sha256: or cn:", ident);
        return -1;
    }
    if (!td__tenant_name_ok(tenant)) {
        snprintf(err, errlen, "tenant '%.80s' must be 1..%d characters of A-Z a-z 0-9 . _ -",
                 tenant, TD_TENANT_NAME_MAX - 1);
        return -1;
    }
    snprintf(e->tenant, sizeof e->tenant, "%s", tenant);
    for (char *kv; (kv = strtok_r(NULL, " \t", &save)) != NULL;) {
        if (strncmp(kv, "role=", 5) == 0) {
            if (strcmp(kv + 5, "admin") != 0) {
                snprintf(err, errlen, "role: '%.40s' is not a role (the one role is admin)",
                         kv + 5);
                return -1;
            }
            e->admin = true;
        } else if (strncmp(kv, "label=", 6) == 0) {
            if (!td__token_label_ok(kv + 6)) {
                snprintf(err, errlen,
                         "label: '%.80s' must be 1..%d characters of A-Z a-z 0-9 . _ : @ / + -",
                         kv + 6, TD_TOKEN_LABEL_MAX);
                return -1;
            }
            snprintf(e->label, sizeof e->label, "%s", kv + 6);
        } else if (strncmp(kv, "created=", 8) == 0) {
            if (!created_ok(kv + 8)) {
                snprintf(err, errlen, "created: '%.40s' is not YYYY-MM-DDTHH:MM:SSZ", kv + 8);
                return -1;
            }
            snprintf(e->created, sizeof e->created, "%s", kv + 8);
        } else if (strncmp(kv, "devices=", 8) == 0) {
            if (!td__token_devices_ok(kv + 8)) {
                snprintf(err, errlen,
                         "devices: '%.80s' must be a comma-separated list of 1..%d distinct "
                         "device names or kinds (cpu, cpu:1, cuda, cuda:0, hip, vulkan), %d "
                         "characters at most",
                         kv + 8, TD_TOKEN_DEVICES_MAX_ENTRIES, TD_TOKEN_DEVICES_MAX - 1);
                return -1;
            }
            snprintf(e->devices, sizeof e->devices, "%s", kv + 8);
        } else if (td__quota_kv_parse(kv, &e->limits, &e->limits_set, err, errlen) != 0) {
            return -1;
        }
    }
    return 0;
}

bool td__token_devices_ok(const char *list)
{
    /* the device kinds a tensord can have (engine/device.h; "auto" is a placement request,
     * not a device, and matches none) */
    static const char *const kinds[] = {"cpu", "cuda", "hip", "vulkan"};
    size_t len = strlen(list);
    if (len == 0 || len >= TD_TOKEN_DEVICES_MAX) return false;
    int entries = 0;
    const char *p = list;
    while (*p != '\0') {
        /* one entry: KIND or KIND:INDEX, KIND one of kinds[], INDEX decimal digits without
         * a leading zero; each entry once */
        const char *start = p;
        size_t kind = 0, idx = 0;
        while (p[kind] >= 'a' && p[kind] <= 'z') kind++;
        bool known = false;
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
            known = known || (strlen(kinds[k]) == kind && strncmp(p, kinds[k], kind) == 0);
        if (!known) return false;
        p += kind;
        if (*p == ':') {
            p++;
            while (p[idx] >= '0' && p[idx] <= '9') idx++;
            if (idx == 0 || idx > 3 || (idx > 1 && p[0] == '0')) return false;
            p += idx;
        }
        size_t el = (size_t)(p - start);
        for (const char *q = list; q < start;) { /* an earlier equal entry */
            size_t ql = strcspn(q, ",");
            if (ql == el && strncmp(q, start, el) == 0) return false;
            q += ql + 1;
        }
        if (++entries > TD_TOKEN_DEVICES_MAX_ENTRIES) return false;
        if (*p == ',') {
            p++;
            if (*p == '\0') return false;
        } else if (*p != '\0') {
            return false;
        }
    }
    return true;
}

td_status td__tokens_load(const char *path, td__token_entry **out, size_t *n, char *err,
                          size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return TD_EIO;
    }
    td__token_entry *v = NULL;
    size_t len = 0, cap = 0;
    char line[TOKENS_LINE_MAX];
    int lineno = 0;
    td_status st = TD_OK;
    while (fgets(line, sizeof line, f) != NULL) {
        lineno++;
        size_t ll = strlen(line);
        if (ll == sizeof line - 1 && line[ll - 1] != '\n' && !feof(f)) {
            snprintf(err, errlen, "%s:%d: line longer than %d bytes", path, lineno,
                     TOKENS_LINE_MAX - 2);
            st = TD_EINVAL;
            break;
        }
        while (ll > 0 && isspace((unsigned char)line[ll - 1])) line[--ll] = '\0';
        char *s = line;
        while (isspace((unsigned char)*s)) s++;
        if (*s == '\0' || *s == '#') continue;
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            td__token_entry *nv = td__realloc(v, ncap * sizeof *nv);
            if (nv == NULL) {
                snprintf(err, errlen, "%s: out of memory", path);
                st = TD_ENOMEM;
                break;
            }
            v = nv;
            cap = ncap;
        }
        char why[256];
        if (td__token_line_parse(s, &v[len], why, sizeof why) != 0) {
            snprintf(err, errlen, "%s:%d: %s", path, lineno, why);
            st = TD_EINVAL;
            break;
        }
        len++;
    }
    if (st == TD_OK && ferror(f)) {
        snprintf(err, errlen, "%s: read error", path);
        st = TD_EIO;
    }
    fclose(f);
    if (st != TD_OK) {
        td__free(v);
        return st;
    }
    *out = v;
    *n = len;
    return TD_OK;
}
