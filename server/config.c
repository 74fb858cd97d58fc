/* config.c — settings for tensord (see config.h).
 *
 * The file format is deliberately tiny (`key = value`, comments, no sections, no quoting):
 * it has ten keys, and a 60-line parser costs less than a dependency. Unknown keys are an
 * error rather than a warning so that a typo in a limit does not silently leave the server
 * unlimited.
 */
#include "server/config.h"
#include "auth/tokens.h"
#include "engine/worker.h"
#include "wire_limits.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stddef.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

uint64_t td__config_host_ram(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page <= 0) return 0;
    return (uint64_t)pages * (uint64_t)page;
}

uint64_t td__config_ram_share(unsigned percent) { return td__config_host_ram() / 100 * percent; }

void td__config_defaults(td__config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->listen, sizeof c->listen, "%s", TD_DEFAULT_LISTEN);
    c->log_level = TD_LOG_INFO;
    c->log_format = TD_LOG_FORMAT_TEXT;
    c->max_sessions = TD_DEFAULT_MAX_SESSIONS;
    c->blob_cache_bytes = TD_DEFAULT_BLOB_CACHE_BYTES;
    c->graph_cache = 256;
    c->max_session_bytes = td__config_ram_share(TD_DEFAULT_SESSION_RAM_PERCENT);
    c->max_tenant_bytes = td__config_ram_share(TD_DEFAULT_TENANT_RAM_PERCENT);
    c->graph_cache_bytes = TD_DEFAULT_GRAPH_CACHE_BYTES;
    c->drain_timeout_s = TD_DEFAULT_DRAIN_TIMEOUT_S;
    c->shm = true;
    c->shm_bytes = TD_SHM_DEFAULT_BYTES;
    c->shm_max_bytes = TD_SHM_DEFAULT_MAX_BYTES;
    c->ring = true;
}

static int parse_u64(const char *text, uint64_t *out)
{
    if (text[0] == '\0' || !isdigit((unsigned char)text[0])) return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0') return -1;
    *out = v;
    return 0;
}

