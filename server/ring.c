/* ring.c — the thread that serves a session's request ring (ring.h says why it is built
 * this way; the layout is proto/wire_limits.h's TD_RING_*).
 *
 * One request: read REQ_LEN once and check it against the request area, copy the request
 * out of the region, split it into frames (each length checked against what is left), and
 * for each frame decode a td__request with the stream's decoder, check that the ring may
 * carry it, wait until the stream has run everything before its seq, claim the seq, run it
 * with the stream's handlers under the session's exec_mu (replies come back here through
 * td__ring_reply), then publish the reply area and ring the client's doorbell.
 */
#include "server/ring.h"

#include "common/alloc.h"
#include "common/doorbell.h"
#include "common/log.h"
#include "server/metrics.h"
#include "server/session_int.h"
#include "wire_limits.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* How long one futex sleep lasts before the thread re-checks its stop flag (a stop also
 * wakes it; this only bounds a lost wake-up). */
#define RING_SLEEP_NS (UINT64_C(200) * 1000 * 1000)
/* How long a request spins for the stream to catch up before it sleeps. */
#define RING_CATCHUP_SPIN_NS (UINT64_C(50) * 1000)

struct td__ring {
    td__srv_session *ss;
    uint8_t *base;
    pthread_t thread;
    atomic_bool stop;
    /* Catch-up wait: bumped by td__ring_progress, slept on (a futex). */
    _Atomic uint32_t progress;
    _Atomic uint32_t progress_waiting;
    td__req_decoder *decoder;
    uint8_t req[TD_RING_REQ_BYTES]; /* the request, copied out of the region */
    size_t rep_len;                 /* reply bytes written so far */
    bool rep_overflow;
    td_status rep_status;
};

static _Thread_local td__ring *tl_ring; /* the ring whose request this thread runs */
static atomic_ullong g_open, g_requests;

static _Atomic uint32_t *word(td__ring *r, size_t off)
{
    return (_Atomic uint32_t *)(void *)(r->base + off);
}

static bool stopped(void *arg) { return atomic_load(&((td__ring *)arg)->stop); }

void td__ring_stats(uint64_t *open, uint64_t *requests)
{
    *open = atomic_load(&g_open);
    *requests = atomic_load(&g_requests);
}

void td__ring_progress(td__ring *r)
{
    if (r == NULL) return;
    atomic_fetch_add(&r->progress, 1);
    if (atomic_load(&r->progress_waiting) != 0) td__futex_wake(&r->progress);
}

bool td__ring_reply(td__srv_session *ss, const td__reply *rp, td_status *st)
{
    td__ring *r = tl_ring;
    if (r == NULL || r->ss != ss) return false;
    *st = TD_OK;
    if (r->rep_overflow) return true;
    uint8_t *area = r->base + TD_RING_REP_OFFSET;
    size_t len = 0;
    td_status est = TD_ERANGE;
    if (TD_RING_REP_BYTES - r->rep_len >= 4)
        est = td__reply_encode_flat(rp, area + r->rep_len + 4,
                                    TD_RING_REP_BYTES - r->rep_len - 4, &len);
    if (est != TD_OK) {
        /* Cannot happen within the ring's limits (TD_RING_READ_MAX, TD_RING_MAX_MESSAGES,
         * the failures a batch may report); the session ends rather than lose a reply. */
        r->rep_overflow = true;
        r->rep_status = est;
        return true;
    }
    for (int i = 0; i < 4; i++) area[r->rep_len + (size_t)i] = (uint8_t)(len >> (8 * i));
    r->rep_len += 4 + len;
    return true;
}

