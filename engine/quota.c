/* quota.c — per-tenant resource accounting (see quota.h).
 *
 * Each counter is charged with a compare-and-swap loop that checks the limit against the
 * value it replaces, so concurrent charges can never overshoot a limit together. A tensor
 * charges two counters (tensors, bytes); when the second refuses, the first is given back.
 *
 * The default max_bytes and the reclaim hook are process-wide (set once by tensord before
 * serving), so the auth layer's per-tenant limits stay exactly what the tokens file says.
 */
#include "engine/quota.h"

#include <stdio.h>
#include <string.h>

static atomic_ullong g_default_bytes;
static _Atomic(td__quota_reclaim_fn) g_reclaim;

void td__quota_set_default_bytes(uint64_t max_bytes) { atomic_store(&g_default_bytes, max_bytes); }
uint64_t td__quota_default_bytes(void) { return atomic_load(&g_default_bytes); }
void td__quota_set_reclaim(td__quota_reclaim_fn fn) { atomic_store(&g_reclaim, fn); }

uint64_t td__quota_max_bytes(const td__quota *q)
{
    uint64_t own = atomic_load(&q->max_bytes);
    return own != 0 ? own : atomic_load(&g_default_bytes);
}

/* " (the server's default, --max-tenant-bytes)" when the limit in force is the default. */
static const char *limit_source(const td__quota *q)
{
    return atomic_load(&q->max_bytes) == 0 ? " (the server default, --max-tenant-bytes)" : "";
}

void td__quota_init(td__quota *q, const char *name)
{
    memset(q, 0, sizeof *q);
    snprintf(q->name, sizeof q->name, "%s", name);
    atomic_init(&q->max_bytes, 0);
    atomic_init(&q->max_sessions, 0);
    atomic_init(&q->max_tensors, 0);
    atomic_init(&q->max_tensor_bytes, 0);
    atomic_init(&q->max_queued_batches, 0);
    atomic_init(&q->bytes, 0);
    atomic_init(&q->sessions, 0);
    atomic_init(&q->tensors, 0);
    atomic_init(&q->queued_batches, 0);
}

void td__quota_set_limits(td__quota *q, const td__quota_limits *lim)
{
    atomic_store(&q->max_bytes, lim->max_bytes);
    atomic_store(&q->max_sessions, lim->max_sessions);
    atomic_store(&q->max_tensors, lim->max_tensors);
    atomic_store(&q->max_tensor_bytes, lim->max_tensor_bytes);
    atomic_store(&q->max_queued_batches, lim->max_queued_batches);
}

void td__quota_get_limits(const td__quota *q, td__quota_limits *out)
{
    out->max_bytes = atomic_load(&q->max_bytes);
    out->max_sessions = atomic_load(&q->max_sessions);
    out->max_tensors = atomic_load(&q->max_tensors);
    out->max_tensor_bytes = atomic_load(&q->max_tensor_bytes);
    out->max_queued_batches = atomic_load(&q->max_queued_batches);
}

/* Add n to *c unless the result would pass limit (0 = none) or overflow. On refusal
 * *held receives the value seen. */
static bool charge(atomic_ullong *c, uint64_t n, uint64_t limit, uint64_t *held)
{
    unsigned long long cur = atomic_load(c);
    do {
        if (cur + n < cur || (limit != 0 && cur + n > limit)) {
            *held = cur;
            return false;
        }
    } while (!atomic_compare_exchange_weak(c, &cur, cur + n));
    return true;
}

td_status td__quota_tensor_charge(td__quota *q, uint64_t nbytes, uint64_t size, char *err,
                                  size_t errlen)
{
    uint64_t lim = atomic_load(&q->max_tensor_bytes), held;
    if (lim != 0 && size > lim) {
        snprintf(err, errlen,
                 "tenant '%s': a tensor of %llu bytes exceeds the max_tensor_bytes quota of %llu",
                 q->name, (unsigned long long)size, (unsigned long long)lim);
        return TD_EQUOTA;
    }
    lim = atomic_load(&q->max_tensors);
    if (!charge(&q->tensors, 1, lim, &held)) {
        snprintf(err, errlen, "tenant '%s': max_tensors quota of %llu live tensors reached",
                 q->name, (unsigned long long)lim);
        return TD_EQUOTA;
    }
    if (nbytes == 0) return TD_OK;
    if (td__quota_bytes_charge(q, nbytes, "allocating", err, errlen) != TD_OK) {
        atomic_fetch_sub(&q->tensors, 1);
        return TD_EQUOTA;
    }
    return TD_OK;
}

td_status td__quota_bytes_charge(td__quota *q, uint64_t nbytes, const char *what, char *err,
                                 size_t errlen)
{
    uint64_t lim = td__quota_max_bytes(q), held;
    if (charge(&q->bytes, nbytes, lim, &held)) return TD_OK;
    td__quota_reclaim_fn reclaim = atomic_load(&g_reclaim);
    if (reclaim != NULL && reclaim(q, nbytes) > 0 && charge(&q->bytes, nbytes, lim, &held))
        return TD_OK;
    snprintf(err, errlen,
             "tenant '%s': %s %llu bytes would exceed the max_bytes quota%s (%llu of %llu "
             "bytes in use)",
             q->name, what, (unsigned long long)nbytes, limit_source(q),
             (unsigned long long)held, (unsigned long long)lim);
    return TD_EQUOTA;
}

void td__quota_bytes_uncharge(td__quota *q, uint64_t nbytes) { atomic_fetch_sub(&q->bytes, nbytes); }

void td__quota_tensor_uncharge(td__quota *q, uint64_t nbytes)
{
    atomic_fetch_sub(&q->bytes, nbytes);
    atomic_fetch_sub(&q->tensors, 1);
}

td_status td__quota_session_charge(td__quota *q, char *err, size_t errlen)
{
    uint64_t lim = atomic_load(&q->max_sessions), held;
    if (charge(&q->sessions, 1, lim, &held)) return TD_OK;
    snprintf(err, errlen, "tenant '%s': max_sessions quota of %llu open sessions reached",
             q->name, (unsigned long long)lim);
    return TD_EQUOTA;
}

void td__quota_session_uncharge(td__quota *q) { atomic_fetch_sub(&q->sessions, 1); }

td_status td__quota_batch_charge(td__quota *q, char *err, size_t errlen)
{
    uint64_t lim = atomic_load(&q->max_queued_batches), held;
    if (charge(&q->queued_batches, 1, lim, &held)) return TD_OK;
    snprintf(err, errlen,
             "tenant '%s': max_queued_batches quota of %llu batches waiting to run reached",
             q->name, (unsigned long long)lim);
    return TD_EQUOTA;
}

void td__quota_batch_uncharge(td__quota *q) { atomic_fetch_sub(&q->queued_batches, 1); }
