/* connlimit.c — open-file limit, connection cap and accept4 guard (see connlimit.h).
 *
 * Why interpose accept4 rather than fix it afterwards: once gRPC 1.51 has seen EMFILE the
 * listener is dead and the only way back is a new grpc_server on the same address, while
 * the dead one still holds the bound socket. Never letting gRPC see the error keeps the
 * one listener alive, and the same hook is the only place where gRPC's connections can be
 * counted and refused (1.51 has no GRPC_ARG_MAX_ALLOWED_INCOMING_CONNECTIONS).
 *
 * Counting without a close() hook: slot[fd] holds the inode of the socket accepted on that
 * descriptor (0: none). A sweep fstat()s each slot; a descriptor that is closed, or now
 * names another file, frees its slot. Sweeps run when the cap is reached (at most every
 * SWEEP_MIN_MS) and when someone asks for the count, so the count can only overstate the
 * open connections, by those closed since the last sweep.
 */
#include "server/connlimit.h"

#include "common/alloc.h"
#include "common/log.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_SLOTS ((uint64_t)1 << 20) /* descriptors tracked (8 MiB of slots at most) */
#define SWEEP_MIN_MS 50
/* Pending connections one accept4 call may refuse before returning. gRPC's epoll is
 * edge-triggered: what is left in the backlog waits for the next connection, so drain it. */
#define DRAIN_MAX 4096
#define LOG_EVERY_MS 10000

/* glibc declares the address argument as a transparent union (__SOCKADDR_ARG). */
typedef int (*accept4_fn)(int, __SOCKADDR_ARG, socklen_t *__restrict, int);

static struct {
    atomic_uintptr_t real; /* libc's (or a sanitizer's) accept4 */
    atomic_ullong *slots;
    uint64_t nslots;
    atomic_ullong open, max;
    atomic_ullong refused_limit, refused_nofile;
    atomic_llong last_trouble_ms, last_sweep_ms, last_log_ms;
    atomic_ullong logged_limit, logged_nofile; /* counts at the last log line */
    atomic_int spare; /* descriptor given up to accept when out of descriptors, -1: none */
    pthread_mutex_t sweep_mu;
} g = {.spare = -1, .sweep_mu = PTHREAD_MUTEX_INITIALIZER, .last_trouble_ms = -1000000};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static accept4_fn real_accept4(void)
{
    accept4_fn f = (accept4_fn)atomic_load(&g.real);
    if (f == NULL) {
        void *p = dlsym(RTLD_NEXT, "accept4");
        memcpy(&f, &p, sizeof f);
        atomic_store(&g.real, (uintptr_t)f);
    }
    return f;
}

uint64_t td__conn_default_max(uint64_t nofile)
{
    uint64_t m = nofile / 2;
    if (m > 4096) m = 4096;
    if (m < 16) m = 16;
    return m;
}

