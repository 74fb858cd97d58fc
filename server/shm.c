/* shm.c — memfd regions of same-host sessions and the side socket that hands them out
 * (shm.h says why it is built this way).
 *
 * The side socket is served by one thread with poll(2): the listening socket, a wake-up
 * pipe for td__shm_stop, and at most SHM_MAX_PENDING accepted connections, each of which
 * must deliver its 32-byte request within SHM_REQUEST_MS or is closed (at most
 * SHM_MAX_PENDING_PER_UID of them from one user). A request is
 * answered with one sendmsg (the fd attached only on success) and the connection closed;
 * the registry lock is held across the lookup and the send so that a region cannot be
 * destroyed (its fd closed) under the send.
 */
#include "server/shm.h"

#include "common/alloc.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define SHM_MAX_PENDING 64
/* Of those, at most this many from one user (the connection's SO_PEERCRED uid): a local
 * process that holds idle connections open can only use up its own user's share, so
 * other users' sessions still get their regions. */
#define SHM_MAX_PENDING_PER_UID 16
#define SHM_REQUEST_MS 2000

struct td__shm_region {
    td__shm *shm;
    td__shm_region *next; /* registry, under shm->mu */
    uint64_t session_id;
    uint8_t secret[TD_SHM_SECRET_BYTES];
    int fd;       /* -1 once handed out and closed */
    bool handed;  /* the fd went to a client: later requests are refused */
    uint8_t *data;
    uint64_t size;
    td__quota *quota;
};

typedef struct shm_conn {
    int fd;
    uid_t uid;
    size_t got;
    uint8_t buf[TD_SHM_REQUEST_BYTES];
    uint64_t deadline_ms;
} shm_conn;

