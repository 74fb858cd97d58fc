/* main.c — tensord: flags and config, start-up, and the shutdown sequence.
 *
 * Start-up: settings (defaults < config file < flags), refuse non-loopback addresses
 * without --insecure (DESIGN.md §5), open the devices, open the libuv loop (signals), start
 * the gRPC service, print "listening on ADDR" on stdout, tell systemd we are ready, run the
 * loop. Everything after that happens on the loop thread in reaction to signals and to
 * closures posted by other threads.
 *
 * Shutdown (SIGTERM/SIGINT): health turns NOT_SERVING, stop accepting calls, let open
 * sessions finish for at most drain_timeout_s (--drain-timeout), then end the rest with
 * UNAVAILABLE "server is shutting down" (which the client library reports as such) and
 * cancel every other call; sessions free their memory as their calls end; when the service
 * reports that no call is left, destroy it and leave the loop. A second signal ends
 * everything at once. Exit status 0.
 *
 * Reload (SIGHUP): the settings are read again as at start (defaults < config file <
 * flags); the reloadable keys take effect (log_level, log_format, max_sessions,
 * max_session_bytes, max_tenant_bytes, drain_timeout_s, the TLS files, the tokens file's
 * contents), the others are logged as needing a restart and keep their value. Sessions of
 * tokens no longer in the tokens file end with UNAUTHENTICATED; the others continue, also
 * across a certificate change (new handshakes use the new certificate).
 */
#include "auth/tenant.h"
#include "auth/tokens.h"
#include "common/alloc.h"
#include "auth/tls.h"
#include "common/log.h"
#include "common/malloc_tune.h"
#include "engine/device.h"
#include "server/graphcache.h"
#include "server/config.h"
#include "server/connlimit.h"
#include "server/loop.h"
#include "server/metrics.h"
#include "server/notify.h"
#include "server/blobstore.h"
#include "server/candidates.h"
#include "server/service.h"
#include "server/session.h"
#include "server/shm.h"

#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#define TD_DRAIN_POLL_MS 50
/* After ending everything, give up waiting for calls to end after this long (with the
 * default drain timeout, 28 s: inside the unit's TimeoutStopSec=30). */
#define TD_STUCK_MS 8000
/* After ending the sessions, keep the connections this long for their statuses to go out. */
#define TD_LINGER_MS 500

static struct {
    td__service *svc;
    td__tenants *tenants;
    bool stopping;
    bool cancelled; /* the sessions were ended */
    bool forced;    /* the connections were closed */
    uint64_t stop_started_ms;
    td__loop_timer *drain_timer;
    int exit_code;
    /* For SIGHUP: the command line (read again with the config file) and the settings in
     * force. Loop thread. */
    int argc;
    char **argv;
    const char *config_path;
    td__config cfg;
    bool tls;
} app;