/* End the session for a broken ring rule. Returns false (stop serving). */
static bool ring_fail(td__ring *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool ring_fail(td__ring *r, const char *fmt, ...)
{
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(msg, sizeof msg, "request ring: ");
    vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    td__log(TD_LOG_INFO, "session %llu (tenant '%s'): %s; ending the session",
            (unsigned long long)r->ss->c.id, r->ss->tenant, msg);
    td__srv_call_cancel(&r->ss->c, GRPC_STATUS_INVALID_ARGUMENT, msg);
    return false;
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Wait until the stream has accepted every seq below `seq` and their jobs have run.
 * Returns 1 when it has, 0 when stopped, -1 when seq is already used. */
static int catch_up(td__ring *r, uint64_t seq)
{
    td__srv_session *ss = r->ss;
    uint64_t t0 = td__doorbell_now_ns();
    for (;;) {
        uint32_t seen = atomic_load(&r->progress);
        uint64_t next = atomic_load(&ss->next_seq);
        if (next > seq) return -1;
        if (next == seq && atomic_load(&ss->done_seq) == seq - 1) return 1;
        if (atomic_load(&r->stop) || td__srv_call_dead(&ss->c)) return 0;
        if (td__doorbell_now_ns() - t0 < RING_CATCHUP_SPIN_NS) {
            td__cpu_relax();
            continue;
        }
        atomic_store(&r->progress_waiting, 1);
        next = atomic_load(&ss->next_seq);
        if (!(next == seq && atomic_load(&ss->done_seq) == seq - 1) && !atomic_load(&r->stop))
            td__futex_wait(&r->progress, seen, UINT64_C(10) * 1000 * 1000);
        atomic_store(&r->progress_waiting, 0);
    }
}

/* Run one decoded ring message as the stream's job would. */
static void run_message(td__ring *r, td__job *j)
{
    td__srv_session *ss = r->ss;
    pthread_mutex_lock(&ss->exec_mu);
    tl_ring = r;
    do {
        j->continued = false;
        td__handle(ss, j);
    } while (j->continued && !atomic_load(&r->stop) && !td__srv_call_dead(&ss->c));
    tl_ring = NULL;
    if (ss->es != NULL)
        td__service_live_progress(ss->live, ss->ops_run, td__session_bytes(ss->es));
    pthread_mutex_unlock(&ss->exec_mu);
    if (j->rq.kind == TD_REQ_BATCH)
        td__metrics_batch(j->slot, false, td__metrics_now_ns() - j->received_ns);
}

/* Serve the request the client posted. Returns false when the session must end (done). */
static bool serve(td__ring *r)
{
    td__srv_session *ss = r->ss;
    uint32_t len = atomic_load(word(r, TD_RING_OFF_REQ_LEN)); /* read once */
    if (len == 0 || len > TD_RING_REQ_BYTES)
        return ring_fail(r, "request of %u bytes; the request area holds 1 to %u", len,
                         (unsigned)TD_RING_REQ_BYTES);
    memcpy(r->req, r->base + TD_RING_REQ_OFFSET, len); /* copy, then validate the copy */
    size_t off[TD_RING_MAX_MESSAGES], flen[TD_RING_MAX_MESSAGES], n = 0, pos = 0;
    while (pos < len) {
        if (len - pos < 4) return ring_fail(r, "request ends inside a frame's length");
        uint32_t l = get_u32(r->req + pos);
        pos += 4;
        if (l > len - pos)
            return ring_fail(r, "frame %zu claims %u bytes; %zu are left in the %u-byte "
                             "request", n, l, len - pos, len);
        if (n == TD_RING_MAX_MESSAGES)
            return ring_fail(r, "more than %d messages in one request", TD_RING_MAX_MESSAGES);
        off[n] = pos;
        flen[n++] = l;
        pos += l;
    }
    r->rep_len = 0;
    r->rep_overflow = false;
    uint64_t read_budget = TD_RING_READ_MAX; /* the reads of one request, together */
    for (size_t i = 0; i < n; i++) {
        td__job j;
        memset(&j, 0, sizeof j);
        j.ss = ss;
        j.slot = ss->slot;
        j.received_ns = td__metrics_now_ns();
        td__request_decode_flat(r->decoder, r->req + off[i], flen[i], &j.rq);
        bool ok = true;
        if (!j.rq.decoded) {
            ok = ring_fail(r, "message %zu: %s", i,
                           j.rq.text != NULL ? j.rq.text : td_status_message(j.rq.status));
        } else if (j.rq.kind != TD_REQ_BATCH && j.rq.kind != TD_REQ_RELEASE &&
                   j.rq.kind != TD_REQ_READ && j.rq.kind != TD_REQ_FENCE &&
                   j.rq.kind != TD_REQ_BAD) {
            ok = ring_fail(r, "message seq %llu: the ring carries batches, releases, reads and "
                           "fences only (request kind %d)",
                           (unsigned long long)j.rq.seq, (int)j.rq.kind);
        } else if (j.rq.seq == 0) {
            ok = ring_fail(r, "message %zu has seq 0", i);
        }
        if (ok && j.rq.kind == TD_REQ_READ && j.rq.nbytes > read_budget)
            td__request_fail(&j.rq, TD_EPROTO,
                             "read seq %llu of %llu bytes on the request ring; one request's "
                             "reads carry at most %u bytes together, %llu were left (read more "
                             "on the stream or through the region)",
                             (unsigned long long)j.rq.seq, (unsigned long long)j.rq.nbytes,
                             (unsigned)TD_RING_READ_MAX, (unsigned long long)read_budget);
        else if (ok && j.rq.kind == TD_REQ_READ)
            read_budget -= j.rq.nbytes;
        int c = ok ? catch_up(r, j.rq.seq) : 0;
        uint64_t want = j.rq.seq;
        if (ok && c < 0)
            ok = ring_fail(r, "message seq %llu out of order: expected seq %llu or later",
                           (unsigned long long)j.rq.seq,
                           (unsigned long long)atomic_load(&ss->next_seq));
        else if (ok && c == 0)
            ok = false; /* stopping */
        else if (ok && !atomic_compare_exchange_strong(&ss->next_seq, &want, want + 1))
            ok = ring_fail(r, "message seq %llu was sent on the stream too",
                           (unsigned long long)j.rq.seq);
        if (ok) {
            run_message(r, &j);
            atomic_store(&ss->done_seq, j.rq.seq);
        }
        td__request_fini(&j.rq);
        if (!ok) return false;
        if (r->rep_overflow)
            return ring_fail(r, "the replies to one request need more than the %u-byte reply "
                             "area (%s)", (unsigned)TD_RING_REP_BYTES,
                             td_status_name(r->rep_status));
    }
    atomic_fetch_add(&g_requests, 1);
    atomic_store(word(r, TD_RING_OFF_REP_LEN), (uint32_t)r->rep_len);
    return true;
}

static void *ring_main(void *arg)
{
    td__ring *r = arg;
    pthread_setname_np(pthread_self(), "td-ring");
    _Atomic uint32_t *req = word(r, TD_RING_OFF_REQ_COUNT);
    _Atomic uint32_t *srv_waiting = word(r, TD_RING_OFF_SERVER_WAITING);
    /* Not a load of REQ_COUNT: the client may post its first request before this thread
     * runs. td__ring_start zeroed the header, so anything above 0 is a request. */
    uint32_t seen = 0;
    for (;;) {
        uint32_t v = td__doorbell_wait(req, srv_waiting, seen, TD_RING_SPIN_NS, RING_SLEEP_NS,
                                       stopped, r);
        if (v == seen) break; /* stopped */
        seen = v;
        if (td__srv_call_dead(&r->ss->c) || !serve(r)) break;
        td__doorbell_ring(word(r, TD_RING_OFF_REP_COUNT), word(r, TD_RING_OFF_CLIENT_WAITING),
                          v);
    }
    /* Serve nothing more; a client waiting for an answer wakes and asks the stream. */
    atomic_store(word(r, TD_RING_OFF_CLOSED), 1);
    td__futex_wake(word(r, TD_RING_OFF_REP_COUNT));
    return NULL;
}

td_status td__ring_start(td__srv_session *ss, uint8_t *base, td__ring **out, char *err,
                         size_t errlen)
{
    td__ring *r = td__calloc(1, sizeof *r);
    if (r == NULL || (r->decoder = td__req_decoder_create()) == NULL) {
        td__free(r);
        snprintf(err, errlen, "out of memory for a request ring");
        return TD_ENOMEM;
    }
    r->ss = ss;
    r->base = base;
    atomic_init(&r->stop, false);
    memset(base, 0, TD_RING_REQ_OFFSET);
    atomic_store(word(r, TD_RING_OFF_MAGIC), TD_RING_MAGIC);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)256 << 10);
    int e = pthread_create(&r->thread, &attr, ring_main, r);
    pthread_attr_destroy(&attr);
    if (e != 0) {
        td__req_decoder_destroy(r->decoder);
        td__free(r);
        snprintf(err, errlen, "cannot start a request ring thread: %s", strerror(e));
        return TD_ENOMEM;
    }
    atomic_fetch_add(&g_open, 1);
    *out = r;
    return TD_OK;
}

void td__ring_stop(td__ring *r)
{
    if (r == NULL) return;
    atomic_store(&r->stop, true);
    td__futex_wake(word(r, TD_RING_OFF_REQ_COUNT));
    atomic_fetch_add(&r->progress, 1);
    td__futex_wake(&r->progress);
    pthread_join(r->thread, NULL);
    td__req_decoder_destroy(r->decoder);
    td__free(r);
    atomic_fetch_sub(&g_open, 1);
}
