/* tensorctl.c — command-line client for operators: what a tensord server offers, and how
 * fast it answers.
 *
 *   tensorctl info ADDR          protocol range, version, devices, limits, what is in use
 *   tensorctl ping ADDR [-n N]   N GetInfo round trips: median, p99, min, max
 *   tensorctl sessions ADDR      every tenant's open sessions; --kill ID ends one (admin)
 *   tensorctl token new|list|revoke ...  the tokens file, offline (tools/token.c)
 *   tensorctl run MODEL.onnx ... run an ONNX model on a device, .npy in and out
 *                                (tools/tensorctl_run.c)
 *   tensorctl verify ADDR ...    every op (or a model) on each server device against the
 *                                CPU engine in this process (tools/tensorctl_verify.c)
 *
 * ADDR is HOST:PORT, unix:PATH or a tensord://HOST:PORT[/DEVICE] URI. Built on the public
 * API (td_server_info_get, td_server_ping), so it exercises exactly what programs use; the
 * devices an ADDR names are read by td_connect's own reader (client/uri.h, internal), so
 * that info's device check refuses exactly the lists a session open refuses.
 * Exit codes: 0 success, 1 the server could not be reached or answered badly, 2 usage.
 */
#include "client/uri.h"
#include "tensord.h"
#include "tools/argv_opt.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_RUNTIME 1
#define EXIT_USAGE 2
#define PING_DEFAULT_N 100
#define PING_MAX_N 1000000

/* tools/token.c */
int td__tensorctl_token(int argc, char **argv);
/* tools/tensorctl_run.c */
int td__tensorctl_run(int argc, char **argv);
/* tools/tensorctl_verify.c */
int td__tensorctl_verify(int argc, char **argv);

static const char usage_main[] =
    "usage: tensorctl [-h] COMMAND [ARGS]\n"
    "\n"
    "Query a tensord server.\n"
    "\n"
    "commands:\n"
    "  info ADDR           show protocol, version, devices, limits and usage\n"
    "  ping ADDR [-n N]    measure GetInfo round-trip latency (default N = 100)\n"
    "  sessions ADDR [--kill ID] [--json]\n"
    "                      list every tenant's open sessions, or end one (needs a token\n"
    "                      of a tenant with role=admin in the server's tokens file)\n"
    "  token new --tenant NAME --tokens-file FILE [QUOTA FLAGS] [--label TEXT] [--admin]\n"
    "                      make a bearer token, print it once, append its hash to FILE\n"
    "  token list --tokens-file FILE [--json]    entries: tenant, label, created, quotas\n"
    "  token revoke --tokens-file FILE (--label TEXT | --hash PREFIX | --tenant NAME)\n"
    "                      remove entries (SIGHUP the server: their sessions end)\n"
    "  run MODEL.onnx [--device URI] --input NAME=FILE.npy ... [--output-dir DIR]\n"
    "                      run an ONNX model once; print outputs and the wall time\n"
    "  verify ADDR [--model MODEL.onnx --input NAME=FILE.npy ...]\n"
    "                      compare every op (or a model) on each server device with the\n"
    "                      CPU engine in this process; exit 1 on any mismatch\n"
    "\n"
    "ADDR is HOST:PORT, unix:PATH, tensord://HOST:PORT[/DEVICE] or, for TLS,\n"
    "tensords://HOST:PORT[/DEVICE].\n"
    "Run 'tensorctl COMMAND --help' for a command's options; 'tensorctl --version'.\n"
    "Exit status: 0 ok, 1 server unreachable or failed, 2 usage error.\n";