static int parse_bool(const char *text, bool *out)
{
    static const char *yes[] = {"1", "true", "yes", "on"};
    static const char *no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(text, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(text, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -1;
}

static int parse_level(const char *text, enum td__log_level *out)
{
    static const struct {
        const char *name;
        enum td__log_level level;
    } levels[] = {{"debug", TD_LOG_DEBUG}, {"info", TD_LOG_INFO},   {"warn", TD_LOG_WARN},
                  {"warning", TD_LOG_WARN}, {"error", TD_LOG_ERROR}};
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
        if (strcasecmp(text, levels[i].name) == 0) {
            *out = levels[i].level;
            return 0;
        }
    }
    return -1;
}

/* The transport keys (see config.h). 1 when key is not one of them, else 0 or -1. */
static int set_transport(td__config *c, const char *key, const char *value, char *err,
                         size_t errlen)
{
    static const struct {
        const char *key;
        size_t off;
        bool bytes;
        uint64_t min, max;
    } keys[] = {
        {"max_connections", offsetof(td__config, max_connections), false, 0, 1u << 20},
        {"idle_timeout_s", offsetof(td__config, idle_timeout_s), false, 0, 2000000},
        {"max_streams", offsetof(td__config, max_streams), false, 0, 1u << 16},
        {"stream_window", offsetof(td__config, stream_window), true, 0, (uint64_t)1 << 30},
        /* below a few full messages gRPC refuses every call (a breaker's 1 left the
         * server up and every client told it was unreachable) */
        {"transport_bytes", offsetof(td__config, transport_bytes), true, (uint64_t)16 << 20,
         (uint64_t)1 << 50},
        {"cq_threads", offsetof(td__config, cq_threads), false, 0, 16}, /* service.h's max */
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (strcmp(key, keys[i].key) != 0) continue;
        uint64_t v;
        int rc = keys[i].bytes ? td__parse_bytes(value, &v) : parse_u64(value, &v);
        if (rc == 0 && (v == 0 || v >= keys[i].min) && v <= keys[i].max) {
            memcpy((char *)c + keys[i].off, &v, sizeof v);
            return 0;
        }
        snprintf(err, errlen, "%s: '%s' is not %s in %llu..%llu (or 0 for the default)", key,
                 value, keys[i].bytes ? "a byte count (K, M, G suffixes)" : "an integer",
                 (unsigned long long)(keys[i].min > 0 ? keys[i].min : 1),
                 (unsigned long long)keys[i].max);
        return -1;
    }
    return 1;
}

int td__config_set(td__config *c, const char *key, const char *value, char *err, size_t errlen)
{
    int tr = set_transport(c, key, value, err, errlen);
    if (tr != 1) return tr;
    if (strcmp(key, "listen") == 0) {
        td__listen_addr a;
        if (td__listen_parse(value, &a, err, errlen) != 0) return -1;
        snprintf(c->listen, sizeof c->listen, "%s", value);
        return 0;
    }
    if (strcmp(key, "log_level") == 0) {
        if (parse_level(value, &c->log_level) == 0) return 0;
        snprintf(err, errlen, "log_level: '%s' is not one of debug, info, warn, error", value);
        return -1;
    }
    if (strcmp(key, "log_format") == 0) {
        if (strcmp(value, "text") == 0) {
            c->log_format = TD_LOG_FORMAT_TEXT;
            return 0;
        }
        if (strcmp(value, "json") == 0) {
            c->log_format = TD_LOG_FORMAT_JSON;
            return 0;
        }
        snprintf(err, errlen, "log_format: '%s' is not text or json", value);
        return -1;
    }
    if (strcmp(key, "metrics") == 0) {
        td__listen_addr a;
        if (value[0] == '\0' || strcmp(value, "off") == 0) {
            c->metrics[0] = '\0';
            return 0;
        }
        if (td__metrics_parse(value, &a, err, errlen) != 0) return -1;
        snprintf(c->metrics, sizeof c->metrics, "%s", value);
        return 0;
    }
    if (strcmp(key, "max_sessions") == 0) {
        if (parse_u64(value, &c->max_sessions) == 0) return 0;
        snprintf(err, errlen, "max_sessions: '%s' is not a non-negative integer", value);
        return -1;
    }
    if (strcmp(key, "max_session_bytes") == 0) {
        if (td__parse_bytes(value, &c->max_session_bytes) == 0) return 0;
        snprintf(err, errlen,
                 "max_session_bytes: '%s' is not a byte count (e.g. 1073741824, 512M, 4G)",
                 value);
        return -1;
    }
    if (strcmp(key, "max_tenant_bytes") == 0) {
        if (td__parse_bytes(value, &c->max_tenant_bytes) == 0) return 0;
        snprintf(err, errlen,
                 "max_tenant_bytes: '%s' is not a byte count (e.g. 1073741824, 512M, 4G)", value);
        return -1;
    }
    if (strcmp(key, "graph_cache_bytes") == 0) {
        if (td__parse_bytes(value, &c->graph_cache_bytes) == 0) return 0;
        snprintf(err, errlen, "graph_cache_bytes: '%s' is not a byte count (e.g. 64M)", value);
        return -1;
    }
    if (strcmp(key, "blob_cache_bytes") == 0) {
        if (td__parse_bytes(value, &c->blob_cache_bytes) == 0 && c->blob_cache_bytes > 0)
            return 0;
        snprintf(err, errlen, "blob_cache_bytes: '%s' is not a positive byte count (e.g. 1G)",
                 value);
        return -1;
    }
    if (strcmp(key, "graph_cache") == 0) {
        if (parse_u64(value, &c->graph_cache) == 0 && c->graph_cache <= 1000000) return 0;
        snprintf(err, errlen, "graph_cache: '%s' is not an integer in 0..1000000", value);
        return -1;
    }
    if (strcmp(key, "cache_dir") == 0) {
        if (value[0] != '\0' && strlen(value) < sizeof c->cache_dir) {
            snprintf(c->cache_dir, sizeof c->cache_dir, "%s", value);
            return 0;
        }
        snprintf(err, errlen, "cache_dir: needs a directory path of 1..%zu bytes",
                 sizeof c->cache_dir - 1);
        return -1;
    }
    if (strcmp(key, "device_threads") == 0) {
        if (parse_u64(value, &c->device_threads) == 0 && c->device_threads <= 256) return 0;
        snprintf(err, errlen, "device_threads: '%s' is not an integer in 0..256", value);
        return -1;
    }
    if (strcmp(key, "device_workers") == 0) {
        if (parse_u64(value, &c->device_workers) == 0 &&
            c->device_workers <= TD_WORKERS_PER_DEVICE_MAX)
            return 0;
        snprintf(err, errlen, "device_workers: '%s' is not an integer in 0..%d", value,
                 TD_WORKERS_PER_DEVICE_MAX);
        return -1;
    }
    if (strcmp(key, "cpu_devices") == 0) {
        if (parse_u64(value, &c->cpu_devices) == 0 && c->cpu_devices >= 1 &&
            c->cpu_devices <= TD_MAX_CPU_DEVICES)
            return 0;
        snprintf(err, errlen, "cpu_devices: '%s' is not an integer in 1..%d", value,
                 TD_MAX_CPU_DEVICES);
        return -1;
    }
    if (strcmp(key, "devices") == 0) {
        if (td__token_devices_ok(value) && strlen(value) < sizeof c->devices) {
            snprintf(c->devices, sizeof c->devices, "%s", value);
            return 0;
        }
        snprintf(err, errlen,
                 "devices: '%.200s' is not a comma-separated list of distinct device names "
                 "or kinds (cpu, cpu:1, cuda, cuda:0, hip, vulkan; at most 16 entries, 127 "
                 "characters)",
                 value);
        return -1;
    }
    if (strcmp(key, "drain_timeout_s") == 0) {
        if (parse_u64(value, &c->drain_timeout_s) == 0 &&
            c->drain_timeout_s <= TD_MAX_DRAIN_TIMEOUT_S)
            return 0;
        snprintf(err, errlen, "drain_timeout_s: '%s' is not an integer in 0..%d (seconds)",
                 value, TD_MAX_DRAIN_TIMEOUT_S);
        return -1;
    }
    if (strcmp(key, "shm") == 0) {
        if (parse_bool(value, &c->shm) == 0) return 0;
        snprintf(err, errlen, "shm: '%s' is not true or false", value);
        return -1;
    }
    if (strcmp(key, "ring") == 0) {
        if (parse_bool(value, &c->ring) == 0) return 0;
        snprintf(err, errlen, "ring: '%s' is not true or false", value);
        return -1;
    }
    if (strcmp(key, "shm_bytes") == 0) {
        if (td__parse_bytes(value, &c->shm_bytes) == 0 && c->shm_bytes >= TD_SHM_MIN_BYTES &&
            c->shm_bytes <= TD_SHM_MAX_BYTES && c->shm_bytes % 8192 == 0)
            return 0;
        snprintf(err, errlen,
                 "shm_bytes: '%s' is not a byte count from 1M to 4G, a multiple of 8K (e.g. 64M)",
                 value);
        return -1;
    }
    if (strcmp(key, "shm_max_bytes") == 0) {
        if (td__parse_bytes(value, &c->shm_max_bytes) == 0 &&
            c->shm_max_bytes >= TD_SHM_MIN_BYTES && c->shm_max_bytes <= TD_SHM_MAX_BYTES &&
            c->shm_max_bytes % 8192 == 0)
            return 0;
        snprintf(err, errlen,
                 "shm_max_bytes: '%s' is not a byte count from 1M to 4G, a multiple of 8K "
                 "(e.g. 1G)",
                 value);
        return -1;
    }
    if (strcmp(key, "insecure") == 0) {
        if (parse_bool(value, &c->insecure) == 0) return 0;
        snprintf(err, errlen, "insecure: '%s' is not true or false", value);
        return -1;
    }
    static const struct {
        const char *key;
        size_t off;
    } paths[] = {
        {"tls_cert", offsetof(td__config, tls_cert)},
        {"tls_key", offsetof(td__config, tls_key)},
        {"tls_client_ca", offsetof(td__config, tls_client_ca)},
        {"tokens_file", offsetof(td__config, tokens_file)},
    };
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        if (strcmp(key, paths[i].key) != 0) continue;
        if (value[0] == '\0' || strlen(value) >= sizeof c->tls_cert) {
            snprintf(err, errlen, "%s: needs a file path of 1..%zu bytes", key,
                     sizeof c->tls_cert - 1);
            return -1;
        }
        snprintf((char *)c + paths[i].off, sizeof c->tls_cert, "%s", value);
        return 0;
    }
    snprintf(err, errlen,
             "unknown key '%s' (known: listen, log_level, log_format, metrics, max_sessions, "
             "max_session_bytes, "
             "max_tenant_bytes, device_threads, device_workers, cpu_devices, devices, insecure, tls_cert, tls_key, tls_client_ca, "
             "tokens_file, blob_cache_bytes, cache_dir, graph_cache, graph_cache_bytes, "
             "drain_timeout_s, max_connections, idle_timeout_s, max_streams, stream_window, "
             "transport_bytes, cq_threads, "
             "shm, shm_bytes, shm_max_bytes, ring)",
             key);
    return -1;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    return s;
}

