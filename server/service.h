/* service.h — tensord's gRPC service: the server, its completion-queue threads, the device
 * workers, GetInfo, and the bookkeeping that server sessions (server/session.c) share.
 *
 * Threads (DESIGN.md §4):
 *  - completion-queue threads (td__service_opts.cq_threads, named td-cq0, td-cq1, ...)
 *    block in grpc_completion_queue_next and run each event's handler: they accept calls,
 *    decode messages and hand work on;
 *  - each device has a bounded pool of td__workers (td__service_opts.device_workers): a
 *    session's queue lives on one of them, chosen when it opens, so its engine calls run
 *    in order on one thread, and each worker serves its sessions fairly; sessions on
 *    different workers of a device run at once (on a GPU: on their own streams);
 *  - the loop thread (server/loop.c) owns start-up and shutdown and calls the functions
 *    below that are marked "loop thread".
 *
 * Every operation started on a call carries a td__tag; when it completes, the
 * completion-queue thread calls tag->fn(tag, ok).
 */
#ifndef TD_SERVER_SERVICE_H
#define TD_SERVER_SERVICE_H

#include "auth/tenant.h"
#include "auth/tls.h"
#include "engine/device.h"
#include "engine/worker.h"
#include "tensord.h"

#include <grpc/grpc.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Completion-queue threads: at most TD_SERVICE_CQ_THREADS_MAX (--cq-threads); by default
 * 1 on a host with fewer than TD_SERVICE_CQ_SMALL_HOST_CPUS online CPUs, else 2.
 * Why one on a small host: gRPC's poller (epoll1) lets one thread of a completion queue
 * poll at a time and, whenever it wakes with events while another thread waits on the
 * queue, wakes that one to poll next before it handles them, so with two threads every
 * read of a connection costs a thread switch more and runs on alternating cores. On the
 * 2-vCPU build VM that beside a sending client and the device worker made a 1 GiB upload
 * over TCP ~0.7x the raw TCP stream, against ~0.9x with one thread (~1.0x when nothing
 * else ran; issue 12); several sessions uploading at once were no faster with two. On a larger host the second thread
 * lets one session's receive go on while another's message is decoded, and uploads there
 * met 0.9x the raw stream with two (16-core H100/H200 hosts); one is unmeasured there. */
#define TD_SERVICE_CQ_THREADS_MAX 16
#define TD_SERVICE_CQ_SMALL_HOST_CPUS 4
/* Most worker threads one device may have (--device-workers). */
#define TD_SERVICE_MAX_DEVICE_WORKERS TD_WORKERS_PER_DEVICE_MAX
/* Workers of an accelerator by default: enough that a session waiting on its stream or
 * running small ops does not hold up the others, few enough that each keeps its GPU
 * stream busy (issue 17: 16 small trainers on one H200). */
#define TD_SERVICE_ACCEL_WORKERS 4

typedef struct td__service td__service;

typedef struct td__tag {
    void (*fn)(struct td__tag *tag, bool ok);
    /* Handoff between the thread that starts an operation and the completion-queue thread
     * that runs fn: gRPC orders the two, but inside libgrpc, where ThreadSanitizer cannot
     * see it; this release/acquire pair states it in our own code. */
    atomic_uint armed;
} td__tag;

/* Call right before handing `t` to gRPC. */
static inline void td__tag_arm(td__tag *t)
{
    atomic_fetch_add_explicit(&t->armed, 1, memory_order_release);
}

/* Transport defaults (README "Limits"). A partial message parks at most the stream window
 * per stream in gRPC; the resource quota bounds all of it together. 2 MiB windows keep a
 * 64 MiB upload at full speed on loopback (tests/e2e/bulk.c, BENCHMARKS.md P3). */
#define TD_DEFAULT_MAX_STREAMS 32
#define TD_DEFAULT_STREAM_WINDOW ((uint64_t)2 << 20)
#define TD_DEFAULT_TRANSPORT_BYTES ((uint64_t)512 << 20)
#define TD_DEFAULT_IDLE_TIMEOUT_S 300

/* Transport limits (README "Limits"). */
typedef struct td__transport_limits {
    uint64_t max_connections;    /* open client connections (server/connlimit.h) */
    uint64_t idle_timeout_s;     /* a connection without calls is closed after this */
    uint64_t max_streams;        /* concurrent calls (HTTP/2 streams) per connection */
    uint64_t stream_window;      /* HTTP/2 receive window per stream, bytes */
    uint64_t transport_bytes;    /* gRPC resource quota: all connections' buffers, bytes */
} td__transport_limits;

