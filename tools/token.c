/* token.c — `tensorctl token new|list|revoke`: the tokens file, offline.
 *
 * new: a token is printed once on stdout and never stored: the tokens file receives
 * "sha256:HEX TENANT [QUOTA=N ...] [role=admin] [label=TEXT] created=TIME" (format in
 * auth/tokens.h), appended with O_APPEND so a concurrent writer cannot interleave half a
 * line, and created 0600 when missing (--mode changes that, e.g. 0640 for a group the
 * service runs in). Quotas belong to the tenant, shared by all its lines, so a new token
 * of an existing tenant that would change one is refused unless --update-quotas says so
 * (an operator adding a laptop's token must not silently shrink a team's 8G to 1G).
 * list: every entry, without secrets (hash prefixes only).
 * revoke: the file is rewritten without the matching entries (a temporary file in the
 * same directory, same mode, renamed over it), comments and other lines kept as they were.
 * The server picks changes up on SIGHUP (and then ends the revoked tokens' sessions).
 */
#include "auth/tokens.h"
#include "common/alloc.h"
#include "common/sha256.h"
#include "tools/argv_opt.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int td__tensorctl_token(int argc, char **argv);

static const char usage_token[] =
    "usage: tensorctl token new --tenant NAME --tokens-file FILE [--label TEXT] [--admin]\n"
    "                           [--max-bytes N] [--max-sessions N] [--max-tensors N]\n"
    "                           [--max-tensor-bytes N] [--max-queued-batches N]\n"
    "                           [--devices LIST] [--update-quotas] [--mode OCTAL]\n"
    "       tensorctl token list --tokens-file FILE [--json]\n"
    "       tensorctl token revoke --tokens-file FILE (--label TEXT | --hash PREFIX |\n"
    "                              --tenant NAME)\n"
    "\n"
    "new: make a random bearer token for tenant NAME, print it once on stdout, and append\n"
    "its SHA-256 (never the token), the quotas, the label and the creation time to FILE.\n"
    "Quotas are per tenant and shared by all its tokens: for a tenant FILE already has,\n"
    "a quota that differs from the one in force is refused unless --update-quotas is\n"
    "given. --admin gives the tenant the admin role (tensorctl sessions). Byte quotas take\n"
    "K, M, G, T suffixes; 0 means no limit. A new FILE is created with mode 0600 (--mode:\n"
    "e.g. 0640 for a group tensord runs in). --devices LIST pins the tenant to those\n"
    "devices (names or kinds: cpu:1,cuda; the last line of a tenant that sets it wins).\n"
    "list: every entry: kind, hash prefix or certificate name, tenant, role, label,\n"
    "created, quotas (--json: an array of objects).\n"
    "revoke: remove the entries with that label, whose hash starts with PREFIX (at least\n"
    "8 hex digits), or of that tenant; exit 1 when none matches.\n"
    "Send SIGHUP to tensord (systemctl reload tensord) to load the change; sessions of\n"
    "revoked tokens then end.\n";

static const char *const k_quota_names[] = {"max_bytes", "max_sessions", "max_tensors",
                                            "max_tensor_bytes", "max_queued_batches"};

static int usage_fail(const char *what, const char *arg)
{
    fprintf(stderr, "tensorctl: token: %s%s%s\n%s", what, arg ? " " : "", arg ? arg : "",
            usage_token);
    return 2;
}

/* A flag given a value ("--admin=1"), in subcommand `sub` (NULL: before one). */
static int flag_given_value(const char *sub, const char *flag)
{
    char what[128];
    snprintf(what, sizeof what, "%s%soption %s takes no value", sub ? sub : "", sub ? ": " : "",
             flag);
    return usage_fail(what, NULL);
}