static void usage(FILE *f)
{
    fputs(
        "usage: tensord [options]\n"
        "\n"
        "Serve tensor work on this host's devices to tensord clients over gRPC.\n"
        "\n"
        "options:\n"
        "  --listen ADDR             where to listen (default " TD_DEFAULT_LISTEN ")\n"
        "  --config FILE             read settings from FILE first; flags override it\n"
        "  --device-threads N        threads the CPU device uses, 1..256 (default 0 =\n"
        "                            TENSORD_CPU_THREADS, else one per core); matmuls\n"
        "                            run on them too (OpenBLAS itself runs one thread)\n",
        f);
    fprintf(f,
        "  --device-workers N        worker threads per device, 1..%d (default 0 = %d for\n"
        "                            each GPU, 1 for a CPU device): each session runs on\n"
        "                            one, the least loaded when it opens; sessions on\n"
        "                            different workers run at once (GPU: own streams)\n",
        TD_SERVICE_MAX_DEVICE_WORKERS, TD_SERVICE_ACCEL_WORKERS);
    fprintf(f,
        "  --log-level LEVEL         debug, info (default), warn or error\n"
        "  --log-format FORMAT       text (default: \"TIME tensord: LEVEL: message\", TIME in\n"
        "                            RFC 3339 UTC with milliseconds) or json (one object per\n"
        "                            line: time, level, prog, msg); under the journal lines\n"
        "                            start with <N> syslog priorities and text leaves TIME out\n"
        "  --metrics ADDR            serve Prometheus metrics on http://ADDR/metrics, with\n"
        "                            /healthz and /readyz (default: off); ADDR is PORT (on\n"
        "                            127.0.0.1), HOST:PORT or [IPV6]:PORT; port 0 picks one\n"
        "                            (logged: \"metrics on http://HOST:PORT/metrics\")\n"
        "  --max-sessions N          open sessions allowed at once (default %d, 0 = no limit)\n"
        "  --max-session-bytes BYTES device memory one session may hold (default %d %% of\n"
        "                            RAM, here %llu; 0 = no limit); suffixes K, M, G, T\n"
        "                            (powers of 1024); a buffer counts once, aliases included\n"
        "  --max-tenant-bytes BYTES  memory all sessions of one tenant may hold: buffers,\n"
        "                            blobs pinned by has-blobs, graph definitions (default\n"
        "                            %d %% of RAM, here %llu; 0 = no limit); a tenant's own\n"
        "                            max_bytes quota in the tokens file wins over it\n"
        "  --blob-cache-bytes BYTES  memory for the blob store that keeps uploaded weights\n"
        "                            by SHA-256, shared by the sessions of a tenant (default\n"
        "                            1G; least recently used blobs are dropped beyond it);\n"
        "                            the same amount again caps the upload candidates kept\n"
        "                            by fingerprint until a repeat moves them into the store\n"
        "  --graph-cache N           captured graphs kept for later sessions, by SHA-256\n"
        "                            (default 256; least recently used dropped beyond it)\n"
        "  --graph-cache-bytes BYTES memory those graphs may hold (default 64M); each is\n"
        "                            charged to its tenant's max_bytes while kept\n"
        "  --cache-dir DIR           also keep every blob in DIR (created if missing), so\n"
        "                            weights survive restarts; files are re-hashed when\n"
        "                            loaded and deleted if they do not match\n"
        "  --tls-cert FILE           serve TLS with this PEM certificate (chain)\n"
        "  --tls-key FILE            ... and this PEM private key (unencrypted)\n"
        "  --tls-client-ca FILE      require client certificates signed by a CA in FILE\n"
        "                            (mutual TLS); a certificate's common name can be\n"
        "                            mapped to a tenant with a cn:NAME line in the tokens file\n"
        "  --tokens-file FILE        require a bearer token (or a listed client certificate)\n"
        "                            on every call; FILE maps token hashes to tenants and\n"
        "                            their quotas (see below; 'tensorctl token new' adds one)\n"
        "  --insecure                allow a non-loopback address without TLS\n"

        "  --drain-timeout S         on SIGTERM, give open sessions up to S seconds to\n"
        "                            finish, then end them (default %d; 0 = at once)\n"
        "  --check-config FILE       read FILE (and the other flags) as at start, check\n"
        "                            every setting, the TLS files and the tokens file,\n"
        "                            print \"FILE: ok\" and exit 0, or the problem and exit 2\n"
        "  --help                    show this help and exit\n"
        "  --version                 show the version and exit\n",
        TD_DEFAULT_MAX_SESSIONS, TD_DEFAULT_SESSION_RAM_PERCENT,
        (unsigned long long)td__config_ram_share(TD_DEFAULT_SESSION_RAM_PERCENT),
        TD_DEFAULT_TENANT_RAM_PERCENT,
        (unsigned long long)td__config_ram_share(TD_DEFAULT_TENANT_RAM_PERCENT),
        TD_DEFAULT_DRAIN_TIMEOUT_S);
    fputs("  --no-shm                  do not offer shared memory to unix-socket clients\n"
        "                            (default: offered; README \"Same-host clients\")\n"
        "  --shm-bytes BYTES         size of each such session's shared-memory region,\n"
        "                            1M..4G (default 64M), charged to its tenant's max_bytes\n"
        "  --shm-max-bytes BYTES     the largest region a client may ask for\n"
        "                            (td_options.shm_host_bytes), 1M..4G (default 1G; never\n"
        "                            below --shm-bytes)\n"
        "  --no-ring                 give those regions no request ring (small reads and\n"
        "                            fences then travel on the stream; --no-shm implies it)\n",
        f);
    fputs("\n"
        "devices:\n"
        "  --cpu-devices N           expose N CPU devices cpu:0..cpu:N-1, 1..8, each with\n"
        "                            its own threads and memory count (default 1: \"cpu\")\n"
        "  --devices LIST            expose only these devices: comma-separated names or\n"
        "                            kinds (cpu:1,cuda:0; cuda or cpu: every CUDA or CPU\n"
        "                            device); default: all. A session that names no device\n"
        "                            goes to the first accelerator (else cpu; a session\n"
        "                            naming \"cpu\" gets cpu:0);\n"
        "                            \"auto\", \"cuda\", \"hip\", \"vulkan\" are placed on the\n"
        "                            least-loaded device (sessions + queued requests),\n"
        "                            then the one with most free memory; logged, and the\n"
        "                            client is told the device. A tenant's devices= in\n"
        "                            the tokens file restricts it further.\n", f);
    fputs("\n"
        "addresses (ADDR):\n"
        "  HOST:PORT                 IPv4 address or host name, e.g. 127.0.0.1:7070\n"
        "  [IPV6]:PORT               IPv6 address in brackets, e.g. [::1]:7070\n"
        "  unix:PATH                 unix domain socket, e.g. unix:/run/tensord/tensord.sock\n"
        "  PORT 0 picks a free port. Anything but loopback (127.0.0.0/8, ::1, localhost) or a\n"
        "  unix socket needs TLS (--tls-cert, --tls-key) unless --insecure is given.\n"
        "  Once listening, tensord prints one line to stdout: \"listening on ADDR\", with\n"
        "  the real port. Logs go to stderr.\n", f);
    fprintf(f,
        "\n"
        "connection limits (0 = the default; README \"Limits\"):\n"
        "  --max-connections N       client connections open at once (default: half the\n"
        "                            open-file limit, at most 4096; tensord raises that limit\n"
        "                            to the hard limit at start). More are closed at once\n"
        "  --idle-timeout-s S        close a connection without calls after S seconds\n"
        "                            (default %d); a handshake must finish within 10 s\n"
        "  --max-streams N           concurrent calls (sessions) per connection (default %d)\n"
        "  --stream-window BYTES     HTTP/2 receive window per call: what a partly sent\n"
        "                            message may hold (default %lluK)\n"
        "  --transport-bytes BYTES   memory of all connections' buffers together (default\n"
        "                            %lluM, at least 16M); past it idle connections are\n"
        "                            closed, then calls cancelled (RESOURCE_EXHAUSTED) until\n"
        "                            it is back under\n"
        "  --cq-threads N            threads that receive and decode every call's messages,\n"
        "                            1..16 (default 0 = 1 on a host with fewer than 4 CPUs,\n"
        "                            else 2)\n"
        "  Compressed messages are refused (UNIMPLEMENTED); calls to unknown methods are\n"
        "  answered UNIMPLEMENTED at once. The standard gRPC health service\n"
        "  (grpc.health.v1.Health: Check, Watch; service \"\" or tensord.v1.Tensord) answers\n"
        "  without a token: SERVING, or NOT_SERVING from SIGTERM on.\n",
        TD_DEFAULT_IDLE_TIMEOUT_S, TD_DEFAULT_MAX_STREAMS,
        (unsigned long long)(TD_DEFAULT_STREAM_WINDOW >> 10),
        (unsigned long long)(TD_DEFAULT_TRANSPORT_BYTES >> 20));
    fprintf(f,
        "\n"
        "config file (key = value per line; '#' or ';' starts a comment line; values are\n"
        "taken as written: no quotes, no comments after a value):\n"
        "  listen = ADDR             as --listen\n"
        "  log_level = LEVEL         as --log-level\n"
        "  log_format = text|json    as --log-format\n"
        "  metrics = ADDR|off        as --metrics\n"
        "  max_sessions = N          as --max-sessions\n"
        "  max_session_bytes = BYTES as --max-session-bytes\n"
        "  max_tenant_bytes = BYTES  as --max-tenant-bytes\n"
        "  blob_cache_bytes = BYTES  as --blob-cache-bytes\n"
        "  cache_dir = DIR           as --cache-dir\n"
        "  graph_cache = N           as --graph-cache\n"
        "  graph_cache_bytes = BYTES as --graph-cache-bytes\n"
        "  device_threads = N        as --device-threads\n"
        "  device_workers = N        as --device-workers\n"
        "  cpu_devices = N           as --cpu-devices\n"
        "  devices = LIST            as --devices\n"
        "  insecure = true|false     as --insecure\n"
        "  shm = true|false          false: as --no-shm\n"
        "  shm_bytes = BYTES         as --shm-bytes\n"
        "  shm_max_bytes = BYTES     as --shm-max-bytes\n"
        "  ring = true|false         false: as --no-ring\n"
        "  drain_timeout_s = S       as --drain-timeout\n"
        "  tls_cert = FILE           as --tls-cert (also tls_key, tls_client_ca)\n"
        "  tokens_file = FILE        as --tokens-file\n"
        "  max_connections = N       as --max-connections (also idle_timeout_s, max_streams,\n"
        "                            stream_window, transport_bytes, cq_threads)\n"
        "\n"
        "tokens file (one entry per line, '#' comments):\n"
        "  sha256:HEX TENANT [QUOTA=N ...] [role=admin] [devices=LIST] [label=TEXT]\n"
        "         [created=TIME]             SHA-256 of a bearer token, its tenant\n"
        "  cn:NAME TENANT [...]              a verified client certificate's common name\n"
        "  role=admin: the tenant may list and end every tenant's sessions (tensorctl\n"
        "  sessions); devices=LIST (comma-separated names or kinds, e.g. cuda:0,cpu): the\n"
        "  only devices its sessions may open; label and created are for tensorctl token\n"
        "  list/revoke.\n"
        "  QUOTA: max_bytes, max_sessions, max_tensors, max_tensor_bytes (K/M/G/T suffixes\n"
        "  for bytes), max_queued_batches; per tenant, shared by all its entries (last\n"
        "  value wins); 0 or absent = no limit (for max_bytes: --max-tenant-bytes).\n"
        "  A breach fails that request with RESOURCE_EXHAUSTED naming the quota, except\n"
        "  max_queued_batches: a batch past it waits and the session's stream is not read\n"
        "  meanwhile (flow control slows the client; nothing fails).\n"
        "\n"
        "signals:\n"
        "  SIGTERM, SIGINT           graceful stop: health turns NOT_SERVING, stop accepting,\n"
        "                            let open sessions finish (up to --drain-timeout), end\n"
        "                            the rest with UNAVAILABLE \"server is shutting down\",\n"
        "                            free every session, exit 0; a second signal ends them\n"
        "                            at once\n"
        "  SIGHUP                    read the config file and flags again: log_level,\n"
        "                            log_format, max_sessions, max_session_bytes,\n"
        "                            max_tenant_bytes, drain_timeout_s, the TLS files and\n"
        "                            the tokens file are reloaded (other keys need a\n"
        "                            restart; a bad file keeps what is in force); open\n"
        "                            sessions continue, except those of a removed token or\n"
        "                            certificate, which end with UNAUTHENTICATED; new TLS\n"
        "                            handshakes use the new certificate\n"
        "\n"
        "memory: at start tensord sets glibc's malloc trim threshold to 64 MiB and its mmap\n"
        "  threshold to 16 MiB (mallopt(3); freed gRPC buffers stay in the heap instead of\n"
        "  being faulted in again); TENSORD_NO_MALLOC_TUNE=1, or a MALLOC_* policy\n"
        "  variable of mallopt(3) or GLIBC_TUNABLES in the environment, leaves glibc's own\n"
        "  policy. The cpu device keeps freed buffers of 1 MiB and more for reuse, up to\n"
        "  TENSORD_CPU_POOL_BYTES (bytes, K/M/G/T suffixes; default 512M; 0: none), dropping\n"
        "  those freed longest ago when full\n"
        "\n");
    fputs(
        "profiling: TENSORD_TRACE_JOBS=1 adds to each session's close line (log level info)\n"
        "  the worker time per kind of request and the device copies of reads and GPU\n"
        "  candidates\n"
        "\n"
        "exit status: 0 after a clean stop, 1 on a runtime failure (cannot listen, no\n"
        "device), 2 on a usage or configuration error.\n"
        "Under systemd (Type=notify) tensord reports READY=1 once listening, STOPPING=1 on\n"
        "shutdown, and pings the watchdog when WatchdogSec= is set.\n",
        f);
}

