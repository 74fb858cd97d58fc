/* shm.c — fetch and map a session's shared-memory region (shm.h).
 *
 * The handshake is one request and one reply on a fresh connection to the side socket
 * (tensord.proto, "shared memory"); the fd arrives as SCM_RIGHTS data with the reply. It
 * is mapped only when it has the offered size and is sealed against shrinking and growing
 * (so no one can truncate it under this process's copies), then closed: the mapping keeps
 * the region, and nothing else in this process can reach it.
 */
#include "client/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Wait for `events` on fd until deadline (CLOCK_MONOTONIC ms). 1 ready, 0 timeout. */
static int wait_fd(int fd, short events, uint64_t deadline_ms)
{
    for (;;) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t now = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
        if (now >= deadline_ms) return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, (int)(deadline_ms - now));
        if (n > 0) return 1;
        if (n < 0 && errno != EINTR) return 1; /* let the call itself report it */
    }
}

td_status td__shm_map_open(const char *path, uint64_t session_id,
                           const uint8_t secret[TD_SHM_SECRET_BYTES], uint64_t size,
                           int timeout_ms, td__shm_map *out, char *err, size_t errlen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (path == NULL || strlen(path) >= sizeof sa.sun_path) {
        snprintf(err, errlen, "side socket path too long");
        return TD_EPROTO;
    }
    if (size == 0 || size > SIZE_MAX) {
        snprintf(err, errlen, "offered region of %llu bytes", (unsigned long long)size);
        return TD_EPROTO;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t deadline =
        (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u + (uint64_t)timeout_ms;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int region_fd = -1;
    td_status st = TD_EUNAVAILABLE;
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        snprintf(err, errlen, "cannot connect to %s: %s", path, strerror(errno));
        goto out;
    }
    uint8_t req[TD_SHM_REQUEST_BYTES];
    memcpy(req, TD_SHM_MAGIC, 8);
    for (int i = 0; i < 8; i++) req[8 + i] = (uint8_t)(session_id >> (8 * i));
    memcpy(req + 16, secret, TD_SHM_SECRET_BYTES);
    if (!wait_fd(fd, POLLOUT, deadline) ||
        send(fd, req, sizeof req, MSG_NOSIGNAL) != (ssize_t)sizeof req) {
        snprintf(err, errlen, "cannot send the request to %s", path);
        goto out;
    }
    uint8_t rep[TD_SHM_REPLY_BYTES + TD_SHM_MESSAGE_MAX + 1];
    size_t got = 0;
    /* The reply is one sendmsg on the server's side: the fd comes with its first bytes. */
    while (got < TD_SHM_REPLY_BYTES) {
        if (!wait_fd(fd, POLLIN, deadline)) {
            snprintf(err, errlen, "no answer from %s in time", path);
            st = TD_ETIMEOUT;
            goto out;
        }
        union {
            char raw[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } ctl;
        struct iovec iov = {.iov_base = rep + got, .iov_len = sizeof rep - 1 - got};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.raw,
                            .msg_controllen = sizeof ctl.raw};
        ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (n <= 0) {
            snprintf(err, errlen, "%s closed the connection", path);
            goto out;
        }
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
                c->cmsg_len == CMSG_LEN(sizeof(int)) && region_fd < 0)
                memcpy(&region_fd, CMSG_DATA(c), sizeof(int));
        }
        got += (size_t)n;
    }
    if (memcmp(rep, TD_SHM_MAGIC, 8) != 0) {
        snprintf(err, errlen, "%s does not speak the tensord shm handshake", path);
        st = TD_EPROTO;
        goto out;
    }
    uint32_t status = get_u32(rep + 8), mlen = get_u32(rep + 12);
    if (mlen > TD_SHM_MESSAGE_MAX) mlen = TD_SHM_MESSAGE_MAX;
    if (got > TD_SHM_REPLY_BYTES + (size_t)mlen) got = TD_SHM_REPLY_BYTES + mlen;
    rep[got] = '\0';
    if (status != 0) {
        snprintf(err, errlen, "%s refused: %s", path, (const char *)rep + TD_SHM_REPLY_BYTES);
        st = status == TD_EUNAUTHENTICATED ? TD_EUNAUTHENTICATED : TD_EUNAVAILABLE;
        goto out;
    }
    struct stat sb;
    if (region_fd < 0 || get_u64(rep + 16) != size || fstat(region_fd, &sb) != 0 ||
        (uint64_t)sb.st_size != size) {
        snprintf(err, errlen, "%s sent no region of the %llu bytes offered", path,
                 (unsigned long long)size);
        st = TD_EPROTO;
        goto out;
    }
    /* Only a region that cannot shrink under this mapping: a server (or whoever answers on
     * that path) that could truncate it would make our copies fault. */
    int seals = fcntl(region_fd, F_GET_SEALS);
    if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
        snprintf(err, errlen, "%s sent a region that is not sealed against resizing", path);
        st = TD_EPROTO;
        goto out;
    }
    void *p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, region_fd, 0);
    if (p == MAP_FAILED) {
        snprintf(err, errlen, "cannot map the %llu-byte region: %s", (unsigned long long)size,
                 strerror(errno));
        st = TD_ENOMEM;
        goto out;
    }
    out->data = p;
    out->size = size;
    st = TD_OK;
out:
    if (region_fd >= 0) close(region_fd);
    if (fd >= 0) close(fd);
    return st;
}

void td__shm_map_close(td__shm_map *m)
{
    if (m->data != NULL) munmap(m->data, (size_t)m->size);
    m->data = NULL;
    m->size = 0;
}