/* The quotas in force for `tenant` (last setting wins, as the server reads them). */
static void tenant_limits(const td__token_entry *v, size_t n, const char *tenant,
                          uint64_t lim[5], unsigned *set, bool *exists)
{
    *set = 0;
    *exists = false;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(v[i].tenant, tenant) != 0) continue;
        *exists = true;
        const uint64_t *src = (const uint64_t *)&v[i].limits;
        for (unsigned f = 0; f < 5; f++)
            if (v[i].limits_set & (1u << f)) {
                lim[f] = src[f];
                *set |= 1u << f;
            }
    }
}

static int cmd_new(int argc, char **argv)
{
    const char *tenant = NULL, *file = NULL, *label = NULL, *devices = NULL;
    bool admin = false, update = false;
    mode_t mode = 0600;
    td__quota_limits lim = {0};
    unsigned set = 0;
    for (int i = 0; i < argc; i++) {
        argv_opt opt;
        argv_opt_split(argv[i], &opt);
        const char *a = opt.name;
        if ((argv_opt_is_help(a) || strcmp(a, "--admin") == 0 ||
             strcmp(a, "--update-quotas") == 0) &&
            opt.value != NULL)
            return flag_given_value("new", a);
        if (argv_opt_is_help(a)) {
            fputs(usage_token, stdout);
            return 0;
        }
        if (strcmp(a, "--admin") == 0) {
            admin = true;
            continue;
        }
        if (strcmp(a, "--update-quotas") == 0) {
            update = true;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) return usage_fail("new: unexpected argument", a);
        const char *v = argv_opt_value(&opt, argc, argv, &i);
        if (v == NULL) return usage_fail("new: option needs a value:", a);
        if (strcmp(a, "--tenant") == 0) {
            tenant = v;
        } else if (strcmp(a, "--tokens-file") == 0) {
            file = v;
        } else if (strcmp(a, "--label") == 0) {
            if (!td__token_label_ok(v)) {
                fprintf(stderr, "tensorctl: token new: label '%s' must be 1..%d characters of "
                                "A-Z a-z 0-9 . _ : @ / + -\n",
                        v, TD_TOKEN_LABEL_MAX);
                return 2;
            }
            label = v;
        } else if (strcmp(a, "--devices") == 0) {
            if (!td__token_devices_ok(v)) {
                fprintf(stderr, "tensorctl: token new: --devices '%s' must be a comma-separated "
                                "list of 1..%d distinct device names or kinds (cpu, cpu:1, "
                                "cuda, cuda:0, hip, vulkan)\n",
                        v, TD_TOKEN_DEVICES_MAX_ENTRIES);
                return 2;
            }
            devices = v;
        } else if (strcmp(a, "--mode") == 0) {
            char *end;
            long m = strtol(v, &end, 8);
            if (*v == '\0' || *end != '\0' || m < 0 || (m & ~0640L) != 0 || (m & 0600) != 0600) {
                fprintf(stderr, "tensorctl: token new: --mode '%s': give 0600 or 0640 (owner "
                                "read-write, at most group read; never world-readable)\n",
                        v);
                return 2;
            }
            mode = (mode_t)m;
        } else if (strncmp(a, "--max-", 6) == 0) {
            char kv[128], err[256];
            int n = snprintf(kv, sizeof kv, "%s=%s", a + 2, v);
            for (char *p = kv; *p != '=' && *p; p++)
                if (*p == '-') *p = '_';
            if (n < 0 || (size_t)n >= sizeof kv ||
                td__quota_kv_parse(kv, &lim, &set, err, sizeof err) != 0) {
                fprintf(stderr, "tensorctl: token new: %s\n",
                        n < 0 || (size_t)n >= sizeof kv ? "quota value too long" : err);
                return 2;
            }
        } else {
            return usage_fail("new: unknown option", a);
        }
    }
    if (tenant == NULL || file == NULL)
        return usage_fail("new: --tenant and --tokens-file are required", NULL);
    if (!td__tenant_name_ok(tenant)) {
        fprintf(stderr,
                "tensorctl: token new: tenant '%s' must be 1..%d characters of A-Z a-z 0-9 . _ -\n",
                tenant, TD_TENANT_NAME_MAX - 1);
        return 2;
    }
    /* An existing file must parse (the server would refuse it) and must not change the
     * tenant's quotas unasked. */
    if (access(file, F_OK) == 0) {
        td__token_entry *v = NULL;
        size_t n = 0;
        char err[1024];
        if (td__tokens_load(file, &v, &n, err, sizeof err) != TD_OK) {
            fprintf(stderr, "tensorctl: token new: %s\n", err);
            return 1;
        }
        uint64_t have[5] = {0};
        unsigned have_set;
        bool exists;
        tenant_limits(v, n, tenant, have, &have_set, &exists);
        td__free(v);
        const uint64_t *want = (const uint64_t *)&lim;
        for (unsigned f = 0; exists && !update && f < 5; f++) {
            if (!(set & (1u << f))) continue;
            uint64_t cur = (have_set & (1u << f)) ? have[f] : 0;
            if (cur == want[f]) continue;
            fprintf(stderr,
                    "tensorctl: token new: tenant '%s' already has %s=%llu%s in %s; this "
                    "token would change it to %llu for all of the tenant's tokens. Pass "
                    "--update-quotas to change it, or leave the flag out to keep it\n",
                    tenant, k_quota_names[f], (unsigned long long)cur,
                    (have_set & (1u << f)) ? "" : " (no limit)", file,
                    (unsigned long long)want[f]);
            return 2;
        }
    }
    /* The quotas as the line carries them: each one given, once (a repeated --max-X: the
     * last value, as td__quota_kv_parse kept it), in k_quota_names' order. */
    char quotas[5 * 48] = "";
    size_t qlen = 0;
    for (unsigned f = 0; f < 5; f++)
        if (set & (1u << f))
            qlen += (size_t)snprintf(quotas + qlen, sizeof quotas - qlen, " %s=%llu",
                                     k_quota_names[f],
                                     (unsigned long long)((const uint64_t *)&lim)[f]);
    char token[TD_TOKEN_LEN + 1];
    if (td__token_new(token) != TD_OK) {
        fprintf(stderr, "tensorctl: token new: no random bytes from OpenSSL\n");
        return 1;
    }
    uint8_t h[32];
    char hex[TD_SHA256_HEX];
    td__token_hash(token, strlen(token), h);
    td__sha256_hex(h, hex);
    char created[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    char line[1024];
    int n = snprintf(line, sizeof line, "sha256:%s %s%s%s%s%s%s%s created=%s\n", hex, tenant,
                     quotas, admin ? " role=admin" : "", label ? " label=" : "",
                     label ? label : "", devices ? " devices=" : "", devices ? devices : "",
                     created);
    int fd = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, mode);
    if (fd < 0) {
        fprintf(stderr, "tensorctl: token new: %s: %s\n", file, strerror(errno));
        return 1;
    }
    bool ok = n > 0 && (size_t)n < sizeof line && write(fd, line, (size_t)n) == n;
    ok = close(fd) == 0 && ok;
    if (!ok) {
        fprintf(stderr, "tensorctl: token new: %s: cannot append: %s\n", file, strerror(errno));
        return 1;
    }
    printf("%s\n", token);
    fflush(stdout);
    memset(token, 0, sizeof token);
    return 0;
}

