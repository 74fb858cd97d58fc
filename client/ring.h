/* ring.h — the client's end of a session's request ring (tensord.proto "request ring";
 * server/ring.h has the server's and says why the ring exists): post a request written
 * into the ring's request area, then wait for the reply with a bounded spin and a futex
 * sleep (common/doorbell.h).
 *
 * Why its own file: plain memory and futexes with no gRPC in it; client/remote.c decides
 * what goes on the ring and decodes the replies with the stream's decoder.
 * Thread-safety: one thread per ring (the context's).
 */
#ifndef TD_CLIENT_RING_H
#define TD_CLIENT_RING_H

#include "tensord.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How long the client spins for a reply before it sleeps. */
#define TD_RING_CLIENT_SPIN_NS (UINT64_C(100) * 1000)
/* How long each sleep lasts before keep_waiting is asked again. */
#define TD_RING_CLIENT_SLICE_NS (UINT64_C(2) * 1000 * 1000)

typedef struct td__ring_cli {
    uint8_t *base; /* NULL: no ring */
    uint32_t count;
} td__ring_cli;

/* Take the ring SessionOpened placed at [offset, +bytes) of the mapped region (data, size).
 * It must be the region's last TD_RING_BYTES and carry the magic. Returns TD_OK or
 * TD_EPROTO with err saying why (the caller then uses the stream for everything). */
td_status td__ring_cli_init(td__ring_cli *c, uint8_t *data, uint64_t size, uint64_t offset,
                            uint64_t bytes, char *err, size_t errlen);
/* The request area (TD_RING_REQ_BYTES) to write frames into. */
uint8_t *td__ring_cli_request(td__ring_cli *c);
/* Post the `len` bytes written into the request area and wait for the reply, which is
 * copied (so that it can be decoded without the server changing it meanwhile) into `out`
 * (TD_RING_REP_BYTES). keep_waiting(arg) is asked after each sleep slice; false gives up.
 * Returns TD_OK with *out_len, TD_ECLOSED (the server closed the ring: the session is
 * ending, its stream has the status), TD_ETIMEOUT (keep_waiting gave up) or TD_EPROTO (a
 * reply length past the area). Any failure leaves the ring unusable (base NULL). */
td_status td__ring_cli_call(td__ring_cli *c, uint32_t len, uint8_t *out, size_t *out_len,
                            bool (*keep_waiting)(void *arg), void *arg);
#endif