enum {
    OPT_LISTEN = 256,
    OPT_CONFIG,
    OPT_DEVICE_THREADS,
    OPT_DEVICE_WORKERS,
    OPT_CPU_DEVICES,
    OPT_DEVICES,
    OPT_LOG_LEVEL,
    OPT_LOG_FORMAT,
    OPT_METRICS,
    OPT_MAX_SESSIONS,
    OPT_MAX_SESSION_BYTES,
    OPT_MAX_TENANT_BYTES,
    OPT_GRAPH_CACHE_BYTES,
    OPT_BLOB_CACHE_BYTES,
    OPT_CACHE_DIR,
    OPT_GRAPH_CACHE,
    OPT_INSECURE,
    OPT_TLS_CERT,
    OPT_TLS_KEY,
    OPT_TLS_CLIENT_CA,
    OPT_TOKENS_FILE,
    OPT_MAX_CONNECTIONS,
    OPT_IDLE_TIMEOUT_S,
    OPT_MAX_STREAMS,
    OPT_STREAM_WINDOW,
    OPT_TRANSPORT_BYTES,
    OPT_CQ_THREADS,
    OPT_DRAIN_TIMEOUT,
    OPT_NO_SHM,
    OPT_SHM_BYTES,
    OPT_SHM_MAX_BYTES,
    OPT_NO_RING,
    OPT_CHECK_CONFIG,
    OPT_HELP,
    OPT_VERSION,
};

static const struct option k_options[] = {
    {"listen", required_argument, NULL, OPT_LISTEN},
    {"config", required_argument, NULL, OPT_CONFIG},
    {"device-threads", required_argument, NULL, OPT_DEVICE_THREADS},
    {"device-workers", required_argument, NULL, OPT_DEVICE_WORKERS},
    {"cpu-devices", required_argument, NULL, OPT_CPU_DEVICES},
    {"devices", required_argument, NULL, OPT_DEVICES},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"log-format", required_argument, NULL, OPT_LOG_FORMAT},
    {"metrics", required_argument, NULL, OPT_METRICS},
    {"max-sessions", required_argument, NULL, OPT_MAX_SESSIONS},
    {"max-session-bytes", required_argument, NULL, OPT_MAX_SESSION_BYTES},
    {"max-tenant-bytes", required_argument, NULL, OPT_MAX_TENANT_BYTES},
    {"graph-cache-bytes", required_argument, NULL, OPT_GRAPH_CACHE_BYTES},
    {"blob-cache-bytes", required_argument, NULL, OPT_BLOB_CACHE_BYTES},
    {"cache-dir", required_argument, NULL, OPT_CACHE_DIR},
    {"graph-cache", required_argument, NULL, OPT_GRAPH_CACHE},
    {"insecure", no_argument, NULL, OPT_INSECURE},
    {"no-shm", no_argument, NULL, OPT_NO_SHM},
    {"shm-bytes", required_argument, NULL, OPT_SHM_BYTES},
    {"shm-max-bytes", required_argument, NULL, OPT_SHM_MAX_BYTES},
    {"no-ring", no_argument, NULL, OPT_NO_RING},
    {"tls-cert", required_argument, NULL, OPT_TLS_CERT},
    {"tls-key", required_argument, NULL, OPT_TLS_KEY},
    {"tls-client-ca", required_argument, NULL, OPT_TLS_CLIENT_CA},
    {"tokens-file", required_argument, NULL, OPT_TOKENS_FILE},
    {"max-connections", required_argument, NULL, OPT_MAX_CONNECTIONS},
    {"idle-timeout-s", required_argument, NULL, OPT_IDLE_TIMEOUT_S},
    {"max-streams", required_argument, NULL, OPT_MAX_STREAMS},
    {"stream-window", required_argument, NULL, OPT_STREAM_WINDOW},
    {"transport-bytes", required_argument, NULL, OPT_TRANSPORT_BYTES},
    {"cq-threads", required_argument, NULL, OPT_CQ_THREADS},
    {"drain-timeout", required_argument, NULL, OPT_DRAIN_TIMEOUT},
    {"check-config", required_argument, NULL, OPT_CHECK_CONFIG},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