typedef struct td__service_opts {
    const char *target;          /* gRPC bind address: "127.0.0.1:0", "unix:/path" */
    td__transport_limits net;    /* zero fields: defaults */
    uint64_t max_sessions;       /* 0 = no limit */
    uint64_t max_session_bytes;  /* per-session device bytes, 0 = no limit */
    struct td__blobstore *blobs; /* content-addressed blob store (borrowed), or NULL */
    struct td__shm *shm;         /* shared-memory regions for unix-socket sessions (server/
                                  * shm.h; borrowed, outlives the service), or NULL: off */
    bool no_ring;                /* true: regions without the request ring (--no-ring) */
    /* Worker threads per device, 1..TD_SERVICE_MAX_DEVICE_WORKERS; 0: the default,
     * TD_SERVICE_ACCEL_WORKERS for an accelerator, 1 for any other device (--device-workers). */
    uint64_t device_workers;
    /* Completion-queue threads, 1..TD_SERVICE_CQ_THREADS_MAX; 0: the default (above). */
    uint64_t cq_threads;
    td__tenants *tenants;        /* who may call (borrowed; outlives the service) */
    const td__tls_files *tls;    /* NULL: plaintext; else TLS (mTLS with a client CA) */
    /* Called once, on any thread, when shutdown has finished: no call is left. */
    void (*on_drained)(void *arg);
    void *arg;
} td__service_opts;

/* Create the server, bind, start it and its threads (devices must be initialised).
 * *port receives the bound TCP port (0 for unix sockets). On failure returns TD_EIO
 * (cannot bind), TD_ENOMEM or TD_EINTERNAL with a message in err. Loop thread. */
td_status td__service_start(const td__service_opts *opts, td__service **out, int *port,
                            char *err, size_t errlen);
/* Start draining: open sessions continue, new ones are refused ("server is shutting
 * down"), health turns NOT_SERVING; the listener stays up (connections that stay open can
 * still read the statuses of sessions ended later). Idempotent. Loop thread. */
void td__service_drain_begin(td__service *s);
/* Drain (as above) and stop accepting calls; calls in progress continue. on_drained fires
 * once all are gone. Idempotent. Loop thread. */
void td__service_shutdown(td__service *s);
/* Cancel every call in progress (their sessions are then freed). Loop thread. */
void td__service_cancel_all(td__service *s);
/* True when no session has queued or running work. Any thread. */
bool td__service_idle(td__service *s);
/* After on_drained: stop the threads and free everything. NULL is a no-op. Loop thread. */
void td__service_destroy(td__service *s);

/* Whether the server takes new clients: false while shutting down, after gRPC's listener
 * failed for good (it logged "Failed accept4"; see server/connlimit.h for why that no
 * longer happens on EMFILE), or while connections are being refused for lack of file
 * descriptors (td__conn_fd_trouble). For a health check (NOT_SERVING when false); `why`
 * (may be NULL) gets the reason. Any thread. */
bool td__service_serving(td__service *s, char *why, size_t whylen);

/* After a tokens-file reload: end every open session whose identity (bearer token or
 * client certificate name) no longer maps to its tenant, with UNAUTHENTICATED. Returns
 * the number of sessions ended. Loop thread. */
size_t td__service_revoke_stale(td__service *s, td__tenants *tenants);

/* Reloadable limits (SIGHUP): sessions opened from now on get them; 0 = no limit. Any
 * thread. */
void td__service_set_limits(td__service *s, uint64_t max_sessions, uint64_t max_session_bytes);

/* New certificate chain, key and client CA (copied) for the handshakes from now on;
 * connections already up keep the certificate they were made with, so no session ends.
 * Errors: TD_EINVAL when the server runs without TLS or the client CA is added or removed
 * (gRPC fixes whether client certificates are asked for at start: restart for that),
 * TD_ENOMEM; err says why and the certificate in force stays. Any thread. */
td_status td__service_tls_reload(td__service *s, const td__tls_files *tls, char *err,
                                 size_t errlen);

/* Sessions registered (open, or their call taken over and awaiting the open message).
 * For the drain. Any thread. */
size_t td__service_session_count(td__service *s);
/* End every session with `code` and `why` (the drain's end: UNAVAILABLE "server is shutting
 * down"). Returns how many. Loop thread. */
size_t td__service_end_sessions(td__service *s, grpc_status_code code, const char *why);

/* One open session, for the admin listing (tensorctl sessions). */
typedef struct td__session_row {
    uint64_t id;
    char tenant[TD_TENANT_NAME_MAX];
    char device[32];
    char peer[128];
    uint64_t bytes;  /* device memory it holds (after its last finished job) */
    uint64_t ops;    /* ops executed for it */
    uint64_t age_ms; /* since its call was taken over */
} td__session_row;
/* Copy up to `cap` open sessions into rows (in no set order); returns how many are open
 * (may exceed cap). Any thread. */
size_t td__service_sessions_list(td__service *s, td__session_row *rows, size_t cap);
/* End open session `session_id` with `code` and `why`; false when no open session has
 * that id. Any thread. */
bool td__service_session_kill(td__service *s, uint64_t session_id, grpc_status_code code,
                              const char *why);

/* ---- for server/session.c (any thread) ---- */
grpc_completion_queue *td__service_cq(td__service *s);
/* Open a session's queue on the least loaded worker of `dev` (fewest queues; ties to the
 * lowest index, so the same sequence of opens and closes places sessions the same way).
 * TD_OK; TD_ENOTFOUND (no such device); TD_ENOMEM. */