struct td__shm {
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    uint64_t region_bytes; /* the default size */
    uint64_t max_bytes;    /* the largest a session may ask for */
    uint64_t bytes;        /* of every live region (under mu) */
    int listen_fd;
    int wake[2];
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    td__shm_region *regions;
    atomic_ullong refusals;
    uint64_t n_regions, handed; /* under mu */
    shm_conn conns[SHM_MAX_PENDING];
    size_t n_conns;
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Answer on conn fd `fd`: status, message, and `pass_fd` (>= 0: attached). */
static void reply(int fd, td_status st, uint64_t size, int pass_fd, const char *msg)
{
    uint8_t buf[TD_SHM_REPLY_BYTES + TD_SHM_MESSAGE_MAX];
    size_t mlen = strlen(msg);
    if (mlen > TD_SHM_MESSAGE_MAX) mlen = TD_SHM_MESSAGE_MAX;
    memcpy(buf, TD_SHM_MAGIC, 8);
    put_u32(buf + 8, (uint32_t)st);
    put_u32(buf + 12, (uint32_t)mlen);
    put_u64(buf + 16, size);
    memcpy(buf + TD_SHM_REPLY_BYTES, msg, mlen);
    struct iovec iov = {.iov_base = buf, .iov_len = TD_SHM_REPLY_BYTES + mlen};
    union {
        char raw[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (pass_fd >= 0) {
        mh.msg_control = ctl.raw;
        mh.msg_controllen = sizeof ctl.raw;
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
    }
    /* A fresh socket's send buffer takes a few hundred bytes at once; a peer that is
     * already gone just loses the answer. */
    (void)sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static void refuse(td__shm *s, int fd, td_status st, const char *msg)
{
    atomic_fetch_add(&s->refusals, 1);
    td__log(TD_LOG_INFO, "shm side socket: refused a request: %s", msg);
    reply(fd, st, 0, -1, msg);
}

/* A whole request arrived on conn c. */
static void serve(td__shm *s, shm_conn *c)
{
    if (memcmp(c->buf, TD_SHM_MAGIC, 8) != 0) {
        refuse(s, c->fd, TD_EPROTO, "not a tensord shm request (bad magic)");
        return;
    }
    uint64_t id = get_u64(c->buf + 8);
    const uint8_t *secret = c->buf + 16;
    char msg[TD_SHM_MESSAGE_MAX];
    pthread_mutex_lock(&s->mu);
    td__shm_region *r = s->regions;
    while (r != NULL && r->session_id != id) r = r->next;
    if (r == NULL || CRYPTO_memcmp(r->secret, secret, TD_SHM_SECRET_BYTES) != 0) {
        pthread_mutex_unlock(&s->mu);
        /* The same answer for both: a guess learns nothing about which ids exist. */
        snprintf(msg, sizeof msg, "session %llu: no shared-memory region with that secret",
                 (unsigned long long)id);
        refuse(s, c->fd, TD_EUNAUTHENTICATED, msg);
        return;
    }
    if (r->handed) {
        pthread_mutex_unlock(&s->mu);
        snprintf(msg, sizeof msg, "session %llu: its region was handed out already",
                 (unsigned long long)id);
        refuse(s, c->fd, TD_EINVAL, msg);
        return;
    }
    reply(c->fd, TD_OK, r->size, r->fd, "ok");
    r->handed = true;
    s->handed++;
    close(r->fd); /* the client holds its own now; the mapping keeps the pages */
    r->fd = -1;
    pthread_mutex_unlock(&s->mu);
    td__log(TD_LOG_DEBUG, "session %llu: shared-memory region handed out",
            (unsigned long long)id);
}

static void conn_drop(td__shm *s, size_t i)
{
    close(s->conns[i].fd);
    s->conns[i] = s->conns[--s->n_conns];
}

static void *side_thread(void *arg)
{
    td__shm *s = arg;
    struct pollfd pfd[SHM_MAX_PENDING + 2];
    for (;;) {
        uint64_t now = now_ms();
        int timeout = -1;
        for (size_t i = 0; i < s->n_conns;) {
            if (s->conns[i].deadline_ms <= now) {
                refuse(s, s->conns[i].fd, TD_ETIMEOUT, "no complete request in time");
                conn_drop(s, i);
                continue;
            }
            int left = (int)(s->conns[i].deadline_ms - now);
            if (timeout < 0 || left < timeout) timeout = left;
            i++;
        }
        pfd[0] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
        pfd[1] = (struct pollfd){.fd = s->listen_fd, .events = POLLIN};
        for (size_t i = 0; i < s->n_conns; i++)
            pfd[2 + i] = (struct pollfd){.fd = s->conns[i].fd, .events = POLLIN};
        int n = poll(pfd, 2 + s->n_conns, timeout);
        if (n < 0 && errno != EINTR) {
            td__log(TD_LOG_ERROR, "shm side socket: poll: %s", strerror(errno));
            break;
        }
        if (n <= 0) continue;
        if (pfd[0].revents != 0) break;
        /* Connections first (their slots move when one is dropped: walk backwards). */
        for (size_t k = s->n_conns; k-- > 0;) {
            if (pfd[2 + k].revents == 0) continue;
            shm_conn *c = &s->conns[k];
            ssize_t got = recv(c->fd, c->buf + c->got, sizeof c->buf - c->got, MSG_DONTWAIT);
            if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (got == 0) { /* the peer stopped sending early: say why (it may still read) */
                char msg[96];
                snprintf(msg, sizeof msg, "incomplete request: %zu of %zu bytes before the end",
                         c->got, sizeof c->buf);
                refuse(s, c->fd, TD_EPROTO, msg);
                conn_drop(s, k);
                continue;
            }
            if (got < 0) { /* failed (reset): nobody to answer */
                conn_drop(s, k);
                continue;
            }
            c->got += (size_t)got;
            if (c->got == sizeof c->buf) {
                serve(s, c);
                conn_drop(s, k);
            }
        }
        if (pfd[1].revents != 0) {
            int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            struct ucred cred = {.uid = (uid_t)-1};
            socklen_t clen = sizeof cred;
            if (fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0)
                cred.uid = (uid_t)-1;
            size_t same_uid = 0;
            for (size_t k = 0; fd >= 0 && k < s->n_conns; k++) same_uid += s->conns[k].uid == cred.uid;
            if (fd >= 0 && s->n_conns == SHM_MAX_PENDING) {
                refuse(s, fd, TD_EUNAVAILABLE, "too many pending shm requests; try again");
                close(fd);
            } else if (fd >= 0 && same_uid >= SHM_MAX_PENDING_PER_UID) {
                refuse(s, fd, TD_EUNAVAILABLE,
                       "too many pending shm requests from this user; try again");
                close(fd);
            } else if (fd >= 0) {
                s->conns[s->n_conns++] = (shm_conn){
                    .fd = fd, .uid = cred.uid, .deadline_ms = now_ms() + SHM_REQUEST_MS};
            }
        }
    }
    while (s->n_conns > 0) conn_drop(s, s->n_conns - 1);
    return NULL;
}

td_status td__shm_start(const char *main_path, uint64_t region_bytes, uint64_t max_bytes,
                        td__shm **out, char *err, size_t errlen)
{
    td__shm *s = td__calloc(1, sizeof *s);
    if (s == NULL) {
        snprintf(err, errlen, "out of memory for the shm side socket");
        return TD_ENOMEM;
    }
    s->listen_fd = -1;
    s->wake[0] = s->wake[1] = -1;
    s->region_bytes = region_bytes;
    s->max_bytes = max_bytes > region_bytes ? max_bytes : region_bytes;
    pthread_mutex_init(&s->mu, NULL);
    atomic_init(&s->refusals, 0);
    td_status st = TD_OK;
    int n = snprintf(s->path, sizeof s->path, "%s.shm", main_path);
    if (n < 0 || (size_t)n >= sizeof s->path) {
        snprintf(err, errlen, "side socket %s.shm: path longer than %zu bytes", main_path,
                 sizeof s->path - 1);
        st = TD_EINVAL;
        goto fail;
    }
    struct stat sb;
    if (lstat(s->path, &sb) == 0) {
        if (!S_ISSOCK(sb.st_mode)) {
            snprintf(err, errlen, "side socket %s: a file that is not a socket is there",
                     s->path);
            st = TD_EIO;
            goto fail;
        }
        unlink(s->path); /* a stale one: the main socket was free, so no server uses it */
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, s->path, strlen(s->path) + 1);
    s->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s->listen_fd < 0 || bind(s->listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(s->listen_fd, 64) != 0) {
        snprintf(err, errlen, "side socket %s: %s", s->path, strerror(errno));
        st = TD_EIO;
        goto fail;
    }
    if (stat(main_path, &sb) == 0) (void)chmod(s->path, sb.st_mode & 07777);
    if (pipe2(s->wake, O_CLOEXEC) != 0 || pthread_create(&s->thread, NULL, side_thread, s) != 0) {
        snprintf(err, errlen, "side socket %s: cannot start its thread", s->path);
        st = TD_ENOMEM;
        goto fail;
    }
    s->thread_started = true;
    *out = s;
    return TD_OK;
fail:
    td__shm_stop(s);
    return st;
}

void td__shm_stop(td__shm *s)
{
    if (s == NULL) return;
    if (s->thread_started) {
        (void)!write(s->wake[1], "x", 1);
        pthread_join(s->thread, NULL);
    }
    if (s->listen_fd >= 0) {
        close(s->listen_fd);
        unlink(s->path);
    }
    if (s->wake[0] >= 0) close(s->wake[0]);
    if (s->wake[1] >= 0) close(s->wake[1]);
    pthread_mutex_destroy(&s->mu);
    td__free(s);
}

const char *td__shm_path(const td__shm *s) { return s->path; }
uint64_t td__shm_bytes(const td__shm *s) { return s->region_bytes; }
uint64_t td__shm_max_bytes(const td__shm *s) { return s->max_bytes; }
uint64_t td__shm_grant(const td__shm *s, uint64_t wanted)
{
    if (wanted == 0) return s->region_bytes;
    if (wanted >= s->max_bytes) return s->max_bytes; /* also keeps the rounding below safe */
    if (wanted < TD_SHM_MIN_BYTES) wanted = TD_SHM_MIN_BYTES;
    return (wanted + 8191) & ~(uint64_t)8191;
}
void td__shm_stats_get(td__shm *s, td__shm_stats *out)
{
    pthread_mutex_lock(&s->mu);
    out->regions = s->n_regions;
    out->bytes = s->bytes;
    out->handed = s->handed;
    pthread_mutex_unlock(&s->mu);
    out->refusals = atomic_load(&s->refusals);
}

td_status td__shm_region_create(td__shm *s, uint64_t size, uint64_t session_id, td__quota *quota,
                                td__shm_region **out, uint8_t secret[TD_SHM_SECRET_BYTES],
                                char *err, size_t errlen)
{
    td__shm_region *r = td__calloc(1, sizeof *r);
    if (r == NULL) {
        snprintf(err, errlen, "out of memory for a shared-memory region");
        return TD_ENOMEM;
    }
    r->shm = s;
    r->fd = -1;
    r->session_id = session_id;
    r->size = size;
    td_status st = td__quota_bytes_charge(quota, r->size, "a shared-memory region of", err,
                                          errlen);
    if (st != TD_OK) {
        td__free(r);
        return st;
    }
    r->quota = quota;
    if (RAND_bytes(r->secret, sizeof r->secret) != 1) {
        snprintf(err, errlen, "no random bytes for a shared-memory secret");
        st = TD_EIO;
        goto fail;
    }
    r->fd = memfd_create("tensord-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (r->fd < 0 || ftruncate(r->fd, (off_t)r->size) != 0 ||
        fcntl(r->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        snprintf(err, errlen, "shared-memory region of %llu bytes: %s",
                 (unsigned long long)r->size, strerror(errno));
        st = TD_EIO;
        goto fail;
    }
    void *p = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
    if (p == MAP_FAILED) {
        snprintf(err, errlen, "mapping a shared-memory region of %llu bytes: %s",
                 (unsigned long long)r->size, strerror(errno));
        st = errno == ENOMEM ? TD_ENOMEM : TD_EIO;
        goto fail;
    }
    r->data = p;
    memcpy(secret, r->secret, TD_SHM_SECRET_BYTES);
    pthread_mutex_lock(&s->mu);
    r->next = s->regions;
    s->regions = r;
    s->n_regions++;
    s->bytes += r->size;
    pthread_mutex_unlock(&s->mu);
    *out = r;
    return TD_OK;
fail:
    if (r->fd >= 0) close(r->fd);
    td__quota_bytes_uncharge(quota, r->size);
    OPENSSL_cleanse(r->secret, sizeof r->secret);
    td__free(r);
    return st;
}

void td__shm_region_destroy(td__shm_region *r)
{
    if (r == NULL) return;
    td__shm *s = r->shm;
    pthread_mutex_lock(&s->mu);
    td__shm_region **pp = &s->regions;
    while (*pp != NULL && *pp != r) pp = &(*pp)->next;
    if (*pp == r) {
        *pp = r->next;
        s->n_regions--;
        s->bytes -= r->size;
    }
    if (r->fd >= 0) close(r->fd);
    pthread_mutex_unlock(&s->mu);
    munmap(r->data, r->size);
    td__quota_bytes_uncharge(r->quota, r->size);
    OPENSSL_cleanse(r->secret, sizeof r->secret);
    td__free(r);
}

uint8_t *td__shm_region_data(const td__shm_region *r) { return r->data; }
uint64_t td__shm_region_size(const td__shm_region *r) { return r->size; }

td_status td__shm_region_check(const td__shm_region *r, uint64_t region_offset, uint64_t nbytes,
                               const char *what, char *err, size_t errlen)
{
    if (region_offset > r->size || nbytes > r->size - region_offset) {
        snprintf(err, errlen,
                 "%s: region range [%llu, +%llu) is outside the session's %llu-byte region",
                 what, (unsigned long long)region_offset, (unsigned long long)nbytes,
                 (unsigned long long)r->size);
        return TD_ERANGE;
    }
    return TD_OK;
}