/* ---- shutdown (loop thread) ---- */

static void drained_on_loop(void *arg)
{
    (void)arg;
    td__log(TD_LOG_INFO, "all sessions closed; bye");
    td__metrics_close(); /* its scrapes read the service */
    td__service_destroy(app.svc);
    app.svc = NULL;
    td__loop_close();
}

static void on_drained(void *arg)
{
    (void)arg;
    if (td__loop_post(drained_on_loop, NULL) != TD_OK) {
        td__log(TD_LOG_ERROR, "cannot reach the main loop to finish shutdown");
        _exit(1);
    }
}

static void stuck(void *arg)
{
    (void)arg;
    td__log(TD_LOG_ERROR, "calls did not end %d ms after cancelling them; exiting anyway",
            TD_STUCK_MS);
    fflush(stderr);
    _exit(1);
}

/* Close every connection still up (grpc_server_cancel_all_calls), then give calls
 * TD_STUCK_MS to end. */
static void force_close(void *arg)
{
    (void)arg;
    if (app.svc == NULL || app.forced) return;
    app.forced = true;
    td__service_cancel_all(app.svc); /* also stops accepting (td__service_shutdown) */
    td__loop_timer_start(TD_STUCK_MS, 0, stuck, NULL, NULL);
}

/* End the sessions still open with a status the client library reports as "server is
 * shutting down" (UNAVAILABLE with that text). The connections stay up for TD_LINGER_MS
 * (or until their clients close them) so that the status reaches the clients: gRPC's
 * cancel-all disconnects at once, and a client whose write then fails would see "Broken
 * pipe" instead. `now`: no linger (a second signal). */
static void cancel_all(bool now)
{
    if (!app.cancelled) {
        app.cancelled = true;
        size_t n = td__service_end_sessions(app.svc, GRPC_STATUS_UNAVAILABLE,
                                            "server is shutting down");
        td__log(TD_LOG_INFO, "ending the remaining calls (%zu open sessions)", n);
        if (!now && n > 0 &&
            td__loop_timer_start(TD_LINGER_MS, 0, force_close, NULL, NULL) == TD_OK)
            return;
    }
    force_close(NULL);
}

static void drain_tick(void *arg)
{
    (void)arg;
    if (app.svc == NULL) return;
    size_t open = td__service_session_count(app.svc);
    bool done = open == 0 && td__service_idle(app.svc);
    uint64_t limit_ms = app.cfg.drain_timeout_s * 1000;
    if (!done && td__loop_now_ms() - app.stop_started_ms < limit_ms) return;
    if (!done)
        td__log(TD_LOG_WARN, "%zu sessions still open after the drain timeout (%llu s)", open,
                (unsigned long long)app.cfg.drain_timeout_s);
    td__loop_timer_stop(app.drain_timer);
    app.drain_timer = NULL;
    cancel_all(false);
}

static void on_stop(int signum, void *arg)
{
    (void)arg;
    const char *name = signum == SIGINT ? "SIGINT" : "SIGTERM";
    if (app.svc == NULL) return;
    if (app.stopping) {
        td__log(TD_LOG_INFO, "%s again: stopping now", name);
        if (app.drain_timer) {
            td__loop_timer_stop(app.drain_timer);
            app.drain_timer = NULL;
        }
        cancel_all(true);
        return;
    }
    app.stopping = true;
    td__log(TD_LOG_INFO, "%s: shutting down (%zu open sessions get up to %llu s to finish)",
            name, td__service_session_count(app.svc),
            (unsigned long long)app.cfg.drain_timeout_s);
    td__notify_stopping();
    app.stop_started_ms = td__loop_now_ms();
    td__service_drain_begin(app.svc);
    if (td__loop_timer_start(TD_DRAIN_POLL_MS, TD_DRAIN_POLL_MS, drain_tick, NULL,
                             &app.drain_timer) != TD_OK)
        cancel_all(false);
}

/* ---- settings ---- */

/* Defaults, then the config file (when given), then every flag but --config. Returns 0, or
 * 2 (usage/configuration error) with a message in err. Loop thread (or before it). */
static int load_settings(int argc, char **argv, const char *config_path, td__config *cfg,
                         char *err, size_t errlen)
{
    char why[960];
    td__config_defaults(cfg);
    if (config_path != NULL && td__config_load(cfg, config_path, why, sizeof why) != 0) {
        snprintf(err, errlen, "config: %s", why);
        return 2;
    }
    optind = 0; /* glibc: restart scanning */
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, "", k_options, NULL)) != -1) {
        const char *key = NULL, *value = optarg;
        switch (opt) {
        case OPT_LISTEN: key = "listen"; break;
        case OPT_DEVICE_THREADS: key = "device_threads"; break;
        case OPT_DEVICE_WORKERS: key = "device_workers"; break;
        case OPT_CPU_DEVICES: key = "cpu_devices"; break;
        case OPT_DEVICES: key = "devices"; break;
        case OPT_LOG_LEVEL: key = "log_level"; break;
        case OPT_LOG_FORMAT: key = "log_format"; break;
        case OPT_METRICS: key = "metrics"; break;
        case OPT_MAX_SESSIONS: key = "max_sessions"; break;
        case OPT_MAX_SESSION_BYTES: key = "max_session_bytes"; break;
        case OPT_MAX_TENANT_BYTES: key = "max_tenant_bytes"; break;
        case OPT_GRAPH_CACHE_BYTES: key = "graph_cache_bytes"; break;
        case OPT_BLOB_CACHE_BYTES: key = "blob_cache_bytes"; break;
        case OPT_CACHE_DIR: key = "cache_dir"; break;
        case OPT_GRAPH_CACHE: key = "graph_cache"; break;
        case OPT_INSECURE: key = "insecure"; value = "true"; break;
        case OPT_NO_SHM: key = "shm"; value = "false"; break;
        case OPT_SHM_BYTES: key = "shm_bytes"; break;
        case OPT_SHM_MAX_BYTES: key = "shm_max_bytes"; break;
        case OPT_NO_RING: key = "ring"; value = "false"; break;
        case OPT_TLS_CERT: key = "tls_cert"; break;
        case OPT_TLS_KEY: key = "tls_key"; break;
        case OPT_TLS_CLIENT_CA: key = "tls_client_ca"; break;
        case OPT_TOKENS_FILE: key = "tokens_file"; break;
        case OPT_MAX_CONNECTIONS: key = "max_connections"; break;
        case OPT_IDLE_TIMEOUT_S: key = "idle_timeout_s"; break;
        case OPT_MAX_STREAMS: key = "max_streams"; break;
        case OPT_STREAM_WINDOW: key = "stream_window"; break;
        case OPT_TRANSPORT_BYTES: key = "transport_bytes"; break;
        case OPT_CQ_THREADS: key = "cq_threads"; break;
        case OPT_DRAIN_TIMEOUT: key = "drain_timeout_s"; break;
        default: break;
        }
        if (key != NULL && td__config_set(cfg, key, value, why, sizeof why) != 0) {
            snprintf(err, errlen, "%s", why);
            return 2;
        }
    }
    return 0;
}

