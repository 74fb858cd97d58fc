/* quota.h — per-tenant resource accounting shared by every session of a tenant.
 *
 * One td__quota exists per tenant name for the life of the process (auth/tenant.c owns
 * them), so counts survive a tokens-file reload and limits can be changed under running
 * sessions. Counters are atomics charged with compare-and-swap loops, so sessions of one
 * tenant on different device workers and gRPC threads charge the same object without a
 * lock, and a charge that would pass a limit is refused without ever being visible.
 *
 * A refusal is TD_EQUOTA with a message naming the tenant and the quota, for that request
 * only: nothing already charged is touched.
 * Thread-safety: every function is safe from any thread.
 */
#ifndef TD_ENGINE_QUOTA_H
#define TD_ENGINE_QUOTA_H

#include "tensord.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define TD_TENANT_NAME_MAX 64

/* Zero fields mean "no limit" (max_bytes: the process default, td__quota_set_default_bytes). */
typedef struct td__quota_limits {
    uint64_t max_bytes;          /* memory held for the tenant: device buffers (aliases and
                                  * buffers still being sent included), blob pins, graphs */
    uint64_t max_sessions;       /* open sessions */
    uint64_t max_tensors;        /* live tensors (aliases included, failed ops not) */
    uint64_t max_tensor_bytes;   /* largest single tensor */
    uint64_t max_queued_batches; /* op batches received but not yet executed */
} td__quota_limits;

typedef struct td__quota {
    char name[TD_TENANT_NAME_MAX]; /* the tenant, printable ASCII */
    atomic_ullong max_bytes, max_sessions, max_tensors, max_tensor_bytes, max_queued_batches;
    atomic_ullong bytes, sessions, tensors, queued_batches;
} td__quota;

/* Initialise *q for tenant `name` (truncated to TD_TENANT_NAME_MAX - 1) with no limits. */
void td__quota_init(td__quota *q, const char *name);
/* Replace the limits (running sessions see the new ones at their next charge). */
void td__quota_set_limits(td__quota *q, const td__quota_limits *lim);
void td__quota_get_limits(const td__quota *q, td__quota_limits *out);

/* Charge one tensor of `nbytes` device bytes (0 for an alias of an existing buffer; the
 * largest-tensor check uses `size`, its logical size). TD_OK or TD_EQUOTA with a message.
 * The bytes and the tensor are given back separately when a buffer outlives its first
 * tensor: td__quota_tensor_uncharge(q, 0) for the tensor, td__quota_bytes_uncharge for
 * the buffer (engine/tensor.h). */
td_status td__quota_tensor_charge(td__quota *q, uint64_t nbytes, uint64_t size, char *err,
                                  size_t errlen);
void td__quota_tensor_uncharge(td__quota *q, uint64_t nbytes);
/* Charge `nbytes` of memory held for the tenant that is not a new tensor (a copy-on-write
 * buffer, a pinned blob, a graph definition); `what` is the phrase before the byte count in
 * the message, e.g. "pinning a blob of". When the limit would be passed, the reclaim hook (if set) is asked once to
 * free the tenant's reclaimable memory, then the charge is tried again.
 * TD_OK or TD_EQUOTA with "tenant 'T': <what> N bytes would exceed the max_bytes quota
 * (H of L bytes in use)". */
td_status td__quota_bytes_charge(td__quota *q, uint64_t nbytes, const char *what, char *err,
                                 size_t errlen);
void td__quota_bytes_uncharge(td__quota *q, uint64_t nbytes);
/* The max_bytes limit in force: the tenant's own, else the process default (0: none). */
uint64_t td__quota_max_bytes(const td__quota *q);

/* The max_bytes limit of every tenant that sets none (0: no limit; the default). tensord
 * sets it from --max-tenant-bytes before serving. */
void td__quota_set_default_bytes(uint64_t max_bytes);
uint64_t td__quota_default_bytes(void);

/* Called when a bytes charge of q would pass its limit: free what the tenant holds only as
 * a cache (server/graphcache.c) and return the bytes given back. Must not call back into
 * a charge of q. NULL (the default): nothing is reclaimed. Set before serving. */
typedef uint64_t (*td__quota_reclaim_fn)(td__quota *q, uint64_t need);
void td__quota_set_reclaim(td__quota_reclaim_fn fn);
/* One session. TD_OK or TD_EQUOTA with a message. */
td_status td__quota_session_charge(td__quota *q, char *err, size_t errlen);
void td__quota_session_uncharge(td__quota *q);
/* One queued batch. TD_OK or TD_EQUOTA with a message. */
td_status td__quota_batch_charge(td__quota *q, char *err, size_t errlen);
void td__quota_batch_uncharge(td__quota *q);
#endif