static void json_str(const char *s)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}

/* "sha256:0123abcd4567..." (the first 16 hex digits) or "cn:NAME". */
static void entry_id(const td__token_entry *e, char *out, size_t len)
{
    if (e->kind == TD_IDENT_CN) {
        snprintf(out, len, "cn:%s", e->cn);
        return;
    }
    char hex[TD_SHA256_HEX];
    td__sha256_hex(e->hash, hex);
    snprintf(out, len, "sha256:%.16s...", hex);
}

static int cmd_list(int argc, char **argv)
{
    const char *file = NULL;
    bool json = false;
    for (int i = 0; i < argc; i++) {
        argv_opt opt;
        argv_opt_split(argv[i], &opt);
        const char *a = opt.name;
        if ((argv_opt_is_help(a) || strcmp(a, "--json") == 0) && opt.value != NULL)
            return flag_given_value("list", a);
        if (argv_opt_is_help(a)) {
            fputs(usage_token, stdout);
            return 0;
        }
        if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "--tokens-file") == 0) {
            if ((file = argv_opt_value(&opt, argc, argv, &i)) == NULL)
                return usage_fail("list: option needs a value:", a);
        } else {
            return usage_fail(
                strncmp(a, "--", 2) == 0 ? "list: unknown option" : "list: unexpected argument", a);
        }
    }
    if (file == NULL) return usage_fail("list: --tokens-file is required", NULL);
    td__token_entry *v = NULL;
    size_t n = 0;
    char err[1024];
    if (td__tokens_load(file, &v, &n, err, sizeof err) != TD_OK) {
        fprintf(stderr, "tensorctl: token list: %s\n", err);
        return 1;
    }
    if (json) printf("[");
    else
        printf("%-28s %-16s %-6s %-20s %-21s %s\n", "ID", "TENANT", "ROLE", "LABEL", "CREATED",
               "QUOTAS");
    for (size_t i = 0; i < n; i++) {
        const td__token_entry *e = &v[i];
        char id[300], q[256] = "";
        size_t ql = 0;
        entry_id(e, id, sizeof id);
        const uint64_t *lim = (const uint64_t *)&e->limits;
        for (unsigned f = 0; f < 5; f++)
            if (e->limits_set & (1u << f))
                ql += (size_t)snprintf(q + ql, sizeof q - ql, json ? "%s\"%s\": %llu" : "%s%s=%llu",
                                       ql ? (json ? ", " : " ") : "", k_quota_names[f],
                                       (unsigned long long)lim[f]);
        if (json) {
            printf("%s{\"id\": ", i ? ", " : "");
            json_str(id);
            printf(", \"tenant\": ");
            json_str(e->tenant);
            printf(", \"admin\": %s, \"label\": ", e->admin ? "true" : "false");
            json_str(e->label);
            printf(", \"created\": ");
            json_str(e->created);
            printf(", \"devices\": ");
            json_str(e->devices);
            printf(", \"quotas\": {%s}}", q);
        } else {
            printf("%-28s %-16s %-6s %-20s %-21s %s%s%s\n", id, e->tenant,
                   e->admin ? "admin" : "-", e->label[0] ? e->label : "-",
                   e->created[0] ? e->created : "-", q[0] ? q : "-",
                   e->devices[0] ? " devices=" : "", e->devices);
        }
    }
    if (json) printf("]\n");
    td__free(v);
    return 0;
}