td_status td__service_queue_open(td__service *s, const td__device *dev, td__worker_queue **out);
/* Worker threads of `dev` (0: not a device of this service). Any thread. */
int td__service_device_workers(const td__service *s, const td__device *dev);
/* Reserve a session slot against max_sessions; false when full or shutting down. */
bool td__service_session_reserve(td__service *s, uint64_t *id_out);
void td__service_session_unreserve(td__service *s);
uint64_t td__service_max_session_bytes(td__service *s);
/* The blob store shared by the sessions (NULL when the server has none). */
struct td__blobstore *td__service_blobs(const td__service *s);
/* The shared-memory side of a unix-socket listener (NULL: none, or --no-shm). */
struct td__shm *td__service_shm(const td__service *s);
/* Whether sessions with a region may also get a request ring (false: --no-ring). */
bool td__service_ring(const td__service *s);
uint64_t td__service_max_sessions(td__service *s);
bool td__service_shutting_down(td__service *s);
/* Closures submitted to workers and not yet finished (for td__service_idle). */
void td__service_work_add(td__service *s, long delta);
/* Live sessions, for td__service_revoke_stale: a session registers once its call is taken
 * over (td__srv_session_start) and unregisters before it is freed. `id` is copied.
 * Returns the registration (NULL when out of memory: the session is then never revoked). */
struct td__srv_session;
struct td__live_session;
struct td__live_session *td__service_live_add(td__service *s, struct td__srv_session *ss,
                                              td__quota *quota, const td__identity *id,
                                              const char *peer);
void td__service_live_remove(td__service *s, struct td__live_session *live);
/* The session's engine session is gone (its queue closed): it no longer counts toward its
 * device's load (placement, per-device metrics), though it stays listed until the call
 * ends. Called before the session's slot is given back, so a client that sees the
 * server's session count drop also sees the device free (NULL is a no-op). */
void td__service_live_closed(struct td__live_session *live);
/* The session received its first whole message (NULL is a no-op). */
void td__service_live_opened(struct td__live_session *live);
/* The session is open as `session_id` on `device` (a name that outlives the service), of
 * metrics slot `slot` (server/metrics.h); NULL is a no-op. */
void td__service_live_set_device(struct td__live_session *live, uint64_t session_id, int slot,
                                 const char *device);
/* Choose the device of a session being opened. `request` is the device string the client
 * sent ("" when none), `named` the device it names (td__device_find: NULL for a placement
 * request, the default device for ""). Tenant `quota`'s devices= list (auth/tokens.h)
 * restricts the choice: a named device outside it is TD_EUNAUTHENTICATED ("tenant 'T' may not use
 * device cpu:1 (its devices: cpu:0)"); "" outside it is placed like "auto" among the
 * allowed devices. A placement request takes, among the devices the tenant may use that
 * fit it ("cuda": the CUDA devices; "auto": the accelerators when the tenant may use one,
 * else its CPU devices, else every device it may use), the device with the
 * least load (open sessions on it + requests queued or running for it, the
 * tensord_device_queue_depth gauge), then the most free memory (backend memory_info), then
 * the first in registry order. The `n_exclude` devices of `exclude` (the further devices the
 * session names: "auto,cpu:1" must not place its first device on cpu:1) are no candidates.
 * The choice is counted for `live` at once, under a lock, so
 * concurrent opens spread. On TD_OK *out is the device and msg says how it was chosen (for
 * the log line); else TD_EUNAUTHENTICATED / TD_ENOTFOUND (no candidate) with the message for the
 * client. Thread-safety: any thread. */
td_status td__service_place(td__service *s, const td__quota *quota, const char *request,
                            td__device *named, td__device *const *exclude, size_t n_exclude,
                            struct td__live_session *live, td__device **out, char *msg,
                            size_t msglen);
/* The session's ops executed and device bytes held so far (after each job; NULL is a
 * no-op). For the admin listing. */
void td__service_live_progress(struct td__live_session *live, uint64_t ops, uint64_t bytes);
/* Call fn(arg, tenant, slot) for every open session (slot -1: not open yet), under the
 * live-session lock: fn must not call back into the service. For the metrics scrape. */
void td__service_sessions_foreach(td__service *s,
                                  void (*fn)(void *arg, const char *tenant, int slot),
                                  void *arg);

/* A session whose first message is not complete after this long is ended with
 * DEADLINE_EXCEEDED: gRPC 1.51 keeps granting HTTP/2 window to a message as long as its
 * length prefix says (even 4 GiB), and never answers a stream whose message stops short. */
#define TD_OPEN_TIMEOUT_MS 10000
/* Periodic upkeep (about once a second): ends sessions past TD_OPEN_TIMEOUT_MS without a
 * first message. Loop thread. */
void td__service_tick(td__service *s);
/* A call object alive / gone: shutdown finishes when none is left. */
void td__service_call_begin(td__service *s);
void td__service_call_end(td__service *s);

/* gRPC status code of a td_status (the table in tensord.h). */
grpc_status_code td__grpc_code(td_status st);
#endif
