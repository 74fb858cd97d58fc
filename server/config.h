/* config.h — tensord's settings: defaults, the `key = value` config file, listen addresses.
 *
 * Flags and the file set the same fields through td__config_set, so a key means the same
 * thing in both places and main.c applies the file first, then the flags.
 * Thread-safety: used by main() before any other thread starts.
 */
#ifndef TD_SERVER_CONFIG_H
#define TD_SERVER_CONFIG_H

#include "common/bytes.h"
#include "common/log.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TD_DEFAULT_LISTEN "127.0.0.1:7070"
#define TD_DEFAULT_MAX_SESSIONS 256
#define TD_MAX_CPU_DEVICES 8 /* backends/cpu/cpu_backend.c's TD_CPU_MAX_DEVICES */
#define TD_DEFAULT_BLOB_CACHE_BYTES ((uint64_t)1 << 30)
/* Memory limits when none is configured, in percent of the host's physical RAM (the CPU
 * device's memory; GPU devices also stop at their own memory). */
#define TD_DEFAULT_SESSION_RAM_PERCENT 50
#define TD_DEFAULT_TENANT_RAM_PERCENT 75
#define TD_DEFAULT_GRAPH_CACHE_BYTES ((uint64_t)64 << 20)
/* SIGTERM: how long open sessions get to finish before they are ended. Below the unit's
 * TimeoutStopSec=30 (deploy/tensord.service) with room for the cancel that follows
 * (server/main.c waits at most TD_STUCK_MS more). */
#define TD_DEFAULT_DRAIN_TIMEOUT_S 20
#define TD_MAX_DRAIN_TIMEOUT_S 3600

typedef struct td__config {
    char listen[512];
    enum td__log_level log_level;
    enum td__log_format log_format; /* TD_LOG_FORMAT_TEXT (default) or _JSON */
    char metrics[512];          /* Prometheus/health HTTP listener, "" = off (td__metrics_parse) */
    uint64_t max_sessions;      /* 0 = no limit */
    uint64_t max_session_bytes; /* 0 = no limit; default TD_DEFAULT_SESSION_RAM_PERCENT */
    uint64_t max_tenant_bytes;  /* max_bytes of tenants that set none; 0 = no limit; default
                                 * TD_DEFAULT_TENANT_RAM_PERCENT of RAM */
    uint64_t graph_cache_bytes; /* memory of the graphs kept across sessions (default 64M) */
    uint64_t blob_cache_bytes;  /* blob store memory cap (default 1 GiB) */
    char cache_dir[512];        /* blob store directory; "" = memory only */
    uint64_t graph_cache;       /* graphs kept across sessions (default 256) */
    uint64_t device_threads;    /* CPU device threads, 0 = one per core */
    uint64_t device_workers;    /* worker threads per device, 0 = default (service.h) */
    uint64_t cpu_devices;       /* CPU devices (cpu:0..cpu:N-1), 1..8; 0 = not set (one) */
    char devices[512];          /* devices to expose, "" = all (engine/device.h's list) */
    uint64_t drain_timeout_s;   /* SIGTERM: seconds open sessions get (default 20) */
    bool insecure;              /* allow non-loopback addresses without TLS */
    bool shm;                   /* offer shared memory to unix-socket sessions (default on) */
    uint64_t shm_bytes;         /* size of each session's region (TD_SHM_DEFAULT_BYTES) */
    uint64_t shm_max_bytes;     /* the largest region a session may ask for
                                 * (TD_SHM_DEFAULT_MAX_BYTES; never below shm_bytes) */
    bool ring;                  /* offer those regions' request ring too (default on) */
    char tls_cert[512];         /* PEM certificate chain; "" = no TLS */
    char tls_key[512];          /* its PEM private key */
    char tls_client_ca[512];    /* PEM CA bundle; set: client certificates required */
    char tokens_file[512];      /* "" = authentication off (auth/tokens.h) */
    /* Transport limits (server/service.h has the defaults; 0 = that default). */
    uint64_t max_connections;   /* default: from the open-file limit (server/connlimit.h) */
    uint64_t idle_timeout_s;    /* connections without calls are closed after this */
    uint64_t max_streams;       /* concurrent calls per connection */
    uint64_t stream_window;     /* HTTP/2 receive window per stream, bytes */
    uint64_t transport_bytes;   /* memory of all connections' gRPC buffers, bytes */
    uint64_t cq_threads;        /* completion-queue threads (gRPC's event threads) */
} td__config;

void td__config_defaults(td__config *c);
/* The host's physical RAM in bytes (0 when unknown: the derived defaults are then "no
 * limit"), and `percent` of it. */
uint64_t td__config_host_ram(void);
uint64_t td__config_ram_share(unsigned percent);

/* Set one key ("listen", "log_level", "max_sessions", "max_session_bytes",
 * "max_tenant_bytes", "graph_cache_bytes", "insecure",
 * "device_threads", "device_workers", "cpu_devices", "devices", "tls_cert", "tls_key", "tls_client_ca", "tokens_file") from its text
 * form. Returns 0, or -1 with a message in err. */
int td__config_set(td__config *c, const char *key, const char *value, char *err, size_t errlen);

/* Read a config file: `key = value` lines, '#' or ';' comments, blank lines ignored.
 * Values are taken as written: quotes and trailing comments are refused with a message
 * saying so (they are not part of the format). Returns 0, or -1 with "FILE:LINE: problem"
 * in err. */
int td__config_load(td__config *c, const char *path, char *err, size_t errlen);

/* A parsed listen address. */
typedef struct td__listen_addr {
    bool is_unix;
    bool loopback;   /* unix sockets count as loopback */
    char host[256];  /* without brackets; for unix: the path */
    int port;        /* 0 = pick a free one */
    char target[300]; /* what gRPC binds: "HOST:PORT", "[V6]:PORT", "unix:PATH" */
} td__listen_addr;

/* Parse "HOST:PORT", "[IPV6]:PORT" or "unix:PATH". Returns 0, or -1 with a message. */
int td__listen_parse(const char *text, td__listen_addr *out, char *err, size_t errlen);

/* The metrics listener address: "PORT" (on 127.0.0.1), "HOST:PORT" or "[IPV6]:PORT"; no
 * unix sockets. Returns 0, or -1 with a message. */
int td__metrics_parse(const char *text, td__listen_addr *out, char *err, size_t errlen);

/* "HOST:PORT" / "[V6]:PORT" / "unix:PATH" with the given (bound) port, for the
 * "listening on" line. */
void td__listen_format(const td__listen_addr *a, int port, char *buf, size_t len);

#endif
