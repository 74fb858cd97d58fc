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

/* Zero fields mean "no limit". */
typedef struct td__quota_limits {
    uint64_t max_bytes;          /* device bytes held by all the tenant's tensors */
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
 * largest-tensor check uses `size`, its logical size). TD_OK or TD_EQUOTA with a message. */
td_status td__quota_tensor_charge(td__quota *q, uint64_t nbytes, uint64_t size, char *err,
                                  size_t errlen);
void td__quota_tensor_uncharge(td__quota *q, uint64_t nbytes);
/* One session. TD_OK or TD_EQUOTA with a message. */
td_status td__quota_session_charge(td__quota *q, char *err, size_t errlen);
void td__quota_session_uncharge(td__quota *q);
/* One queued batch. TD_OK or TD_EQUOTA with a message. */
td_status td__quota_batch_charge(td__quota *q, char *err, size_t errlen);
void td__quota_batch_uncharge(td__quota *q);
#endif