static const char usage_info[] =
    "usage: tensorctl info [-h] [-t MS] [--json] ADDR\n"
    "\n"
    "Show the server's protocol range, version, devices (memory in GiB), limits, the\n"
    "sessions, tensors and bytes in use, and the transport a session's bulk data would\n"
    "take: \"shm+ring\" (shared memory and its request ring, unix: addresses of a\n"
    "server offering them; tensorctl opens a session to find out), \"shm\" (shared\n"
    "memory without the ring) or \"grpc\" (the stream), with why when not the first.\n"
    "When ADDR names devices (HOST:PORT/cuda:0, tensord://HOST:PORT/cuda:0,\n"
    "unix:PATH/cuda:0,cuda:1), exit 1 with the server's device list unless the server has\n"
    "every one of them, or with td_connect's message if a session open would refuse the\n"
    "list itself (an empty entry, auto after the first, a device named twice).\n"
    "\n"
    "options:\n"
    "  -t, --timeout MS    give up after MS milliseconds (default 5000)\n"
    "  --json              one JSON object instead of text\n"
    "  --ca FILE           CA certificates (PEM) that sign the server's certificate\n"
    "  --cert FILE         client certificate (PEM) for mutual TLS, with --key FILE\n"
    "  --key FILE          the client certificate's private key\n"
    "  --token TOKEN       bearer token (default: $TENSORD_TOKEN)\n"
    "  -h, --help          show this help\n";

static const char usage_sessions[] =
    "usage: tensorctl sessions [-h] [-t MS] [--json] [--kill ID] ADDR\n"
    "\n"
    "List the open sessions of every tenant: id, tenant, device, peer, bytes held, age,\n"
    "ops executed. With --kill ID, end session ID instead (its client sees \"session ended\n"
    "by an administrator\"). The token must belong to a tenant with role=admin in the\n"
    "server's tokens file (tensorctl token new --admin).\n"
    "\n"
    "options:\n"
    "  -t, --timeout MS    give up after MS milliseconds (default 5000)\n"
    "  --json              a JSON array of objects instead of a table\n"
    "  --kill ID           end session ID\n"
    "  --ca FILE           CA certificates (PEM) that sign the server's certificate\n"
    "  --cert FILE         client certificate (PEM) for mutual TLS, with --key FILE\n"
    "  --key FILE          the client certificate's private key\n"
    "  --token TOKEN       bearer token (default: $TENSORD_TOKEN)\n"
    "  -h, --help          show this help\n";

static const char usage_ping[] =
    "usage: tensorctl ping [-h] [-n N] [-t MS] ADDR\n"
    "\n"
    "Send N GetInfo calls over one connection and print the median, p99, minimum and\n"
    "maximum round-trip time in microseconds.\n"
    "\n"
    "options:\n"
    "  -n, --count N       number of round trips (default 100, at most 1000000)\n"
    "  -t, --timeout MS    per-call timeout in milliseconds (default 5000)\n"
    "  --ca FILE           CA certificates (PEM) that sign the server's certificate\n"
    "  --cert FILE         client certificate (PEM) for mutual TLS, with --key FILE\n"
    "  --key FILE          the client certificate's private key\n"
    "  --token TOKEN       bearer token (default: $TENSORD_TOKEN)\n"
    "  -h, --help          show this help\n";

static int usage_error(const char *usage, const char *fmt, const char *arg)
{
    fputs("tensorctl: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\n", stderr);
    fputs(usage, stderr);
    return EXIT_USAGE;
}


/* Parse a positive int in [1, max]; false if it is not one. */
static bool parse_count(const char *s, long max, int *out)
{
    if (s == NULL || *s == '\0') return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < 1 || v > max) return false;
    *out = (int)v;
    return true;
}

/* Options only some subcommands take (NULL: not taken). */
typedef struct sub_extra {
    bool *json;          /* --json */
    const char **kill;   /* --kill ID */
} sub_extra;

