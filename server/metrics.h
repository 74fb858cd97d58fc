/* metrics.h — tensord's Prometheus metrics, and the HTTP listener that serves them with
 * /healthz and /readyz (`--metrics ADDR`, off by default; README "Monitoring").
 *
 * Two halves:
 *  - counters the hot paths update (bytes on the wire, failures, ops and their latency,
 *    batches): lock-free. Per-device counters are written by that device's worker threads
 *    (relaxed atomic adds, a handful of writers); the others are sharded by thread (a slot per
 *    completion-queue or worker thread, each on its own cache line) and summed on scrape;
 *  - the listener (libmicrohttpd, its own thread) that writes the text exposition format
 *    (https://prometheus.io/docs/instrumenting/exposition_formats/, version 0.0.4) by hand
 *    on each scrape, reading gauges (sessions, memory, caches, queue depth) from their
 *    owners under their own locks. Label values are bounded: tenant names come from the
 *    tokens file (or "default" / certificate names without one), device names from the
 *    devices, op and family names from the op table, status names from TD_STATUS_MAP.
 *
 * Built without libmicrohttpd (meson -Dmetrics=disabled, or libmicrohttpd-dev missing with
 * auto), the counters stay and td__metrics_open refuses with a message saying so.
 * Thread-safety: the counter functions from any thread; open/close on the loop thread.
 */
#ifndef TD_SERVER_METRICS_H
#define TD_SERVER_METRICS_H

#include "tensord.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct td__service;
struct td__tenants;
struct td__blobstore;
struct td__device;

#define TD_METRICS_MAX_DEVICES 16

/* The slot of a device in the per-device counters: its position among td__device_at(),
 * or -1 when past TD_METRICS_MAX_DEVICES (then not counted). */
int td__metrics_device_slot(const struct td__device *dev);
/* Requests received for the device of `slot` and not yet finished (the
 * tensord_device_queue_depth gauge); 0 for a slot out of range. Any thread. */
long td__metrics_device_queue(int slot);

/* Message bytes received from / sent to clients on every call (gRPC message lengths). */
void td__metrics_bytes_received(size_t nbytes);
void td__metrics_bytes_sent(size_t nbytes);
/* One Failure reply of status st sent to a client (an op, a read, a write, ...). */
void td__metrics_failure(td_status st);
/* A worker of device `slot` only: one op of `opcode` executed (successfully or not), that
 * took `ns` nanoseconds of the worker's time (on GPUs: its launch, kernels run
 * asynchronously); `ns` UINT64_MAX counts the op without timing it (graph runs). */
void td__metrics_op(int slot, uint32_t opcode, uint64_t ns);
/* A worker of device `slot` only: a batch (graph = false) or graph run finished, `ns` after it
 * was received. */
void td__metrics_batch(int slot, bool graph, uint64_t ns);
/* Requests received for device `slot` and not finished yet (+1 on submit, -1 when done). */
void td__metrics_queue_add(int slot, long delta);
/* Nanoseconds on CLOCK_MONOTONIC (the clock of the durations above). */
uint64_t td__metrics_now_ns(void);

/* What the scrape reads besides the counters (all borrowed; they outlive the listener). */
typedef struct td__metrics_sources {
    struct td__service *svc;
    struct td__tenants *tenants;
    struct td__blobstore *blobs; /* may be NULL */
    struct td__shm *shm;         /* may be NULL (not a unix listener, or --no-shm) */
} td__metrics_sources;

/* Write the whole exposition into a new NUL-terminated buffer (*out, td__free it) of
 * *len bytes. TD_OK or TD_ENOMEM. Any thread. */
td_status td__metrics_render(const td__metrics_sources *src, char **out, size_t *len);

/* Start the HTTP listener on `host`:`port` (port 0: any free one), serving GET /metrics,
 * /healthz (200 while the process answers) and /readyz (200 while td__service_serving,
 * else 503 with the reason). *bound_port receives the port. TD_OK; TD_EIO (cannot bind,
 * or the host does not resolve); TD_EUNSUPPORTED (built without libmicrohttpd); message
 * in err. */
td_status td__metrics_open(const char *host, int port, const td__metrics_sources *src,
                           int *bound_port, char *err, size_t errlen);
/* Stop the listener (waits for a scrape in progress). Idempotent. */
void td__metrics_close(void);
#endif
