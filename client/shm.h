/* shm.h — the client's end of the shared-memory data path (tensord.proto, "shared memory";
 * server/shm.h has the server's): fetch the session's region fd over the server's side
 * socket and map it.
 *
 * Why its own file: it is plain POSIX (a unix socket, SCM_RIGHTS, mmap) with no gRPC in
 * it; client/remote.c decides when to ask and what moves through the region.
 * Thread-safety: one thread per map.
 */
#ifndef TD_CLIENT_SHM_H
#define TD_CLIENT_SHM_H

#include "tensord.h"
#include "wire_limits.h"

#include <stddef.h>
#include <stdint.h>

typedef struct td__shm_map {
    uint8_t *data; /* NULL: none */
    uint64_t size;
} td__shm_map;

/* Connect to side socket `path`, prove session `session_id` with `secret`, receive the
 * region's fd and map it (size `size`, as SessionOpened said; the server's reply and the
 * fd's size must agree, and the fd must be sealed against shrinking and growing, so that
 * no one can truncate it under our copies). Waits at most timeout_ms. Returns TD_OK, or TD_EUNAVAILABLE / TD_EPROTO /
 * TD_EUNAUTHENTICATED / TD_ENOMEM / TD_ETIMEOUT with err saying why (the caller then uses
 * the stream). */
td_status td__shm_map_open(const char *path, uint64_t session_id,
                           const uint8_t secret[TD_SHM_SECRET_BYTES], uint64_t size,
                           int timeout_ms, td__shm_map *out, char *err, size_t errlen);
/* Unmap (no-op when nothing is mapped). */
void td__shm_map_close(td__shm_map *m);
#endif