/* What cannot be checked key by key: the TLS pair, TLS on a unix socket, a public address
 * without TLS. Loads the TLS files into *tls_files when TLS is on (*tls). Returns 0, or 2
 * with a message in err. */
static int check_settings(const td__config *cfg, td__listen_addr *addr, bool *tls,
                          td__tls_files *tls_files, char *err, size_t errlen)
{
    char why[960];
    memset(tls_files, 0, sizeof *tls_files);
    if (td__listen_parse(cfg->listen, addr, why, sizeof why) != 0) {
        snprintf(err, errlen, "%s", why);
        return 2;
    }
    *tls = cfg->tls_cert[0] != '\0' || cfg->tls_key[0] != '\0';
    if (*tls && (cfg->tls_cert[0] == '\0' || cfg->tls_key[0] == '\0')) {
        snprintf(err, errlen, "TLS needs both --tls-cert and --tls-key (tls_cert, tls_key)");
        return 2;
    }
    if (cfg->tls_client_ca[0] != '\0' && !*tls) {
        snprintf(err, errlen, "--tls-client-ca needs --tls-cert and --tls-key");
        return 2;
    }
    if (*tls && addr->is_unix) {
        snprintf(err, errlen, "TLS on a unix socket is not supported; listen on HOST:PORT");
        return 2;
    }
    if (!addr->loopback && !*tls && !cfg->insecure) {
        snprintf(err, errlen,
                 "refusing to listen on %s without TLS: pass --tls-cert and --tls-key (see "
                 "tensord --help), or --insecure to serve plaintext anyway",
                 cfg->listen);
        return 2;
    }
    if (*tls && td__tls_files_load(cfg->tls_cert, cfg->tls_key,
                                   cfg->tls_client_ca[0] ? cfg->tls_client_ca : NULL, tls_files,
                                   why, sizeof why) != TD_OK) {
        snprintf(err, errlen, "TLS: %s", why);
        return 2;
    }
    return 0;
}

/* A warning for each devices= entry of the tokens file at `path` that names no device of
 * this server: well-formed (td__token_devices_ok) but for another host of a pool sharing
 * the file, or a typo; the tenant's sessions get nothing from it here. */
static void warn_absent_token_devices(const char *path)
{
    td__token_entry *e = NULL;
    size_t n = 0;
    char why[960];
    if (path[0] == '\0' || td__tokens_load(path, &e, &n, why, sizeof why) != TD_OK) return;
    for (size_t i = 0; i < n; i++) {
        char list[TD_TOKEN_DEVICES_MAX], *save = NULL;
        snprintf(list, sizeof list, "%s", e[i].devices);
        for (char *x = strtok_r(list, ",", &save); x != NULL; x = strtok_r(NULL, ",", &save)) {
            bool hit = false;
            char have[256] = "";
            size_t hl = 0;
            for (int d = 0; d < td__device_count(); d++) {
                hit = hit || td__device_list_match(td__device_at(d), x);
                if (hl < sizeof have)
                    hl += (size_t)snprintf(have + hl, sizeof have - hl, "%s%s", d ? ", " : "",
                                           td__device_at(d)->name);
            }
            if (!hit)
                td__log(TD_LOG_WARN, "tokens file %s: tenant '%s': devices= entry '%s' names "
                        "no device of this server (it has: %s)", path, e[i].tenant, x, have);
        }
    }
    td__free(e);
}

/* tensord --check-config FILE: everything start-up reads, without opening anything. */
static int check_config(int argc, char **argv, const char *path)
{
    td__config cfg;
    char err[1024];
    td__listen_addr addr;
    td__tls_files tf;
    bool tls;
    int rc = load_settings(argc, argv, path, &cfg, err, sizeof err);
    if (rc == 0) rc = check_settings(&cfg, &addr, &tls, &tf, err, sizeof err);
    if (rc == 0) td__tls_files_fini(&tf);
    if (rc == 0 && cfg.metrics[0] != '\0') {
        td__listen_addr m;
        if (td__metrics_parse(cfg.metrics, &m, err, sizeof err) != 0) rc = 2;
    }
    if (rc == 0 && cfg.tokens_file[0] != '\0') {
        td__token_entry *e = NULL;
        size_t n = 0;
        char why[960];
        if (td__tokens_load(cfg.tokens_file, &e, &n, why, sizeof why) != TD_OK) {
            snprintf(err, sizeof err, "tokens file: %s", why);
            rc = 2;
        }
        td__free(e);
    }
    if (rc != 0) {
        fprintf(stderr, "tensord: %s\n", err);
        return rc;
    }
    printf("%s: ok\n", path);
    return 0;
}

/* Config keys a SIGHUP cannot change (they shape what was opened at start). */
static const struct {
    const char *key;
    size_t off, size;
} k_fixed_keys[] = {
#define FIXED(k) {#k, offsetof(td__config, k), sizeof(((td__config *)0)->k)}
    FIXED(listen),           FIXED(metrics),        FIXED(blob_cache_bytes),
    FIXED(cache_dir),        FIXED(graph_cache),    FIXED(graph_cache_bytes),
    FIXED(device_threads),   FIXED(device_workers), FIXED(cpu_devices),
    FIXED(devices),
    FIXED(insecure),       FIXED(tokens_file),     FIXED(shm),
    FIXED(shm_bytes),        FIXED(shm_max_bytes),  FIXED(ring),
    FIXED(max_connections),  FIXED(idle_timeout_s), FIXED(max_streams),
    FIXED(stream_window),    FIXED(transport_bytes), FIXED(cq_threads),
#undef FIXED
};

static void reload_tls(const td__config *cfg)
{
    td__tls_files tf;
    char err[1024];
    bool want = cfg->tls_cert[0] != '\0' && cfg->tls_key[0] != '\0';
    if (!want && !app.tls) return;
    if (!want) {
        td__log(TD_LOG_ERROR, "SIGHUP: TLS settings removed: TLS stays on until a restart");
        return;
    }
    if (td__tls_files_load(cfg->tls_cert, cfg->tls_key,
                           cfg->tls_client_ca[0] ? cfg->tls_client_ca : NULL, &tf, err,
                           sizeof err) != TD_OK) {
        td__log(TD_LOG_ERROR, "SIGHUP: TLS files not reloaded, the certificate in force "
                              "stays: %s",
                err);
        return;
    }
    if (td__service_tls_reload(app.svc, &tf, err, sizeof err) != TD_OK)
        td__log(TD_LOG_ERROR, "SIGHUP: TLS files not reloaded: %s", err);
    else
        td__log(TD_LOG_INFO, "SIGHUP: TLS certificate reloaded (subject CN '%s'); new "
                             "connections use it, open ones keep theirs",
                tf.subject_cn);
    td__tls_files_fini(&tf);
}