int td__config_load(td__config *c, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    char line[1024];
    int lineno = 0, rc = 0;
    /* Bytes a text file does not hold are named before the lines are read (a NUL would
     * end a line early without a word; a byte-order mark would glue itself, unseen, to the
     * first key). */
    bool first = true;
    size_t got;
    while (rc == 0 && (got = fread(line, 1, sizeof line, f)) > 0) {
        if (first && got >= 3 && memcmp(line, "\xEF\xBB\xBF", 3) == 0) {
            snprintf(err, errlen, "%s: the file starts with a UTF-8 byte-order mark; save it "
                                  "without one", path);
            rc = -1;
        } else if (memchr(line, '\0', got) != NULL) {
            snprintf(err, errlen, "%s: holds a NUL byte: not a text config file", path);
            rc = -1;
        }
        first = false;
    }
    if (rc == 0 && !ferror(f)) rewind(f);
    while (rc == 0 && !ferror(f) && fgets(line, sizeof line, f) != NULL) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n' && !feof(f)) {
            snprintf(err, errlen, "%s:%d: line longer than %zu bytes", path, lineno,
                     sizeof line - 2);
            rc = -1;
            break;
        }
        char *s = trim(line);
        if (*s == '\0' || *s == '#' || *s == ';') continue;
        char *eq = strchr(s, '=');
        if (eq == NULL) {
            snprintf(err, errlen, "%s:%d: expected 'key = value'", path, lineno);
            rc = -1;
            break;
        }
        *eq = '\0';
        char *key = trim(s), *value = trim(eq + 1);
        char why[512];
        size_t vl = strlen(value);
        if (vl >= 2 && (value[0] == '"' || value[0] == '\'') && value[vl - 1] == value[0]) {
            snprintf(err, errlen, "%s:%d: %s: remove the quotes around %s (values are taken "
                                  "as written, spaces included)",
                     path, lineno, key, value);
            rc = -1;
            break;
        }
        const char *hash = strpbrk(value, "#;");
        if (hash != NULL && hash > value && isspace((unsigned char)hash[-1])) {
            snprintf(err, errlen, "%s:%d: %s: '%s' has a comment after the value; comments "
                                  "go on lines of their own",
                     path, lineno, key, value);
            rc = -1;
            break;
        }
        if (td__config_set(c, key, value, why, sizeof why) != 0) {
            snprintf(err, errlen, "%s:%d: %s", path, lineno, why);
            rc = -1;
        }
    }
    if (rc == 0 && ferror(f)) {
        snprintf(err, errlen, "%s: cannot read it: %s", path,
                 errno == EISDIR ? "it is a directory" : strerror(errno));
        rc = -1;
    }
    fclose(f);
    return rc;
}

