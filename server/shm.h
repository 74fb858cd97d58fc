/* shm.h — the shared-memory data path of same-host clients (tensord.proto, "shared
 * memory"; README "Same-host clients"): one memfd region per session that asks for it, and
 * the side socket that hands a region's fd to the client that proves it owns the session.
 *
 * Why a memfd and a side socket: a memfd has no name in any file system, so nobody can open
 * it; the only way to its pages is the fd. The server hands that fd out once, over a unix
 * socket next to the main one (same directory, same mode), to whoever sends the session id
 * and the session's 128-bit random secret, which only the session's own gRPC stream
 * carried. gRPC's unix transport cannot pass fds, hence the side socket.
 *
 * A region is sealed (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) before the fd leaves the
 * server, so a client cannot truncate it under the server's mapping (which would make the
 * server's copies fault). Its bytes are charged to the tenant's max_bytes quota for the
 * session's life.
 *
 * Thread-safety: td__shm_start/stop on the loop thread; regions are created and destroyed
 * by their session's worker jobs (any thread), the registry they live in has its own lock,
 * and the side socket is served by a thread of its own.
 */
#ifndef TD_SERVER_SHM_H
#define TD_SERVER_SHM_H

#include "engine/quota.h"
#include "tensord.h"
#include "wire_limits.h"

#include <stddef.h>
#include <stdint.h>

typedef struct td__shm td__shm;
typedef struct td__shm_region td__shm_region;

/* Serve the side socket `main_path` + ".shm" (an old socket file there is replaced; its
 * mode is copied from the main socket's) for regions of `region_bytes` each by default,
 * and up to `max_bytes` (raised to region_bytes when below) for sessions that ask.
 * Returns TD_OK, TD_EINVAL (path too long for a unix socket), TD_EIO (cannot bind),
 * TD_ENOMEM; err says why. */
td_status td__shm_start(const char *main_path, uint64_t region_bytes, uint64_t max_bytes,
                        td__shm **out, char *err, size_t errlen);
/* Stop the thread, remove the side socket, free. Every region must be gone. NULL: no-op. */
void td__shm_stop(td__shm *s);
/* The side socket's path, the default size of a region, the largest a session may ask for. */
const char *td__shm_path(const td__shm *s);
uint64_t td__shm_bytes(const td__shm *s);
uint64_t td__shm_max_bytes(const td__shm *s);
/* The size a session that asked for `wanted` bytes (OpenSession.shm_bytes; 0: the default)
 * gets: rounded up to a multiple of 8 KiB, at least TD_SHM_MIN_BYTES, at most max_bytes. */
uint64_t td__shm_grant(const td__shm *s, uint64_t wanted);
/* For the metrics. Any thread. */
typedef struct td__shm_stats {
    uint64_t regions;   /* live regions (sessions that have one) */
    uint64_t bytes;     /* their bytes */
    uint64_t handed;    /* fds handed out so far */
    uint64_t refusals;  /* side-socket requests refused so far (wrong secret, unknown
                         * session, repeat, garbage, timeout) */
} td__shm_stats;
void td__shm_stats_get(td__shm *s, td__shm_stats *out);

/* Create session `session_id`'s region of `size` bytes (td__shm_grant's answer; charged to
 * `quota`, borrowed; outlives the region)
 * and its secret (TD_SHM_SECRET_BYTES, written to `secret`). Returns TD_OK, TD_EQUOTA,
 * TD_ENOMEM or TD_EIO (memfd, seal or mmap failed), err saying why. */
td_status td__shm_region_create(td__shm *s, uint64_t size, uint64_t session_id, td__quota *quota,
                                td__shm_region **out, uint8_t secret[TD_SHM_SECRET_BYTES],
                                char *err, size_t errlen);
/* Unregister, unmap, close and uncharge. NULL is a no-op. */
void td__shm_region_destroy(td__shm_region *r);
/* The server's mapping and its size. */
uint8_t *td__shm_region_data(const td__shm_region *r);
uint64_t td__shm_region_size(const td__shm_region *r);

/* Check that [region_offset, +nbytes) lies inside the region, overflow-safe. Returns
 * TD_OK or TD_ERANGE with a message naming `what` ("shm write seq 7"). */
td_status td__shm_region_check(const td__shm_region *r, uint64_t region_offset, uint64_t nbytes,
                               const char *what, char *err, size_t errlen);
#endif