static void on_reload(void *arg)
{
    (void)arg;
    if (app.svc == NULL || app.stopping) return;
    td__config cfg;
    char err[1024];
    bool parsed = load_settings(app.argc, app.argv, app.config_path, &cfg, err, sizeof err) == 0;
    if (!parsed) {
        td__log(TD_LOG_ERROR, "SIGHUP: settings not reloaded, those in force stay: %s", err);
        cfg = app.cfg; /* the TLS files and the tokens file are still read again */
    }
    for (size_t i = 0; i < sizeof k_fixed_keys / sizeof k_fixed_keys[0]; i++) {
        char *now = (char *)&app.cfg + k_fixed_keys[i].off;
        char *want = (char *)&cfg + k_fixed_keys[i].off;
        if (memcmp(now, want, k_fixed_keys[i].size) == 0) continue;
        td__log(TD_LOG_WARN, "SIGHUP: %s changed: it takes effect at the next restart",
                k_fixed_keys[i].key);
        memcpy(want, now, k_fixed_keys[i].size);
    }
    td__log_set_level(cfg.log_level);
    td__log_set_format(cfg.log_format);
    td__service_set_limits(app.svc, cfg.max_sessions, cfg.max_session_bytes);
    td__quota_set_default_bytes(cfg.max_tenant_bytes);
    reload_tls(&cfg);
    app.cfg = cfg;
    td__log(TD_LOG_INFO, "SIGHUP: settings %s (max_sessions %llu, max_session_bytes "
                         "%llu, max_tenant_bytes %llu, drain_timeout_s %llu)",
            parsed ? "reloaded" : "unchanged", (unsigned long long)cfg.max_sessions, (unsigned long long)cfg.max_session_bytes,
            (unsigned long long)cfg.max_tenant_bytes, (unsigned long long)cfg.drain_timeout_s);
    if (!td__tenants_enabled(app.tenants)) return;
    size_t n;
    if (td__tenants_reload(app.tenants, &n, err, sizeof err) != TD_OK)
        td__log(TD_LOG_ERROR, "SIGHUP: tokens file not reloaded, the previous one stays: %s",
                err);
    else {
        size_t ended = td__service_revoke_stale(app.svc, app.tenants);
        td__log(TD_LOG_INFO, "SIGHUP: tokens file reloaded (%zu entries); %zu open sessions "
                             "of removed identities ended", n, ended);
        warn_absent_token_devices(app.cfg.tokens_file);
    }
}

/* Once a second: the service's upkeep (open timeouts). */
static void service_tick(void *arg)
{
    (void)arg;
    if (app.svc != NULL) td__service_tick(app.svc);
}

/* ---- start-up ---- */

/* gRPC unlinks an existing unix socket before binding, which would silently take the
 * address from a server that is still running. Refuse when something answers there. */
static bool unix_socket_in_use(const char *path)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    size_t n = strlen(path);
    if (n >= sizeof sa.sun_path) return false;
    memcpy(sa.sun_path, path, n);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    bool in_use = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return in_use;
}

/* What gRPC's own bind failure does not say ("No address added out of total 1
 * resolved"): whether the host resolves, and what bind() itself answers. Returns 0, or -1
 * with a message naming the cause. The socket is closed again at once; gRPC binds for
 * real right after (a race with another program in between still fails there). */
static int check_listen(const td__listen_addr *a, char *err, size_t errlen)
{
    if (a->is_unix) {
        char dir[256];
        snprintf(dir, sizeof dir, "%s", a->host);
        char *slash = strrchr(dir, '/');
        if (slash == NULL) snprintf(dir, sizeof dir, ".");
        else if (slash == dir) dir[1] = '\0';
        else *slash = '\0';
        struct stat sb;
        if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            snprintf(err, errlen,
                     "cannot listen on unix:%s: directory %s does not exist (under systemd the "
                     "unit's RuntimeDirectory=tensord makes /run/tensord; elsewhere create it or "
                     "choose another path)",
                     a->host, dir);
            return -1;
        }
        if (access(dir, W_OK | X_OK) != 0) {
            snprintf(err, errlen,
                     "cannot listen on unix:%s: permission denied: user %ld cannot create a "
                     "socket in %s",
                     a->host, (long)geteuid(), dir);
            return -1;
        }
        return 0;
    }
    char port[16];
    snprintf(port, sizeof port, "%d", a->port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int g = getaddrinfo(a->host, port, &hints, &res);
    if (g != 0) {
        snprintf(err, errlen, "cannot listen on %s: host '%s' does not resolve (%s)",
                 a->target, a->host, gai_strerror(g));
        return -1;
    }
    int rc = 0;
    for (struct addrinfo *r = res; r != NULL && rc == 0; r = r->ai_next) {
        int fd = socket(r->ai_family, r->ai_socktype | SOCK_CLOEXEC, r->ai_protocol);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one); /* as gRPC does */
        if (bind(fd, r->ai_addr, r->ai_addrlen) != 0) {
            int e = errno;
            const char *hint = e == EADDRINUSE ? " (another program listens there; find it with "
                                                 "'ss -ltnp')"
                               : e == EACCES ? " (ports below 1024 need privileges; pick a "
                                               "higher port)"
                               : e == EADDRNOTAVAIL ? " (the address is not one of this host's)"
                                                    : "";
            snprintf(err, errlen, "cannot listen on %s: %s%s", a->target, strerror(e), hint);
            rc = -1;
        }
        close(fd);
    }
    freeaddrinfo(res);
    return rc;
}

/* Keep gRPC's receive buffers in the heap (common/malloc_tune.h). On a 64 MiB upload
 * ~20 % of the server's CPU went to page faults and zeroing before this (upload 0.6 ->
 * 0.95 GB/s with it, BENCHMARKS.md P3). Tensor memory does not go through malloc
 * (backends/cpu/cpu_bufpool.c), so this only bounds how much freed message memory each
 * malloc arena keeps. */
#define TD_SERVER_MALLOC_TRIM_BYTES ((size_t)64 << 20)

/* TENSORD_TEST_FLUSH_SUBNORMALS=1 (tests only): every thread of this tensord computes with
 * x86's flush-to-zero and denormals-are-zero bits set (threads inherit the floating-point
 * environment of the thread that creates them, pthread_create(3)), so that its cpu device
 * behaves like a GPU driver that flushes f32 subnormals: the target that
 * tests/unit/backends/flush_subnormals.sh holds conformance --flush-subnormals to. */
