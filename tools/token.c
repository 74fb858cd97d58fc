/* token.c — `tensorctl token new`: make a bearer token and record only its hash.
 *
 * The token is printed once on stdout and never stored: the tokens file receives
 * "sha256:HEX TENANT [QUOTA=N ...]" (format in auth/tokens.h), appended with O_APPEND so
 * a concurrent writer cannot interleave half a line, and created 0600 when missing. The
 * server picks the new line up on SIGHUP.
 */
#include "auth/tokens.h"
#include "common/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int td__tensorctl_token(int argc, char **argv);

static const char usage_token[] =
    "usage: tensorctl token new --tenant NAME --tokens-file FILE [--max-bytes N]\n"
    "                           [--max-sessions N] [--max-tensors N] [--max-tensor-bytes N]\n"
    "                           [--max-queued-batches N]\n"
    "\n"
    "Make a new random bearer token for tenant NAME, print it once on stdout, and append\n"
    "its SHA-256 (never the token) with the quotas to FILE. Quotas are per tenant and\n"
    "shared by all its tokens; the last line that sets one wins; 0 means no limit. Byte\n"
    "quotas take K, M, G, T suffixes. Send SIGHUP to tensord to load the new line.\n";

int td__tensorctl_token(int argc, char **argv)
{
    if (argc < 1 || strcmp(argv[0], "new") != 0) {
        fputs(argc >= 1 && (strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "--help") == 0)
                  ? usage_token
                  : "tensorctl: token: expected 'new'\n",
              argc >= 1 && argv[0][0] == '-' ? stdout : stderr);
        if (argc < 1 || argv[0][0] != '-') fputs(usage_token, stderr);
        return argc >= 1 && argv[0][0] == '-' ? 0 : 2;
    }
    const char *tenant = NULL, *file = NULL;
    char quotas[512] = "";
    size_t qlen = 0;
    td__quota_limits lim = {0};
    unsigned set = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage_token, stdout);
            return 0;
        }
        if (i + 1 >= argc || strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "tensorctl: token new: %s '%s'\n%s",
                    strncmp(a, "--", 2) == 0 ? "option needs a value:" : "unexpected argument",
                    a, usage_token);
            return 2;
        }
        const char *v = argv[++i];
        if (strcmp(a, "--tenant") == 0) {
            tenant = v;
        } else if (strcmp(a, "--tokens-file") == 0) {
            file = v;
        } else if (strncmp(a, "--max-", 6) == 0) {
            char kv[128], err[256];
            int n = snprintf(kv, sizeof kv, "%s=%s", a + 2, v);
            for (char *p = kv; *p != '=' && *p; p++)
                if (*p == '-') *p = '_';
            if (n < 0 || (size_t)n >= sizeof kv ||
                td__quota_kv_parse(kv, &lim, &set, err, sizeof err) != 0) {
                fprintf(stderr, "tensorctl: token new: %s\n", n < 0 || (size_t)n >= sizeof kv
                                                                  ? "quota value too long"
                                                                  : err);
                return 2;
            }
            qlen += (size_t)snprintf(quotas + qlen, sizeof quotas - qlen, " %s", kv);
        } else {
            fprintf(stderr, "tensorctl: token new: unknown option '%s'\n%s", a, usage_token);
            return 2;
        }
    }
    if (tenant == NULL || file == NULL) {
        fprintf(stderr, "tensorctl: token new: --tenant and --tokens-file are required\n%s",
                usage_token);
        return 2;
    }
    if (!td__tenant_name_ok(tenant)) {
        fprintf(stderr,
                "tensorctl: token new: tenant '%s' must be 1..%d characters of A-Z a-z 0-9 . _ -\n",
                tenant, TD_TENANT_NAME_MAX - 1);
        return 2;
    }
    char token[TD_TOKEN_LEN + 1];
    if (td__token_new(token) != TD_OK) {
        fprintf(stderr, "tensorctl: token new: no random bytes from OpenSSL\n");
        return 1;
    }
    uint8_t h[32];
    char hex[TD_SHA256_HEX];
    td__token_hash(token, strlen(token), h);
    td__sha256_hex(h, hex);
    char line[1024];
    int n = snprintf(line, sizeof line, "sha256:%s %s%s\n", hex, tenant, quotas);
    int fd = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "tensorctl: token new: %s: %s\n", file, strerror(errno));
        return 1;
    }
    bool ok = n > 0 && write(fd, line, (size_t)n) == n;
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