/* Common options of the subcommands: ADDR plus -t, -n when count != NULL, and `x`'s. */
static int parse_sub(int argc, char **argv, const char *usage, const char **addr,
                     int *timeout_ms, int *count, td_options *o, const sub_extra *x)
{
    *addr = NULL;
    for (int i = 0; i < argc; i++) {
        argv_opt opt;
        argv_opt_split(argv[i], &opt);
        const char *a = opt.name;
        const bool is_json = x != NULL && x->json != NULL && strcmp(a, "--json") == 0;
        if ((argv_opt_is_help(a) || is_json) && opt.value != NULL)
            return usage_error(usage, "option %s takes no value", a);
        if (argv_opt_is_help(a)) {
            fputs(usage, stdout);
            return 0;
        }
        if (is_json) {
            *x->json = true;
            continue;
        }
        if (x != NULL && x->kill != NULL && strcmp(a, "--kill") == 0) {
            if ((*x->kill = argv_opt_value(&opt, argc, argv, &i)) == NULL)
                return usage_error(usage, "option %s needs a value", a);
            continue;
        }
        const char **sec = strcmp(a, "--ca") == 0      ? &o->tls_ca_file
                           : strcmp(a, "--cert") == 0  ? &o->tls_cert_file
                           : strcmp(a, "--key") == 0   ? &o->tls_key_file
                           : strcmp(a, "--token") == 0 ? &o->token
                                                       : NULL;
        if (sec != NULL) {
            if ((*sec = argv_opt_value(&opt, argc, argv, &i)) == NULL)
                return usage_error(usage, "option %s needs a value", a);
            continue;
        }
        bool is_t = strcmp(a, "-t") == 0 || strcmp(a, "--timeout") == 0;
        bool is_n = count != NULL && (strcmp(a, "-n") == 0 || strcmp(a, "--count") == 0);
        if (is_t || is_n) {
            const char *v = argv_opt_value(&opt, argc, argv, &i);
            if (v == NULL) return usage_error(usage, "option %s needs a value", a);
            if (is_t && !parse_count(v, 3600000, timeout_ms))
                return usage_error(usage, "bad timeout '%s' (milliseconds, 1..3600000)", v);
            if (is_n && !parse_count(v, PING_MAX_N, count))
                return usage_error(usage, "bad count '%s' (1..1000000)", v);
        } else if (a[0] == '-' && a[1] != '\0') {
            return usage_error(usage, "unknown option '%s'", a);
        } else if (*addr == NULL) {
            *addr = a;
        } else {
            return usage_error(usage, "unexpected argument '%s'", a);
        }
    }
    if (*addr == NULL) return usage_error(usage, "%s", "missing server address ADDR");
    return -1; /* parsed; go on */
}

/* A JSON string: quotes, and escapes for '"', '\\' and control characters. */
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

static double gib(uint64_t bytes) { return (double)bytes / (1024.0 * 1024.0 * 1024.0); }

/* The device list ADDR names, into dev ("" when none), read by td_connect's own reader
 * (client/uri.h), so that this check and a session open never disagree; a bare
 * HOST:PORT[/DEVICE], which td_server_info_get takes, reads as tensord://HOST:PORT[/DEVICE].
 * A list the open would refuse: say why, in the open's words, and return false. */
static bool addr_devices(const char *addr, char dev[64])
{
    const bool bare = strncmp(addr, "unix:", 5) != 0 && strstr(addr, "://") == NULL;
    const size_t n = strlen(addr) + sizeof "tensord://";
    char *uri = bare ? malloc(n) : NULL;
    if (bare && uri == NULL) {
        fprintf(stderr, "tensorctl: info: out of memory\n");
        return false;
    }
    if (bare) snprintf(uri, n, "tensord://%s", addr);
    td_status st = td__uri_device_list(bare ? uri : addr, dev);
    free(uri);
    if (st != TD_OK)
        fprintf(stderr, "tensorctl: info: %s (%s)\n", td_connect_error(), td_status_name(st));
    return st == TD_OK;
}

/* Whether the server's devices answer `want` as a session open would: "auto" (any device),
 * a kind ("cuda": any device of it), a name, or "cpu" and "cpu:0" for each other. */
static bool server_has(const td_server_info *info, const char *want)
{
    for (int i = 0; i < info->n_devices; i++) {
        const td_device_info *d = &info->devices[i];
        if (strcmp(want, "auto") == 0 || td__uri_same_device(want, d->name)) return true;
        if (strcmp(want, "cpu") != 0 && strcmp(want, d->kind) == 0) return true;
    }
    return false;
}

/* When the device list ADDR names (`list`, from addr_devices) names a device the server
 * lacks, say so with the devices it has and return false. */
