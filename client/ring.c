/* ring.c — post a request on a session's request ring and wait for its reply (ring.h).
 *
 * The request is published by REQ_LEN then REQ_COUNT (seq_cst, with a futex wake only when
 * the server announced it sleeps); the reply is complete once REP_COUNT equals the count we
 * posted. CLOSED means the server stopped serving the ring (its session is ending).
 */
#include "client/ring.h"

#include "common/doorbell.h"
#include "wire_limits.h"

#include <stdio.h>
#include <string.h>

static _Atomic uint32_t *word(const td__ring_cli *c, size_t off)
{
    return (_Atomic uint32_t *)(void *)(c->base + off);
}

td_status td__ring_cli_init(td__ring_cli *c, uint8_t *data, uint64_t size, uint64_t offset,
                            uint64_t bytes, char *err, size_t errlen)
{
    c->base = NULL;
    if (bytes != TD_RING_BYTES || size < bytes || offset != size - bytes || offset % 4096 != 0) {
        snprintf(err, errlen, "ring of %llu bytes at %llu does not end the %llu-byte region",
                 (unsigned long long)bytes, (unsigned long long)offset,
                 (unsigned long long)size);
        return TD_EPROTO;
    }
    _Atomic uint32_t *magic = (_Atomic uint32_t *)(void *)(data + offset + TD_RING_OFF_MAGIC);
    if (atomic_load(magic) != TD_RING_MAGIC) {
        snprintf(err, errlen, "the ring carries no magic");
        return TD_EPROTO;
    }
    c->base = data + offset;
    c->count = atomic_load((_Atomic uint32_t *)(void *)(c->base + TD_RING_OFF_REQ_COUNT));
    return TD_OK;
}

uint8_t *td__ring_cli_request(td__ring_cli *c) { return c->base + TD_RING_REQ_OFFSET; }

typedef struct wait_arg {
    td__ring_cli *c;
    bool (*keep_waiting)(void *arg);
    void *arg;
    uint64_t asked_ns; /* when keep_waiting was last asked */
    bool gave_up;
} wait_arg;

/* Stop waiting: the ring closed, or the caller gives up (asked once a sleep slice). */
static bool stop_waiting(void *p)
{
    wait_arg *w = p;
    if (atomic_load(word(w->c, TD_RING_OFF_CLOSED)) != 0) return true;
    uint64_t now = td__doorbell_now_ns();
    if (now - w->asked_ns < TD_RING_CLIENT_SLICE_NS) return false;
    w->asked_ns = now;
    w->gave_up = !w->keep_waiting(w->arg);
    return w->gave_up;
}

td_status td__ring_cli_call(td__ring_cli *c, uint32_t len, uint8_t *out, size_t *out_len,
                            bool (*keep_waiting)(void *arg), void *arg)
{
    uint32_t want = c->count + 1;
    uint32_t before = atomic_load(word(c, TD_RING_OFF_REP_COUNT));
    atomic_store(word(c, TD_RING_OFF_REQ_LEN), len);
    td__doorbell_ring(word(c, TD_RING_OFF_REQ_COUNT), word(c, TD_RING_OFF_SERVER_WAITING),
                      want);
    c->count = want;
    wait_arg w = {.c = c, .keep_waiting = keep_waiting, .arg = arg,
                  .asked_ns = td__doorbell_now_ns()};
    td_status st = TD_OK;
    uint32_t v = td__doorbell_wait(word(c, TD_RING_OFF_REP_COUNT),
                                   word(c, TD_RING_OFF_CLIENT_WAITING), before,
                                   TD_RING_CLIENT_SPIN_NS, TD_RING_CLIENT_SLICE_NS, stop_waiting,
                                   &w);
    if (v != want && v != before) /* a count we never posted: not the server's ring now */
        st = TD_EPROTO;
    else if (v != want)
        st = w.gave_up ? TD_ETIMEOUT : TD_ECLOSED;
    if (st == TD_OK) {
        uint32_t n = atomic_load(word(c, TD_RING_OFF_REP_LEN)); /* read once */
        if (n > TD_RING_REP_BYTES) {
            st = TD_EPROTO;
        } else {
            memcpy(out, c->base + TD_RING_REP_OFFSET, n);
            *out_len = n;
        }
    }
    if (st != TD_OK) c->base = NULL;
    return st;
}
