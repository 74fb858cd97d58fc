/* tokens.h — the tokens file: who may call tensord and as which tenant.
 *
 * Format (one entry per line; blank lines and lines starting with '#' are ignored):
 *
 *     IDENTITY TENANT [QUOTA=VALUE ...] [role=admin] [label=TEXT] [created=TIME]
 *
 *   IDENTITY  sha256:HEX   SHA-256 (64 lowercase hex digits) of a bearer token
 *             cn:NAME      a TLS client certificate whose subject common name is NAME
 *                          (needs --tls-client-ca, so that the certificate was verified)
 *   TENANT    1..63 characters from [A-Za-z0-9._-]
 *   QUOTA     max_bytes, max_sessions, max_tensors, max_tensor_bytes, max_queued_batches;
 *             VALUE is a non-negative integer, byte quotas also take K, M, G, T (powers of
 *             1024); 0 means no limit.
 *   role=admin  the tenant may call the admin methods (ListSessions, KillSession: every
 *             tenant's sessions); a tenant is admin when any of its lines says so
 *   label=TEXT  what the entry is for, 1..64 characters of [A-Za-z0-9._:@/+-] (tensorctl
 *             token new --label; shown by token list, named by token revoke)
 *   created=TIME when `tensorctl token new` made it, YYYY-MM-DDTHH:MM:SSZ (UTC)
 *   devices=LIST the devices the tenant's sessions may use: comma-separated distinct
 *             entries, each a device name ("cpu:1", "cuda:0") or a kind alone ("cpu",
 *             "cuda": every device of that kind), the kind one of cpu, cuda, hip, vulkan
 *             ("auto" is no device), at most TD_TOKEN_DEVICES_MAX_ENTRIES; absent: every
 *             device the server exposes. Anything else is an error of the file. A
 *             well-formed name that this host lacks ("cuda:3" on a CPU host) is not: one
 *             tokens file is shared by the servers of a pool, whose devices differ; tensord
 *             logs a warning for it at start and at each reload (--check-config, which
 *             opens no device, checks the syntax only). Like quotas it belongs to the
 *             tenant (the last line of the tenant that sets it wins). A session asking for
 *             another device is refused with PERMISSION_DENIED naming the device and the
 *             list; "auto", "cuda" and "" place it among the allowed devices only.
 *
 * Quotas belong to the tenant, not to the line: all of a tenant's tokens and certificates
 * share one quota, and when several lines of a tenant set the same quota the last one
 * wins. The file never holds a token itself, only its hash: `tensorctl token new` prints
 * a new token once and appends its line.
 *
 * Tokens are "tdt_" followed by 64 hex digits (32 random bytes).
 * Thread-safety: the functions have no shared state.
 */
#ifndef TD_AUTH_TOKENS_H
#define TD_AUTH_TOKENS_H

#include "engine/quota.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TD_TOKEN_PREFIX "tdt_"
#define TD_TOKEN_LEN (4 + 64)
#define TD_CN_MAX 256
#define TD_TOKEN_LABEL_MAX 64
#define TD_TOKEN_DEVICES_MAX 128 /* devices= value, terminator included */
#define TD_TOKEN_DEVICES_MAX_ENTRIES 16

enum td__ident_kind { TD_IDENT_TOKEN, TD_IDENT_CN };

typedef struct td__token_entry {
    enum td__ident_kind kind;
    uint8_t hash[32];       /* TD_IDENT_TOKEN */
    char cn[TD_CN_MAX];     /* TD_IDENT_CN */
    char tenant[TD_TENANT_NAME_MAX];
    td__quota_limits limits; /* the quotas set on this line */
    unsigned limits_set;     /* bit i: field i of td__quota_limits was set on this line */
    bool admin;              /* role=admin */
    char label[TD_TOKEN_LABEL_MAX + 1];
    char created[21];        /* "YYYY-MM-DDTHH:MM:SSZ", "" when absent */
    char devices[TD_TOKEN_DEVICES_MAX]; /* devices=, "" when absent */
} td__token_entry;

/* Parse a tokens file. On success *out is a td__malloc'ed array of *n entries (free with
 * td__free). Errors: TD_EIO (cannot read; "FILE: reason"), TD_EINVAL ("FILE:LINE: what"). */
td_status td__tokens_load(const char *path, td__token_entry **out, size_t *n, char *err,
                          size_t errlen);

/* Parse one entry line (no comment, no newline; modified in place: split at blanks) into
 * *e. Returns 0, or -1 with a message. */
int td__token_line_parse(char *line, td__token_entry *e, char *err, size_t errlen);

/* SHA-256 of `token` (its bytes, without terminator). */
void td__token_hash(const char *token, size_t len, uint8_t out[32]);

/* A new random token (RAND_bytes) into buf[TD_TOKEN_LEN + 1]. TD_OK or TD_EINTERNAL. */
td_status td__token_new(char buf[TD_TOKEN_LEN + 1]);

/* Whether name is a valid tenant name. */
bool td__tenant_name_ok(const char *name);

/* Whether `list` is a valid devices= value (see the format above). */
bool td__token_devices_ok(const char *list);

/* Whether `label` is a valid label= value. */
bool td__token_label_ok(const char *label);

/* Parse "KEY=VALUE" into lim/limits_set. Returns 0, or -1 with a message. */
int td__quota_kv_parse(const char *kv, td__quota_limits *lim, unsigned *set, char *err,
                       size_t errlen);
#endif