static void test_flush_subnormals(void)
{
    const char *v = getenv("TENSORD_TEST_FLUSH_SUBNORMALS");
    if (v == NULL || strcmp(v, "1") != 0) return;
#if defined(__x86_64__) || defined(__i386__)
    _mm_setcsr(_mm_getcsr() | 0x8040u); /* FTZ (bit 15) | DAZ (bit 6) */
    td__log(TD_LOG_WARN, "TENSORD_TEST_FLUSH_SUBNORMALS=1: subnormals flush to zero (a test "
                         "setting; results differ from the CPU reference)");
#endif
}

int main(int argc, char **argv)
{
    td__log_set_prefix("tensord");
    test_flush_subnormals();
    td__malloc_keep_heap(TD_SERVER_MALLOC_TRIM_BYTES, "TENSORD_NO_MALLOC_TUNE");
    const char *trace = getenv("TENSORD_TRACE_JOBS");
    td__trace_jobs = trace != NULL && strcmp(trace, "1") == 0;
    const char *shm_wait = getenv("TENSORD_SHM_WRITE_WAIT");
    td__shm_write_wait = shm_wait != NULL && strcmp(shm_wait, "1") == 0;
    const char *done_inline = getenv("TENSORD_SHM_DONE_INLINE");
    td__shm_done_inline = done_inline != NULL && strcmp(done_inline, "1") == 0;
    const char *config_path = NULL, *check_path = NULL;
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "", k_options, NULL)) != -1) {
        switch (opt) {
        case OPT_CONFIG: config_path = optarg; break;
        case OPT_CHECK_CONFIG: check_path = optarg; break;
        case OPT_HELP: usage(stdout); return 0;
        case OPT_VERSION: printf("tensord %s\n", TD_VERSION_STRING); return 0;
        case '?': {
            const char *eq = strchr(argv[optind - 1], '=');
            /* optopt: 0 for an unknown long option (argv[optind - 1] is it), a long
             * option's val (>= 256) when its value is missing or it takes none, a letter
             * for a short option (tensord has none; optind may not have moved past it) */
            if (optopt > 0 && optopt < 256)
                fprintf(stderr, "tensord: unknown option '-%c'\n", optopt);
            else if (optopt != 0 && eq != NULL)
                fprintf(stderr, "tensord: option '%.*s' takes no value\n",
                        (int)(eq - argv[optind - 1]), argv[optind - 1]);
            else if (optopt != 0)
                fprintf(stderr, "tensord: option '%s' needs a value\n", argv[optind - 1]);
            else
                fprintf(stderr, "tensord: unknown option '%s'\n", argv[optind - 1]);
            fprintf(stderr, "try 'tensord --help'\n");
            return 2;
        }
        default: break;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tensord: unexpected argument '%s'\ntry 'tensord --help'\n", argv[optind]);
        return 2;
    }
    if (check_path != NULL) {
        if (config_path != NULL) {
            fprintf(stderr, "tensord: --check-config FILE replaces --config; give one\n");
            return 2;
        }
        return check_config(argc, argv, check_path);
    }

    char err[1024];
    app.argc = argc;
    app.argv = argv;
    app.config_path = config_path;
    if (load_settings(argc, argv, config_path, &app.cfg, err, sizeof err) != 0) {
        fprintf(stderr, "tensord: %s\n", err);
        return 2;
    }
    const td__config cfg = app.cfg;
    td__log_set_level(cfg.log_level);
    td__log_set_format(cfg.log_format);

    td__listen_addr addr;
    bool tls;
    td__tls_files tls_files;
    if (check_settings(&cfg, &addr, &tls, &tls_files, err, sizeof err) != 0) {
        fprintf(stderr, "tensord: %s\n", err);
        return 2;
    }
    app.tls = tls;
    if (td__tenants_create(cfg.tokens_file[0] ? cfg.tokens_file : NULL, &app.tenants, err,
                           sizeof err) != TD_OK) {
        fprintf(stderr, "tensord: tokens file: %s\n", err);
        td__tls_files_fini(&tls_files);
        return 2;
    }
    if (!addr.loopback && !tls) {
        td__log(TD_LOG_WARN,
                "listening on %s without TLS (--insecure): anyone who can reach it can run "
                "work and read every session's tensors",
                cfg.listen);
    }
    if (check_listen(&addr, err, sizeof err) != 0) {
        td__log(TD_LOG_ERROR, "%s", err);
        td__tenants_destroy(app.tenants);
        td__tls_files_fini(&tls_files);
        return 1;
    }
    if (addr.is_unix && unix_socket_in_use(addr.host)) {
        td__log(TD_LOG_ERROR, "cannot listen on %s: another server is answering there",
                cfg.listen);
        td__tenants_destroy(app.tenants);
        td__tls_files_fini(&tls_files);
        return 1;
    }
    if (cfg.device_threads > 0) {
        char n[24];
        snprintf(n, sizeof n, "%llu", (unsigned long long)cfg.device_threads);
        /* read by the CPU backend's pool when the device opens; its matmul tiles run on
         * that pool with OpenBLAS at one thread (OPENBLAS_NUM_THREADS would come too late:
         * OpenBLAS reads it when the library loads) */
        setenv("TENSORD_CPU_THREADS", n, 1);
    }
    /* read by the device registry (engine/device.h) when it opens the devices */
    if (cfg.cpu_devices > 0) {
        char n[24];
        snprintf(n, sizeof n, "%llu", (unsigned long long)cfg.cpu_devices);
        setenv("TENSORD_CPU_DEVICES", n, 1);
    }
    if (cfg.devices[0] != '\0') setenv("TENSORD_DEVICES", cfg.devices, 1);

    if (td__devices_init(err, sizeof err) != TD_OK) {
        td__log(TD_LOG_ERROR, "cannot open devices: %s", err);
        td__tenants_destroy(app.tenants);
        td__tls_files_fini(&tls_files);
        return 1;
    }
    for (int i = 0; i < td__device_count(); i++) {
        td__device *d = td__device_at(i);
        td__log(TD_LOG_INFO, "device %s: %s", d->name, d->description);
    }
    td__log(TD_LOG_INFO, "default device (sessions that name none): %s",
            td__device_default()->name);
    warn_absent_token_devices(cfg.tokens_file);

    td__loop_handlers h = {.on_stop = on_stop, .on_reload = on_reload};
    if (td__loop_open(&h) != TD_OK) {
        td__log(TD_LOG_ERROR, "cannot set up the event loop");
        td__tenants_destroy(app.tenants);
        td__tls_files_fini(&tls_files);
        return 1;
    }
    td__graphcache_configure((size_t)cfg.graph_cache, cfg.graph_cache_bytes);
    td__quota_set_reclaim(td__server_reclaim); /* candidates, then cached graphs */
    td__buffer_set_reclaim(td__candidates_reclaim_device); /* a full device drops copies */
    td__candidates_configure(cfg.blob_cache_bytes);
    td__quota_set_default_bytes(cfg.max_tenant_bytes);
    td__blobstore *blobs = NULL;
    if (td__blobstore_create(cfg.blob_cache_bytes, cfg.cache_dir, &blobs, err, sizeof err) !=
        TD_OK) {
        td__log(TD_LOG_ERROR, "blob store: %s", err);
        td__loop_close();
        td__loop_run();
        td__tenants_destroy(app.tenants);
        td__tls_files_fini(&tls_files);
        return 1;
    }
    td__shm *shm = NULL;
    if (addr.is_unix && cfg.shm &&
        td__shm_start(addr.host, cfg.shm_bytes, cfg.shm_max_bytes, &shm, err, sizeof err) != TD_OK)
        td__log(TD_LOG_WARN, "shared memory off: %s (unix-socket clients use the stream)", err);
    uint64_t nofile = 0;
    uint64_t max_conn = td__conn_limit_init(cfg.max_connections, &nofile);
    td__service_opts so = {
        .target = addr.target,
        .net = {.max_connections = max_conn,
                .idle_timeout_s = cfg.idle_timeout_s,
                .max_streams = cfg.max_streams,
                .stream_window = cfg.stream_window,
                .transport_bytes = cfg.transport_bytes},
        .blobs = blobs,
        .shm = shm,
        .no_ring = !cfg.ring,
        .device_workers = cfg.device_workers,
        .cq_threads = cfg.cq_threads,
        .max_sessions = cfg.max_sessions,
        .max_session_bytes = cfg.max_session_bytes,
        .tenants = app.tenants,
        .tls = tls ? &tls_files : NULL,
        .on_drained = on_drained,
    };
    int port = 0;
    if (td__service_start(&so, &app.svc, &port, err, sizeof err) != TD_OK) {
        td__log(TD_LOG_ERROR, "%s", err);
        td__loop_close();
        td__loop_run();
        td__shm_stop(shm);
        td__blobstore_destroy(blobs);
        td__tenants_destroy(app.tenants);
        td__tls_files_fini(&tls_files);
        return 1;
    }
    if (cfg.metrics[0] != '\0') {
        td__listen_addr maddr;
        td__metrics_sources src = {.svc = app.svc, .tenants = app.tenants, .blobs = blobs,
                                   .shm = shm};
        int mport = 0;
        if (td__metrics_parse(cfg.metrics, &maddr, err, sizeof err) != 0 ||
            td__metrics_open(maddr.host, maddr.port, &src, &mport, err, sizeof err) != TD_OK) {
            td__log(TD_LOG_ERROR, "%s", err);
            td__service_shutdown(app.svc);
            td__service_cancel_all(app.svc);
            td__loop_run(); /* until the service has drained (on_drained closes the loop) */
            td__shm_stop(shm);
            td__blobstore_destroy(blobs);
            td__tenants_destroy(app.tenants);
            td__tls_files_fini(&tls_files);
            return 1;
        }
        char mshown[320];
        td__listen_format(&maddr, mport, mshown, sizeof mshown);
        if (!maddr.loopback)
            td__log(TD_LOG_WARN, "metrics on %s, not loopback: anyone who can reach it sees "
                                 "tenant names, memory use and op counts (no TLS, no tokens)",
                    mshown);
        td__log(TD_LOG_INFO, "metrics on http://%s/metrics (also /healthz, /readyz)", mshown);
    }
    if (shm != NULL) {
        /* The side socket gets the main socket's mode: whoever may talk to one may talk to
         * the other (the secret, not the mode, guards the regions). */
        struct stat sb;
        if (stat(addr.host, &sb) == 0) (void)chmod(td__shm_path(shm), sb.st_mode & 07777);
        td__log(TD_LOG_INFO, "shared memory for unix-socket sessions: %llu-byte regions "
                             "(up to %llu on request)%s, side socket %s",
                (unsigned long long)td__shm_bytes(shm),
                (unsigned long long)td__shm_max_bytes(shm),
                cfg.ring ? "" : " without request rings (--no-ring)", td__shm_path(shm));
    }
    char shown[320];
    td__listen_format(&addr, port, shown, sizeof shown);
    printf("listening on %s\n", shown);
    fflush(stdout);
    char sessions[32] = "no limit", bytes[32] = "no limit", tbytes[32] = "no limit";
    if (cfg.max_tenant_bytes != 0)
        snprintf(tbytes, sizeof tbytes, "%llu", (unsigned long long)cfg.max_tenant_bytes);
    if (cfg.max_sessions != 0)
        snprintf(sessions, sizeof sessions, "%llu", (unsigned long long)cfg.max_sessions);
    if (cfg.max_session_bytes != 0)
        snprintf(bytes, sizeof bytes, "%llu", (unsigned long long)cfg.max_session_bytes);
    td__tls_files_fini(&tls_files); /* gRPC keeps its own copies */
    td__log(TD_LOG_INFO,
            "tensord %s listening on %s (sessions: %s; bytes per session: %s; per tenant "
            "without a max_bytes quota: %s)",
            TD_VERSION_STRING, shown, sessions, bytes, tbytes);
    td__log(TD_LOG_INFO,
            "connections: at most %llu (open-file limit %llu), closed after %llu s without "
            "calls; %llu calls each, %llu-byte stream windows, %llu bytes of transport memory",
            (unsigned long long)max_conn, (unsigned long long)nofile,
            (unsigned long long)(cfg.idle_timeout_s ? cfg.idle_timeout_s
                                                    : TD_DEFAULT_IDLE_TIMEOUT_S),
            (unsigned long long)(cfg.max_streams ? cfg.max_streams : TD_DEFAULT_MAX_STREAMS),
            (unsigned long long)(cfg.stream_window ? cfg.stream_window
                                                   : TD_DEFAULT_STREAM_WINDOW),
            (unsigned long long)(cfg.transport_bytes ? cfg.transport_bytes
                                                     : TD_DEFAULT_TRANSPORT_BYTES));
    td__log(TD_LOG_INFO, "security: %s%s; %s", tls ? "TLS" : "plaintext",
            cfg.tls_client_ca[0] ? " with client certificates (mTLS)" : "",
            cfg.tokens_file[0] ? "bearer tokens required" : "no authentication (tenant 'default')");
    char status[400];
    snprintf(status, sizeof status, "listening on %s", shown);
    td__notify_ready(status);
    td__notify_watchdog_start();
    if (td__loop_timer_start(1000, 1000, service_tick, NULL, NULL) != TD_OK)
        td__log(TD_LOG_WARN, "cannot start the service timer: sessions that never open are "
                             "not timed out");

    td__loop_run();
    td__shm_stop(shm); /* after the service: every session and its region is gone */
    if (cfg.cache_dir[0] != '\0') td__candidates_flush(blobs);
    td__candidates_clear();
    td__blobstore_destroy(blobs); /* after the service: no session uses it any more */
    td__tenants_destroy(app.tenants);
    return app.exit_code;
}
