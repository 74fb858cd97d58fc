/* connlimit.h — the open-file limit and the cap on client connections of tensord.
 *
 * gRPC C core 1.51 owns the listening socket and has no connection limit. Its accept loop
 * (src/core/lib/iomgr/tcp_server_posix.cc, on_read) re-arms the listener only after
 * EAGAIN or ECONNABORTED; any other accept4 error (EMFILE: out of file descriptors) is
 * logged once ("Failed accept4: Too many open files") and the listener is never polled
 * again, so the server stops accepting for good. This module:
 *  - raises RLIMIT_NOFILE's soft limit to the hard limit at start (td__conn_limit_init);
 *  - interposes accept4 (tensord's definition comes first in the dynamic symbol lookup, so
 *    libgrpc's call lands here): a connection beyond `max_connections` is accepted and
 *    closed at once (the client sees the connection reset, gRPC sees ECONNABORTED-like
 *    EAGAIN); an EMFILE/ENFILE is never passed to gRPC: a spare descriptor is closed to
 *    accept and drop the pending connections, then gRPC sees EAGAIN and keeps listening;
 *    transient errors (ENOBUFS, ENOMEM, network errors on the new socket) become EAGAIN;
 *  - counts open connections by the inode of each accepted socket, swept lazily (a closed
 *    descriptor, or one reused for another file, no longer matches): no close() hook.
 *
 * Thread-safety: td__conn_limit_init once, before gRPC starts; everything else from any
 * thread.
 */
#ifndef TD_SERVER_CONNLIMIT_H
#define TD_SERVER_CONNLIMIT_H

#include <stdbool.h>
#include <stdint.h>

/* After this long without a refused connection (limit or EMFILE), the state is healthy. */
#define TD_CONN_TROUBLE_MS 10000

/* Raise the open-file soft limit to the hard limit (logged), and set the connection cap:
 * max_connections 0 picks the default, td__conn_default_max(the raised limit). Returns
 * the cap in force. Writes the file limit into *nofile when not NULL. */
uint64_t td__conn_limit_init(uint64_t max_connections, uint64_t *nofile);

/* The default cap for an open-file limit of `nofile`: half of it, at most 4096, at least 16
 * (the other half is for gRPC's own descriptors, devices, blob-cache files, logs). */
uint64_t td__conn_default_max(uint64_t nofile);

/* Whether the accept4 interposition is in effect (false e.g. in a static build); the cap
 * and the EMFILE guard only work when it is. */
bool td__conn_guard_active(void);

/* Connections accepted and still open (sweeps closed ones first). */
uint64_t td__conn_open_count(void);
/* Connections refused so far: over the cap / for lack of file descriptors. */
uint64_t td__conn_refused_limit(void);
uint64_t td__conn_refused_nofile(void);
/* Whether connections were refused for lack of file descriptors in the last
 * TD_CONN_TROUBLE_MS (the server then cannot take every client that comes). */
bool td__conn_fd_trouble(void);
#endif