static bool check_devices(const char *addr, char list[64], const td_server_info *info)
{
    for (char *save = NULL, *want = strtok_r(list, ",", &save); want != NULL;
         want = strtok_r(NULL, ",", &save)) {
        if (server_has(info, want)) continue;
        fprintf(stderr, "tensorctl: info: the server at %s has no device '%s'; it has:", addr,
                want);
        for (int i = 0; i < info->n_devices; i++)
            fprintf(stderr, "%s %s", i ? "," : "", info->devices[i].name);
        fprintf(stderr, "%s\n", info->n_devices ? "" : " none");
        return false;
    }
    return true;
}

static int cmd_info(int argc, char **argv)
{
    const char *addr;
    int timeout_ms = 5000;
    td_options o;
    memset(&o, 0, sizeof o);
    bool json = false;
    sub_extra x = {.json = &json};
    int rc = parse_sub(argc, argv, usage_info, &addr, &timeout_ms, NULL, &o, &x);
    if (rc >= 0) return rc;
    o.connect_timeout_ms = timeout_ms;
    /* ADDR as a session open reads it, before connecting: what the open would refuse
     * (a port out of range, a ',' in a socket path, a bad device list) is refused here in
     * the open's words, not reported as a failure to reach the server */
    char list[64];
    if (!addr_devices(addr, list)) return EXIT_RUNTIME;
    td_server_info info;
    td_status st = td_server_info_get_opts(addr, &o, &info);
    if (st != TD_OK) {
        fprintf(stderr, "tensorctl: info: %s (%s)\n", td_connect_error(), td_status_name(st));
        return EXIT_RUNTIME;
    }
    if (!check_devices(addr, list, &info)) return EXIT_RUNTIME;
    /* Which path a session's bulk data would take: on a unix socket, open one (as a client
     * would, shared memory asked for) and ask it; elsewhere it is the stream. */
    const char *transport = "grpc";
    char why[300] = "";
    if (strncmp(addr, "unix:", 5) == 0) {
        td_context *ctx = NULL;
        if (td_connect(addr, &o, &ctx) == TD_OK) {
            transport = td_context_transport(ctx);
            const char *no_shm = getenv("TENSORD_NO_SHM"), *no_ring = getenv("TENSORD_NO_RING");
            const bool env_no_shm = no_shm != NULL && no_shm[0] != '\0' && strcmp(no_shm, "0");
            const bool env_no_ring = no_ring != NULL && no_ring[0] != '\0' && strcmp(no_ring, "0");
            if (strcmp(transport, "grpc") == 0 && env_no_shm)
                snprintf(why, sizeof why, "TENSORD_NO_SHM is set in this environment");
            else if (strcmp(transport, "grpc") == 0)
                snprintf(why, sizeof why, "the server offers no shared memory here (--no-shm, "
                                          "an older server, or the tenant's max_bytes)");
            else if (strcmp(transport, "shm") == 0 && env_no_ring)
                snprintf(why, sizeof why, "TENSORD_NO_RING is set in this environment");
            else if (strcmp(transport, "shm") == 0)
                snprintf(why, sizeof why, "no request ring (--no-ring, a protocol-5 server, "
                                          "or TENSORD_PROTOCOL_MAX below 6)");
            td_close(ctx);
        } else {
            transport = "unknown";
            snprintf(why, sizeof why, "cannot open a session: %s", td_connect_error());
        }
    } else {
        snprintf(why, sizeof why, "shared memory needs a unix: address");
    }
    if (json) {
        printf("{\"server\": ");
        json_str(addr);
        printf(", \"version\": ");
        json_str(info.server_version);
        printf(", \"protocol_min\": %" PRIu32 ", \"protocol_max\": %" PRIu32 ", \"devices\": [",
               info.protocol_min, info.protocol_max);
        for (int i = 0; i < info.n_devices; i++) {
            const td_device_info *d = &info.devices[i];
            printf("%s{\"name\": ", i ? ", " : "");
            json_str(d->name);
            printf(", \"kind\": ");
            json_str(d->kind);
            printf(", \"description\": ");
            json_str(d->description);
            printf(", \"memory_total_bytes\": %" PRIu64 ", \"memory_free_bytes\": %" PRIu64 "}",
                   d->memory_total, d->memory_free);
        }
        printf("], \"limits\": {\"max_message_bytes\": %" PRIu64 ", \"chunk_bytes\": %" PRIu64
               ", \"max_tensor_bytes\": %" PRIu64 "}, \"sessions\": %" PRIu64
               ", \"tensors\": %" PRIu64 ", \"bytes_in_use\": %" PRIu64 ", \"transport\": ",
               info.max_message_bytes, info.chunk_bytes, info.max_tensor_bytes, info.sessions,
               info.tensors, info.bytes_in_use);
        json_str(transport);
        printf("}\n");
        return 0;
    }
    printf("server:    %s\n", addr);
    printf("version:   %s\n", info.server_version[0] ? info.server_version : "(unknown)");
    printf("protocol:  %" PRIu32 "..%" PRIu32 "\n", info.protocol_min, info.protocol_max);
    printf("devices:   %d\n", info.n_devices);
    for (int i = 0; i < info.n_devices; i++) {
        const td_device_info *d = &info.devices[i];
        printf("  %-10s kind %-7s ", d->name, d->kind);
        if (d->memory_total > 0)
            printf("memory %.2f GiB total, %.2f GiB free", gib(d->memory_total),
                   gib(d->memory_free));
        else
            printf("memory unknown");
        if (d->description[0]) printf("  (%s)", d->description);
        printf("\n");
    }
    printf("limits:    max message %" PRIu64 " bytes, chunk %" PRIu64
           " bytes, max tensor %" PRIu64 " bytes\n",
           info.max_message_bytes, info.chunk_bytes, info.max_tensor_bytes);
    printf("in use:    %" PRIu64 " sessions, %" PRIu64 " tensors, %" PRIu64 " bytes\n",
           info.sessions, info.tensors, info.bytes_in_use);
    printf("transport: %s%s%s%s\n", transport, why[0] ? " (" : "", why, why[0] ? ")" : "");
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmd_ping(int argc, char **argv)
{
    const char *addr;
    int timeout_ms = 5000, n = PING_DEFAULT_N;
    td_options o;
    memset(&o, 0, sizeof o);
    int rc = parse_sub(argc, argv, usage_ping, &addr, &timeout_ms, &n, &o, NULL);
    if (rc >= 0) return rc;
    o.connect_timeout_ms = timeout_ms;
    uint64_t *rtt = calloc((size_t)n, sizeof *rtt);
    if (rtt == NULL) {
        fprintf(stderr, "tensorctl: ping: out of memory for %d samples\n", n);
        return EXIT_RUNTIME;
    }
    td_status st = td_server_ping_opts(addr, &o, n, rtt);
    if (st != TD_OK) {
        fprintf(stderr, "tensorctl: ping: %s (%s)\n", td_connect_error(), td_status_name(st));
        free(rtt);
        return EXIT_RUNTIME;
    }
    qsort(rtt, (size_t)n, sizeof *rtt, cmp_u64);
    /* Median: middle sample, or the mean of the two middle ones. p99: nearest rank,
     * the ceil(0.99 n)-th smallest sample. */
    double median = n % 2 ? (double)rtt[n / 2] : ((double)rtt[n / 2 - 1] + (double)rtt[n / 2]) / 2;
    size_t rank99 = ((size_t)n * 99 + 99) / 100;
    double p99 = (double)rtt[rank99 - 1];
    printf("%d GetInfo round trips to %s\n", n, addr);
    printf("median %.1f us, p99 %.1f us, min %.1f us, max %.1f us\n", median / 1e3, p99 / 1e3,
           (double)rtt[0] / 1e3, (double)rtt[n - 1] / 1e3);
    free(rtt);
    return 0;
}

static int cmd_sessions(int argc, char **argv)
{
    const char *addr, *kill = NULL;
    int timeout_ms = 5000;
    td_options o;
    memset(&o, 0, sizeof o);
    bool json = false;
    sub_extra x = {.json = &json, .kill = &kill};
    int rc = parse_sub(argc, argv, usage_sessions, &addr, &timeout_ms, NULL, &o, &x);
    if (rc >= 0) return rc;
    o.connect_timeout_ms = timeout_ms;
    if (kill != NULL) {
        char *end;
        errno = 0;
        unsigned long long id = strtoull(kill, &end, 10);
        if (kill[0] < '0' || kill[0] > '9' || *end != '\0' || errno != 0 || id == 0 ||
            id > (unsigned long long)INT64_MAX)
            return usage_error(usage_sessions, "bad session id '%s' (1..2^63-1)", kill);
        td_status st = td_server_session_kill(addr, &o, (uint64_t)id);
        if (st != TD_OK) {
            fprintf(stderr, "tensorctl: sessions --kill: %s (%s)\n", td_connect_error(),
                    td_status_name(st));
            return EXIT_RUNTIME;
        }
        if (json)
            printf("{\"killed\": %llu}\n", id);
        else
            printf("session %llu ended\n", id);
        return 0;
    }
    td_session_info *v = NULL;
    size_t n = 0;
    uint64_t total = 0;
    td_status st = td_server_sessions_list(addr, &o, &v, &n, &total);
    if (st != TD_OK) {
        fprintf(stderr, "tensorctl: sessions: %s (%s)\n", td_connect_error(), td_status_name(st));
        return EXIT_RUNTIME;
    }
    if (json) {
        printf("[");
        for (size_t i = 0; i < n; i++) {
            printf("%s{\"id\": %" PRIu64 ", \"tenant\": ", i ? ", " : "", v[i].id);
            json_str(v[i].tenant);
            printf(", \"device\": ");
            json_str(v[i].device);
            printf(", \"peer\": ");
            json_str(v[i].peer);
            printf(", \"bytes\": %" PRIu64 ", \"age_seconds\": %.3f, \"ops\": %" PRIu64 "}",
                   v[i].bytes, (double)v[i].age_ms / 1e3, v[i].ops);
        }
        printf("]\n");
    } else {
        printf("%-8s %-20s %-8s %-28s %14s %10s %12s\n", "ID", "TENANT", "DEVICE", "PEER",
               "BYTES", "AGE_S", "OPS");
        for (size_t i = 0; i < n; i++)
            printf("%-8" PRIu64 " %-20s %-8s %-28s %14" PRIu64 " %10.1f %12" PRIu64 "\n", v[i].id,
                   v[i].tenant, v[i].device, v[i].peer, v[i].bytes, (double)v[i].age_ms / 1e3,
                   v[i].ops);
        if (total > n) printf("(%zu of %" PRIu64 " open sessions shown)\n", n, total);
    }
    free(v);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage_main, stderr);
        return EXIT_USAGE;
    }
    argv_opt opt;
    argv_opt_split(argv[1], &opt);
    const char *cmd = opt.name;
    if ((argv_opt_is_help(cmd) || strcmp(cmd, "--version") == 0) && opt.value != NULL)
        return usage_error(usage_main, "option %s takes no value", cmd);
    if (argv_opt_is_help(cmd)) {
        fputs(usage_main, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("tensorctl %s\n", TD_VERSION_STRING);
        return 0;
    }
    if (strcmp(cmd, "sessions") == 0) return cmd_sessions(argc - 2, argv + 2);
    if (strcmp(cmd, "info") == 0) return cmd_info(argc - 2, argv + 2);
    if (strcmp(cmd, "ping") == 0) return cmd_ping(argc - 2, argv + 2);
    if (strcmp(cmd, "token") == 0) return td__tensorctl_token(argc - 2, argv + 2);
    if (strcmp(cmd, "run") == 0) return td__tensorctl_run(argc - 2, argv + 2);
    if (strcmp(cmd, "verify") == 0) return td__tensorctl_verify(argc - 2, argv + 2);
    fprintf(stderr, "tensorctl: unknown command '%s'\n", cmd);
    fputs(usage_main, stderr);
    return EXIT_USAGE;
}