static bool host_is_loopback(const char *host)
{
    unsigned char a[16];
    if (strcasecmp(host, "localhost") == 0) return true;
    if (inet_pton(AF_INET, host, a) == 1) return a[0] == 127;
    if (inet_pton(AF_INET6, host, a) == 1) {
        static const unsigned char lo6[16] = {[15] = 1};
        static const unsigned char v4mapped[12] = {[10] = 0xff, [11] = 0xff};
        if (memcmp(a, lo6, 16) == 0) return true;
        return memcmp(a, v4mapped, 12) == 0 && a[12] == 127;
    }
    return false;
}

int td__listen_parse(const char *text, td__listen_addr *out, char *err, size_t errlen)
{
    td__listen_addr a;
    memset(&a, 0, sizeof a);
    if (strncmp(text, "unix:", 5) == 0) {
        const char *path = text + 5;
        if (path[0] == '\0') {
            snprintf(err, errlen, "listen address '%s': empty unix socket path", text);
            return -1;
        }
        if (strlen(path) >= 108) { /* sizeof sockaddr_un.sun_path */
            snprintf(err, errlen, "listen address '%s': unix socket path too long", text);
            return -1;
        }
        /* gRPC's unix: targets read ',' as a separator between addresses, so every client
         * (libtensord refuses such a path before connecting) would fail to reach it */
        if (strchr(path, ',') != NULL) {
            snprintf(err, errlen,
                     "listen address '%s': the socket path contains ',', which clients' gRPC "
                     "unix: targets take as a separator between addresses, so no client "
                     "could connect; use a path without one",
                     text);
            return -1;
        }
        a.is_unix = true;
        a.loopback = true;
        snprintf(a.host, sizeof a.host, "%s", path);
        snprintf(a.target, sizeof a.target, "unix:%s", path);
        *out = a;
        return 0;
    }
    if (strstr(text, "://") != NULL) {
        snprintf(err, errlen,
                 "listen address '%s': a URI such as tensord://HOST:PORT/DEVICE is what "
                 "clients connect to; the server listens on HOST:PORT, [IPV6]:PORT or "
                 "unix:PATH",
                 text);
        return -1;
    }
    const char *colon;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (close == NULL || close[1] != ':') {
            snprintf(err, errlen, "listen address '%s': expected [IPV6]:PORT", text);
            return -1;
        }
        size_t hl = (size_t)(close - text - 1);
        if (hl == 0 || hl >= sizeof a.host) {
            snprintf(err, errlen, "listen address '%s': bad IPv6 host", text);
            return -1;
        }
        memcpy(a.host, text + 1, hl);
        unsigned char buf[16];
        if (inet_pton(AF_INET6, a.host, buf) != 1) {
            snprintf(err, errlen, "listen address '%s': '%s' is not an IPv6 address", text,
                     a.host);
            return -1;
        }
        colon = close + 1;
    } else {
        colon = strrchr(text, ':');
        if (colon == NULL || colon == text) {
            snprintf(err, errlen,
                     "listen address '%s': expected HOST:PORT, [IPV6]:PORT or unix:PATH", text);
            return -1;
        }
        size_t hl = (size_t)(colon - text);
        if (hl >= sizeof a.host || memchr(text, ':', hl) != NULL) {
            snprintf(err, errlen,
                     "listen address '%s': put IPv6 hosts in brackets, e.g. [::1]:7070", text);
            return -1;
        }
        memcpy(a.host, text, hl);
    }
    uint64_t port;
    if (parse_u64(colon + 1, &port) != 0 || port > 65535) {
        snprintf(err, errlen, "listen address '%s': port '%s' is not a number in 0..65535",
                 text, colon + 1);
        return -1;
    }
    a.port = (int)port;
    a.loopback = host_is_loopback(a.host);
    td__listen_format(&a, a.port, a.target, sizeof a.target);
    *out = a;
    return 0;
}