static int cmd_revoke(int argc, char **argv)
{
    const char *file = NULL, *label = NULL, *hash = NULL, *tenant = NULL;
    for (int i = 0; i < argc; i++) {
        argv_opt opt;
        argv_opt_split(argv[i], &opt);
        const char *a = opt.name;
        if (argv_opt_is_help(a) && opt.value != NULL) return flag_given_value("revoke", a);
        if (argv_opt_is_help(a)) {
            fputs(usage_token, stdout);
            return 0;
        }
        const char **dst = strcmp(a, "--tokens-file") == 0 ? &file
                           : strcmp(a, "--label") == 0     ? &label
                           : strcmp(a, "--hash") == 0      ? &hash
                           : strcmp(a, "--tenant") == 0    ? &tenant
                                                           : NULL;
        if (dst == NULL) return usage_fail("revoke: unknown option", a);
        if ((*dst = argv_opt_value(&opt, argc, argv, &i)) == NULL)
            return usage_fail("revoke: option needs a value:", a);
    }
    if (file == NULL) return usage_fail("revoke: --tokens-file is required", NULL);
    if ((label != NULL) + (hash != NULL) + (tenant != NULL) != 1)
        return usage_fail("revoke: give exactly one of --label, --hash, --tenant", NULL);
    if (hash != NULL) {
        if (strncmp(hash, "sha256:", 7) == 0) hash += 7;
        size_t hl = strlen(hash);
        bool hex = hl >= 8 && hl <= 64;
        for (size_t i = 0; hex && i < hl; i++) hex = isxdigit((unsigned char)hash[i]);
        if (!hex) return usage_fail("revoke: --hash needs 8..64 hex digits, got", hash);
    }
    FILE *in = fopen(file, "r");
    if (in == NULL) {
        fprintf(stderr, "tensorctl: token revoke: %s: %s\n", file, strerror(errno));
        return 1;
    }
    struct stat sb;
    if (fstat(fileno(in), &sb) != 0) sb.st_mode = 0600;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.revoke-XXXXXX", file);
    int fd = mkstemp(tmp);
    FILE *out = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (out == NULL) {
        fprintf(stderr, "tensorctl: token revoke: cannot write next to %s: %s\n", file,
                strerror(errno));
        if (fd >= 0) close(fd);
        fclose(in);
        return 1;
    }
    fchmod(fd, sb.st_mode & 0777);
    char line[4096];
    int lineno = 0, removed = 0, rc = 0;
    while (fgets(line, sizeof line, in) != NULL) {
        lineno++;
        char copy[4096];
        snprintf(copy, sizeof copy, "%s", line);
        char *s = copy;
        while (isspace((unsigned char)*s)) s++;
        size_t l = strlen(s);
        while (l > 0 && isspace((unsigned char)s[l - 1])) s[--l] = '\0';
        bool drop = false;
        if (*s != '\0' && *s != '#') {
            td__token_entry e;
            char err[256];
            if (td__token_line_parse(s, &e, err, sizeof err) != 0) {
                fprintf(stderr, "tensorctl: token revoke: %s:%d: %s (file left unchanged)\n",
                        file, lineno, err);
                rc = 1;
                break;
            }
            char hex[TD_SHA256_HEX];
            td__sha256_hex(e.hash, hex);
            drop = (label != NULL && strcmp(e.label, label) == 0) ||
                   (tenant != NULL && strcmp(e.tenant, tenant) == 0) ||
                   (hash != NULL && e.kind == TD_IDENT_TOKEN &&
                    strncasecmp(hex, hash, strlen(hash)) == 0);
        }
        if (drop)
            removed++;
        else if (fputs(line, out) == EOF)
            rc = 1;
    }
    fclose(in);
    if (fclose(out) != 0) rc = 1;
    if (rc == 0 && removed == 0) {
        fprintf(stderr, "tensorctl: token revoke: no entry of %s matches\n", file);
        rc = 1;
    }
    if (rc == 0 && rename(tmp, file) != 0) {
        fprintf(stderr, "tensorctl: token revoke: %s: %s\n", file, strerror(errno));
        rc = 1;
    }
    if (rc != 0) {
        unlink(tmp);
        return rc;
    }
    printf("revoked %d entr%s; send SIGHUP to tensord (systemctl reload tensord) to end "
           "their sessions\n",
           removed, removed == 1 ? "y" : "ies");
    return 0;
}

int td__tensorctl_token(int argc, char **argv)
{
    if (argc >= 1 && strcmp(argv[0], "new") == 0) return cmd_new(argc - 1, argv + 1);
    if (argc >= 1 && strcmp(argv[0], "list") == 0) return cmd_list(argc - 1, argv + 1);
    if (argc >= 1 && strcmp(argv[0], "revoke") == 0) return cmd_revoke(argc - 1, argv + 1);
    if (argc >= 1) {
        argv_opt opt;
        argv_opt_split(argv[0], &opt);
        if (argv_opt_is_help(opt.name) && opt.value != NULL)
            return flag_given_value(NULL, opt.name);
    }
    if (argc >= 1 && argv_opt_is_help(argv[0])) {
        fputs(usage_token, stdout);
        return 0;
    }
    fputs("tensorctl: token: expected 'new', 'list' or 'revoke'\n", stderr);
    fputs(usage_token, stderr);
    return 2;
}