static void sweep(void)
{
    if (g.slots == NULL || pthread_mutex_trylock(&g.sweep_mu) != 0) return;
    atomic_store(&g.last_sweep_ms, now_ms());
    for (uint64_t fd = 0; fd < g.nslots; fd++) {
        unsigned long long ino = atomic_load_explicit(&g.slots[fd], memory_order_relaxed);
        if (ino == 0) continue;
        struct stat st;
        if (fstat((int)fd, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == ino) continue;
        /* Gone. A concurrent accept on this descriptor swaps in its own inode first, and
         * then this exchange fails and the new connection keeps its count. */
        if (atomic_compare_exchange_strong(&g.slots[fd], &ino, 0)) atomic_fetch_sub(&g.open, 1);
    }
    pthread_mutex_unlock(&g.sweep_mu);
}

/* Record connection fd; false when the cap is reached (the caller closes it). */
static bool admit(int fd)
{
    if (g.slots == NULL) return true;
    if ((uint64_t)fd >= g.nslots) return false;
    if (atomic_load(&g.open) >= atomic_load(&g.max) &&
        now_ms() - atomic_load(&g.last_sweep_ms) >= SWEEP_MIN_MS)
        sweep();
    if (atomic_load(&g.open) >= atomic_load(&g.max)) return false;
    struct stat st;
    unsigned long long ino = fstat(fd, &st) == 0 ? (unsigned long long)st.st_ino : 0;
    if (ino == 0) ino = 1; /* still counted; the next sweep frees it */
    if (atomic_exchange(&g.slots[fd], ino) == 0) atomic_fetch_add(&g.open, 1);
    return true;
}

static void note_refusal(bool nofile)
{
    int64_t now = now_ms();
    atomic_fetch_add(nofile ? &g.refused_nofile : &g.refused_limit, 1);
    if (nofile) atomic_store(&g.last_trouble_ms, now);
    long long last = atomic_load(&g.last_log_ms);
    if (now - last < LOG_EVERY_MS || !atomic_compare_exchange_strong(&g.last_log_ms, &last, now))
        return;
    unsigned long long lim = atomic_load(&g.refused_limit), nof = atomic_load(&g.refused_nofile);
    unsigned long long dl = lim - atomic_exchange(&g.logged_limit, lim);
    unsigned long long dn = nof - atomic_exchange(&g.logged_nofile, nof);
    td__log(TD_LOG_WARN,
            "refusing connections: %llu over the connection limit (%llu open, max %llu), %llu "
            "for lack of file descriptors, since the last report (at most one per %d s)",
            dl, (unsigned long long)atomic_load(&g.open), (unsigned long long)atomic_load(&g.max),
            dn, LOG_EVERY_MS / 1000);
}

/* Out of descriptors: give up the spare to accept one pending connection and drop it, so
 * the client is told at once instead of waiting in the backlog. Returns whether one was
 * dropped. */
static bool drop_one(accept4_fn real, int lfd)
{
    int spare = atomic_exchange(&g.spare, -1);
    if (spare < 0) return false;
    close(spare);
    int c = __extension__ real(lfd, (struct sockaddr *)NULL, NULL, SOCK_CLOEXEC);
    if (c >= 0) close(c);
    int again = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (again >= 0 && !atomic_compare_exchange_strong(&g.spare, &(int){-1}, again)) close(again);
    return c >= 0;
}

/* The interposed accept4 (see the top of the file). Errors that are the caller's own
 * (EBADF, EINVAL, ENOTSOCK, EFAULT, EOPNOTSUPP) pass through unchanged. */
int accept4(int fd, __SOCKADDR_ARG addr, socklen_t *__restrict addrlen, int flags)
{
    accept4_fn real = real_accept4();
    if (real == NULL) {
        errno = ENOSYS;
        return -1;
    }
    for (int n = 0; n < DRAIN_MAX; n++) {
        int c = real(fd, addr, addrlen, flags);
        if (c >= 0) {
            if (admit(c)) return c;
            close(c);
            note_refusal(false);
            continue;
        }
        int e = errno;
        switch (e) {
        case EMFILE:
        case ENFILE:
            note_refusal(true);
            if (drop_one(real, fd)) continue;
            errno = EAGAIN;
            return -1;
        case ENOBUFS:
        case ENOMEM:
        case EPERM:
        case EPROTO:
        case ENOPROTOOPT:
        case ENETDOWN:
        case ENETUNREACH:
        case EHOSTDOWN:
        case EHOSTUNREACH:
        case ENONET:
        case ETIMEDOUT:
        case ECONNABORTED:
            continue;
        default:
            errno = e;
            return -1;
        }
    }
    errno = EAGAIN;
    return -1;
}

bool td__conn_guard_active(void)
{
    accept4_fn mine = accept4, found;
    void *p = dlsym(RTLD_DEFAULT, "accept4");
    memcpy(&found, &p, sizeof found);
    return found == mine;
}

uint64_t td__conn_limit_init(uint64_t max_connections, uint64_t *nofile)
{
    struct rlimit rl;
    uint64_t limit = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rlim_t want = rl.rlim_max;
        if (want == RLIM_INFINITY || want > MAX_SLOTS) want = MAX_SLOTS;
        if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
            rlim_t old = rl.rlim_cur;
            rl.rlim_cur = want;
            if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
                td__log(TD_LOG_INFO, "open-file limit raised from %llu to %llu (the hard limit)",
                        (unsigned long long)old, (unsigned long long)want);
            else
                td__log(TD_LOG_WARN, "cannot raise the open-file limit from %llu to %llu",
                        (unsigned long long)old, (unsigned long long)want);
            getrlimit(RLIMIT_NOFILE, &rl);
        }
        limit = rl.rlim_cur == RLIM_INFINITY ? MAX_SLOTS : (uint64_t)rl.rlim_cur;
    }
    if (nofile != NULL) *nofile = limit;
    uint64_t max = max_connections != 0 ? max_connections : td__conn_default_max(limit);
    if (max + 16 > limit)
        td__log(TD_LOG_WARN,
                "max connections %llu leaves under 16 of the %llu file descriptors for "
                "everything else; accepting may then fail for lack of descriptors",
                (unsigned long long)max, (unsigned long long)limit);
    atomic_store(&g.max, max);
    g.nslots = limit < MAX_SLOTS ? limit : MAX_SLOTS;
    g.slots = td__calloc(g.nslots, sizeof *g.slots);
    if (g.slots == NULL) {
        g.nslots = 0;
        td__log(TD_LOG_WARN, "out of memory for the connection table: connections not capped");
    }
    atomic_store(&g.spare, open("/dev/null", O_RDONLY | O_CLOEXEC));
    (void)real_accept4();
    if (!td__conn_guard_active())
        td__log(TD_LOG_WARN, "accept4 is not interposed (static build?): connections are not "
                             "capped and running out of file descriptors stops accepting");
    return max;
}

uint64_t td__conn_open_count(void)
{
    sweep();
    return atomic_load(&g.open);
}

uint64_t td__conn_refused_limit(void) { return atomic_load(&g.refused_limit); }
uint64_t td__conn_refused_nofile(void) { return atomic_load(&g.refused_nofile); }

bool td__conn_fd_trouble(void)
{
    return now_ms() - atomic_load(&g.last_trouble_ms) < TD_CONN_TROUBLE_MS;
}