int td__metrics_parse(const char *text, td__listen_addr *out, char *err, size_t errlen)
{
    char full[64];
    uint64_t port;
    if (parse_u64(text, &port) == 0) {
        if (port > 65535) {
            snprintf(err, errlen, "metrics address '%s': port must be 0..65535", text);
            return -1;
        }
        snprintf(full, sizeof full, "127.0.0.1:%llu", (unsigned long long)port);
        text = full;
    } else if (strncmp(text, "unix:", 5) == 0) {
        snprintf(err, errlen,
                 "metrics address '%s': unix sockets are not supported; give PORT, HOST:PORT "
                 "or [IPV6]:PORT",
                 text);
        return -1;
    }
    char why[512];
    if (td__listen_parse(text, out, why, sizeof why) != 0) {
        const char *w = strncmp(why, "listen address ", 15) == 0 ? why + 15 : why;
        snprintf(err, errlen, "metrics address %s", w);
        return -1;
    }
    return 0;
}

void td__listen_format(const td__listen_addr *a, int port, char *buf, size_t len)
{
    if (a->is_unix)
        snprintf(buf, len, "unix:%s", a->host);
    else if (strchr(a->host, ':') != NULL)
        snprintf(buf, len, "[%s]:%d", a->host, port);
    else
        snprintf(buf, len, "%s:%d", a->host, port);
}
