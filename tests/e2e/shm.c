/* e2e/shm.c — the shared-memory data path of unix-socket clients (tensord.proto "shared
 * memory", README "Same-host clients"), against a real tensord on a unix socket:
 *
 *  - negotiation: a unix: context uses "shm+ring" (the region and its request ring), one with td_options.no_shm, one on TCP and
 *    one on a --no-shm server use "grpc";
 *  - identical bytes: uploads and downloads of 0, 1, odd sizes, around the 64 KiB
 *    threshold, a half region, exactly the region, larger than the region, and every
 *    dtype's byte pattern give the same bytes through shm as through the stream;
 *  - errors through shm are the stream's (a tensor over the session's quota: its upload's
 *    failure is deferred, its read fails naming the quota; the context goes on);
 *  - the region counts against the tenant's max_bytes and the session's byte limit: when
 *    either is not above the region the session opens without one (on the stream);
 *  - a client killed (SIGKILL) while uploading leaves the server serving, with the
 *    tenant's bytes and the server's shared memory back to what they were;
 *  - the side socket refuses a wrong secret, an unknown session, a second request, garbage
 *    and a silent connection; ShmWrite/ShmRead with out-of-range region offsets or lengths
 *    (overflowing ones too) or tensor ranges fail with a clear message and the session
 *    stays usable; a session without a region gets TD_EPROTO; the region fd cannot be
 *    shrunk or grown; one session cannot get another's region; a process of another user
 *    can neither connect to the side socket nor open the server's memfd through /proc.
 */
#include "raw_session.h"
#include "server_fixture.h"
#include "suite_fixture.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define REGION ((size_t)4 << 20) /* --shm-bytes of these tests: 2 MiB halves */

static const char *const k_region_args[] = {"--shm-bytes", "4M", NULL};

static void start_shm(void) { start_server(true, k_region_args); }

TestSuite(shm, .init = start_shm, .fini = stop, .timeout = 120);

Test(shm, negotiation)
{
    expect_transport(NULL, "shm+ring", "default options");
    td_options o = {.no_shm = 1};
    expect_transport(&o, "grpc", "no_shm");
    cr_expect_null(td_context_transport(NULL));
    setenv("TENSORD_NO_SHM", "1", 1);
    expect_transport(NULL, "grpc", "TENSORD_NO_SHM=1");
    setenv("TENSORD_NO_SHM", "0", 1);
    expect_transport(NULL, "shm+ring", "TENSORD_NO_SHM=0");
    unsetenv("TENSORD_NO_SHM");
    td_context *l = NULL;
    cr_assert_eq(td_connect("local:cpu", NULL, &l), TD_OK);
    cr_expect_str_eq(td_context_transport(l), "local");
    td_close(l);
}

Test(shm, tensorctl_info_names_the_transport)
{
    const char *out = tensorctl_info("", srv.addr);
    cr_expect(strstr(out, "transport: shm+ring\n") != NULL, "%s", out);
    out = tensorctl_info("--json", srv.addr);
    cr_expect(strstr(out, "\"transport\": \"shm+ring\"") != NULL, "%s", out);
}

/* Upload `n` bytes as u8[n] on ctx, read them back; compare with src. */
static void round_trip(td_context *ctx, const uint8_t *src, size_t n, const char *what)
{
    int64_t dims[1] = {(int64_t)n};
    td_tensor *t = td_from_host(ctx, TD_U8, 1, dims, src);
    cr_assert_not_null(t, "%s: td_from_host(%zu): %s", what, n, td_last_error(ctx));
    uint8_t *back = malloc(n ? n : 1);
    memset(back, 0xA5, n);
    td_status st = td_read(t, back, n);
    cr_assert_eq(st, TD_OK, "%s: td_read(%zu): %s", what, n, td_last_error(ctx));
    cr_assert(n == 0 || memcmp(back, src, n) == 0, "%s: %zu bytes differ", what, n);
    /* td_write through the same path, then read again */
    if (n > 0) {
        uint8_t *again = malloc(n);
        fill_random_bytes(again, n, n + 99);
        cr_assert_eq(td_write(t, again, n), TD_OK, "%s: td_write: %s", what, td_last_error(ctx));
        cr_assert_eq(td_read(t, back, n), TD_OK);
        cr_assert(memcmp(back, again, n) == 0, "%s: %zu bytes differ after td_write", what, n);
        free(again);
    }
    free(back);
    td_release(t);
}

Test(shm, identical_bytes_both_paths)
{
    td_context *shm = connect_with(NULL);
    td_options o = {.no_shm = 1};
    td_context *grpc = connect_with(&o);
    cr_assert_str_eq(td_context_transport(shm), "shm+ring");
    const size_t t = (size_t)64 << 10, half = REGION / 2;
    const size_t sizes[] = {0,        1,         7,          t - 1,      t,
                            t + 1,    half - 1,  half,       half + 1,   REGION - 1,
                            REGION,   REGION + 1, 3 * REGION + 4099, (size_t)17 << 20};
    size_t max = (size_t)17 << 20;
    uint8_t *src = malloc(max);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        fill_random_bytes(src, sizes[i], i + 1);
        char what[64];
        snprintf(what, sizeof what, "shm, %zu bytes", sizes[i]);
        round_trip(shm, src, sizes[i], what);
        snprintf(what, sizeof what, "grpc, %zu bytes", sizes[i]);
        round_trip(grpc, src, sizes[i], what);
    }
    /* Every dtype's bytes (NaN payloads, negative zero, subnormals: whatever the random
     * bytes make; bool as 0/1), odd element counts above the threshold. */
    for (int dt = 0; dt < TD_DTYPE_COUNT; dt++) {
        size_t es = td_dtype_size((td_dtype)dt);
        int64_t nelem = (int64_t)(((size_t)300 << 10) / es) + 3;
        size_t n = (size_t)nelem * es;
        fill_random_bytes(src, n, 1000 + (uint64_t)dt);
        if (dt == TD_BOOL)
            for (size_t k = 0; k < n; k++) src[k] &= 1;
        uint8_t *a = malloc(n), *b = malloc(n);
        td_tensor *x = td_from_host(shm, (td_dtype)dt, 1, &nelem, src);
        td_tensor *y = td_from_host(grpc, (td_dtype)dt, 1, &nelem, src);
        cr_assert(x != NULL && y != NULL, "dtype %s", td_dtype_name((td_dtype)dt));
        cr_assert_eq(td_read(x, a, n), TD_OK, "%s: %s", td_dtype_name((td_dtype)dt),
                     td_last_error(shm));
        cr_assert_eq(td_read(y, b, n), TD_OK);
        cr_expect(memcmp(a, src, n) == 0 && memcmp(b, src, n) == 0, "dtype %s differs",
                  td_dtype_name((td_dtype)dt));
        td_release(x);
        td_release(y);
        free(a);
        free(b);
    }
    /* Computed results read back through shm equal the stream's. */
    int64_t d2[2] = {512, 513};
    fill_random_bytes(src, 512 * 513 * 4, 77);
    for (size_t k = 0; k < 512 * 513; k++) { /* finite floats */
        float f = (float)(src[k] % 200) - 100.0f;
        memcpy(src + 4 * k, &f, 4);
    }
    td_tensor *ps = td_from_host(shm, TD_F32, 2, d2, src);
    td_tensor *pg = td_from_host(grpc, TD_F32, 2, d2, src);
    td_tensor *qs = td_mul(ps, ps), *qg = td_mul(pg, pg);
    size_t nb = 512 * 513 * 4;
    uint8_t *a = malloc(nb), *b = malloc(nb);
    cr_assert_eq(td_read(qs, a, nb), TD_OK, "%s", td_last_error(shm));
    cr_assert_eq(td_read(qg, b, nb), TD_OK);
    cr_expect(memcmp(a, b, nb) == 0, "mul results differ between shm and grpc");
    free(a);
    free(b);
    free(src);
    td_close(shm);
    td_close(grpc);
}

/* ---- memory after a killed client ---- */

/* kB of RssShmem + RssAnon of pid (its own memory, and the shared mappings it holds). */
static long rss_kb(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    long v = -1;
    size_t fl = strlen(field);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, fl) == 0 && line[fl] == ':') v = atol(line + fl + 1);
    fclose(f);
    return v;
}

/* The killed child: uploads 16 MiB again and again through the region. */
static void upload_forever(const char *uri)
{
    td_context *ctx = NULL;
    if (td_connect(uri, NULL, &ctx) != TD_OK) _exit(2);
    if (strcmp(td_context_transport(ctx), "shm+ring") != 0) _exit(3);
    size_t n = (size_t)16 << 20;
    uint8_t *p = malloc(n);
    if (p == NULL) _exit(4);
    memset(p, 7, n);
    int64_t dims[1] = {(int64_t)n};
    td_tensor *t = td_from_host(ctx, TD_U8, 1, dims, p);
    for (;;) {
        td_write(t, p, n);
        td_read(t, p, n);
    }
}

/* The server's resident shared memory while the child works: polled until it shows half the
 * region (the pages the server touched copying through the slots) or 10 s pass, so that a
 * slow server (ThreadSanitizer's, on a loaded machine) is not caught before its first copy. */
static void measure_shmem(void *arg)
{
    long *v = arg;
    for (double t0 = td_test_now_ms(); td_test_now_ms() - t0 < 10000; usleep(20000)) {
        *v = rss_kb(srv.pid, "RssShmem");
        if (*v >= (long)(REGION / 2 / 1024)) break;
    }
}

Test(shm, killed_client_frees_everything)
{
    long shmem0 = rss_kb(srv.pid, "RssShmem"), shmem_busy = -1;
    /* the child's session holds its tensor and its region; killed 300 ms mid-transfer */
    kill_client_mid_work(upload_forever, REGION + ((size_t)16 << 20), 300, measure_shmem,
                         &shmem_busy);
    long shmem1 = rss_kb(srv.pid, "RssShmem");
    cr_log_info("server RssShmem: %ld kB before, %ld kB during, %ld kB after", shmem0,
                shmem_busy, shmem1);
    cr_expect_geq(shmem_busy, (long)(REGION / 2 / 1024), "the region was in use");
    cr_expect_leq(shmem1, shmem0 + 256, "the region's pages are gone from the server");
    /* still serving, through shm */
    td_context *ctx = connect_with(NULL);
    cr_expect_str_eq(td_context_transport(ctx), "shm+ring");
    uint8_t src[300000], back[300000];
    fill_random_bytes(src, sizeof src, 5);
    round_trip(ctx, src, sizeof src, "after the kill");
    (void)back;
    td_close(ctx);
}

/* ---- hostile clients ---- */

typedef struct side_reply {
    uint32_t status;
    char msg[300];
    uint64_t bytes;
    int fd; /* -1: none */
} side_reply;

/* side_ask ends its sending (shutdown SHUT_WR) after the request when set. */
static bool side_shut_wr;

/* Send `n` bytes of req to the side socket `path` and read the reply. */
static bool side_ask(const char *path, const void *req, size_t n, side_reply *out)
{
    memset(out, 0, sizeof *out);
    out->fd = -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) return false;
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    /* A server that refuses at accept answers and closes before reading: the send may then
     * fail (EPIPE), and the answer is still there to read. */
    if (n > 0) (void)send(fd, req, n, MSG_NOSIGNAL);
    if (side_shut_wr) shutdown(fd, SHUT_WR); /* the end of what this client sends */
    uint8_t buf[24 + 300];
    union {
        char raw[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {.iov_base = buf, .iov_len = sizeof buf - 1};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.raw,
                        .msg_controllen = sizeof ctl.raw};
    ssize_t got = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
    close(fd);
    if (got < 24 || memcmp(buf, "TDSHM001", 8) != 0) return false;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_type == SCM_RIGHTS) memcpy(&out->fd, CMSG_DATA(c), sizeof(int));
    memcpy(&out->status, buf + 8, 4);
    uint32_t ml;
    memcpy(&ml, buf + 12, 4);
    memcpy(&out->bytes, buf + 16, 8);
    size_t m = (size_t)got - 24 < ml ? (size_t)got - 24 : ml;
    memcpy(out->msg, buf + 24, m);
    out->msg[m] = '\0';
    return true;
}

static void make_req(uint8_t req[32], uint64_t id, const uint8_t secret[16])
{
    memcpy(req, "TDSHM001", 8);
    memcpy(req + 8, &id, 8); /* little-endian host */
    memcpy(req + 16, secret, 16);
}

static void open_shm_raw(raw_session *s)
{
    raw_want_shm = true;
    bool ok = raw_open(s, srv.addr, TD_PROTOCOL_MIN, TD_PROTOCOL_MAX, "cpu");
    raw_want_shm = false;
    cr_assert(ok, "raw open: %s", raw_details(s));
    cr_assert_eq(s->shm_bytes, REGION, "the server offered a %zu-byte region", REGION);
    cr_assert(s->shm_path[0] != '\0');
}

Test(shm, side_socket_refusals)
{
    raw_session a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    open_shm_raw(&a);
    open_shm_raw(&b);
    uint8_t req[32];
    side_reply r;

    /* a wrong secret */
    uint8_t bad[16];
    memcpy(bad, a.shm_secret, 16);
    bad[3] ^= 1;
    make_req(req, a.session_id, bad);
    cr_assert(side_ask(a.shm_path, req, 32, &r));
    cr_expect_eq(r.status, TD_EUNAUTHENTICATED, "wrong secret: status %u %s", r.status, r.msg);
    cr_expect_eq(r.fd, -1);
    cr_expect(strstr(r.msg, "no shared-memory region with that secret") != NULL, "%s", r.msg);
    /* session b's id with a's secret */
    make_req(req, b.session_id, a.shm_secret);
    cr_assert(side_ask(a.shm_path, req, 32, &r));
    cr_expect_eq(r.status, TD_EUNAUTHENTICATED);
    cr_expect_eq(r.fd, -1);
    /* garbage, a short request, nothing at all */
    uint8_t junk[32];
    fill_random_bytes(junk, sizeof junk, 3);
    cr_assert(side_ask(a.shm_path, junk, 32, &r));
    cr_expect_eq(r.status, TD_EPROTO, "garbage: %u %s", r.status, r.msg);
    cr_expect(strstr(r.msg, "bad magic") != NULL, "%s", r.msg);
    cr_expect_eq(r.fd, -1);
    double t0 = td_test_now_ms();
    cr_assert(side_ask(a.shm_path, req, 5, &r), "a short request gets an answer in time");
    cr_expect_eq(r.status, TD_ETIMEOUT);
    cr_expect_lt(td_test_now_ms() - t0, 4000.0);
    /* a request that ends early (nothing, or the bare magic, then the end of the stream):
     * a status and a message saying so, not a silent close */
    side_shut_wr = true;
    const size_t short_lens[] = {0, 8};
    for (size_t i = 0; i < 2; i++) {
        cr_assert(side_ask(a.shm_path, req, short_lens[i], &r), "%zu bytes then the end",
                  short_lens[i]);
        cr_expect_eq(r.status, TD_EPROTO, "%zu bytes: %u %s", short_lens[i], r.status, r.msg);
        cr_expect(strstr(r.msg, "incomplete request") != NULL, "%s", r.msg);
        cr_expect_eq(r.fd, -1);
    }
    side_shut_wr = false;

    /* the right secret: the fd, once */
    make_req(req, a.session_id, a.shm_secret);
    cr_assert(side_ask(a.shm_path, req, 32, &r));
    cr_assert_eq(r.status, 0, "%s", r.msg);
    cr_assert_geq(r.fd, 0);
    cr_expect_eq(r.bytes, REGION);
    int fd = r.fd;
    cr_assert(side_ask(a.shm_path, req, 32, &r));
    cr_expect_eq(r.status, TD_EINVAL, "second request: %u %s", r.status, r.msg);
    cr_expect(strstr(r.msg, "handed out already") != NULL, "%s", r.msg);
    cr_expect_eq(r.fd, -1);

    /* sealed: no shrinking or growing under the server's mapping, no new seals */
    cr_expect_neq(ftruncate(fd, 4096), 0, "shrinking the region must fail");
    cr_expect_neq(ftruncate(fd, (off_t)REGION * 2), 0, "growing the region must fail");
    cr_expect_neq(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), 0);

    /* data through the raw region: fill it with garbage everywhere, then a proper write */
    uint8_t *reg = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert_neq(reg, MAP_FAILED);
    close(fd);
    fill_random_bytes(reg, REGION, 9);
    int64_t dims[1] = {1024};
    td__op op = raw_op_full(1, TD_F32, 1, dims, 2.0);
    cr_assert_neq(raw_send_ops(&a, &op, 1), 0u);
    Tensord__V1__ShmWrite sw = TENSORD__V1__SHM_WRITE__INIT;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_SHM_WRITE;
    cm.shm_write = &sw;
    struct {
        uint64_t off, n, roff;
        const char *want;
    } cases[] = {
        {0, 16, REGION, "outside the session's"},             /* starts at the end */
        {0, 16, REGION - 8, "outside the session's"},         /* runs past the end */
        {0, 16, UINT64_MAX - 7, "outside the session's"},     /* offset + n overflows */
        {0, UINT64_MAX, 0, "outside the session's"},          /* length overflows */
        {0, REGION + 1, 0, "outside the session's"},          /* longer than the region */
        {4092, 16, 0, "4096"},                                /* past the tensor's end */
        {UINT64_MAX - 4, 16, 0, NULL},                        /* tensor offset overflows */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sw.tensor = 1;
        sw.offset = cases[i].off;
        sw.nbytes = cases[i].n;
        sw.region_offset = cases[i].roff;
        uint64_t seq;
        cr_assert(raw_send(&a, &cm, NULL, 0, &seq));
        char msg[1024];
        cr_expect_eq(reply_to(&a, seq, msg, sizeof msg), 1, "case %zu: no failure", i);
        if (cases[i].want) cr_expect(strstr(msg, cases[i].want) != NULL, "case %zu: %s", i, msg);
    }
    /* the same for reads */
    Tensord__V1__ShmRead sr = TENSORD__V1__SHM_READ__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_SHM_READ;
    cm.shm_read = &sr;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sr.tensor = 1;
        sr.offset = cases[i].off;
        sr.nbytes = cases[i].n;
        sr.region_offset = cases[i].roff;
        uint64_t seq;
        cr_assert(raw_send(&a, &cm, NULL, 0, &seq));
        char msg[1024];
        cr_expect_eq(reply_to(&a, seq, msg, sizeof msg), 1, "read case %zu: no failure", i);
    }
    /* a good write and read through the raw region: the session is fine */
    memset(reg, 0, 4096);
    float v = 3.5f;
    memcpy(reg + 100, &v, 4);
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_SHM_WRITE;
    cm.shm_write = &sw; /* the oneof's pointers share storage */
    sw.tensor = 1;
    sw.offset = 8;
    sw.nbytes = 4;
    sw.region_offset = 100;
    uint64_t seq;
    cr_assert(raw_send(&a, &cm, NULL, 0, &seq));
    char msg[1024];
    cr_expect_eq(reply_to(&a, seq, msg, sizeof msg), 0, "good shm write: %s", msg);
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_SHM_READ;
    cm.shm_read = &sr;
    sr.tensor = 1;
    sr.offset = 0;
    sr.nbytes = 4096;
    sr.region_offset = REGION - 4096;
    cr_assert(raw_send(&a, &cm, NULL, 0, &seq));
    cr_expect_eq(reply_to(&a, seq, msg, sizeof msg), 0, "good shm read: %s", msg);
    float got[3];
    memcpy(got, reg + REGION - 4096, sizeof got);
    cr_expect(got[0] == 2.0f && got[1] == 2.0f && got[2] == 3.5f, "%g %g %g", got[0], got[1],
              got[2]);
    munmap(reg, REGION);

    /* session b never fetched its region: its bytes are its own, its session fine */
    cr_assert_neq(raw_send_fence(&b), 0u);
    raw_close(&a);
    raw_close(&b);
}

/* Another user's process: it cannot connect to the side socket (it has the main socket's
 * mode, here without write permission for others) and cannot open the server's memfd
 * through /proc (no name anywhere else). Needs root to switch to `nobody`. */
Test(shm, other_user_cannot_reach_the_region)
{
    if (geteuid() != 0) cr_skip_test("needs root to run a process as another user");
    raw_session a;
    memset(&a, 0, sizeof a);
    open_shm_raw(&a);
    /* the server still holds the region's fd (not handed out yet): find it */
    char dir[64], link[128], target[256], memfd_path[160] = "";
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)srv.pid);
    for (int fd = 0; fd < 4096 && memfd_path[0] == '\0'; fd++) {
        snprintf(link, sizeof link, "%s/%d", dir, fd);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n <= 0) continue;
        target[n] = '\0';
        if (strstr(target, "memfd:tensord-shm") != NULL)
            snprintf(memfd_path, sizeof memfd_path, "%s", link);
    }
    cr_assert(memfd_path[0] != '\0', "no tensord-shm memfd among the server's fds");
    pid_t child = fork();
    cr_assert_geq(child, 0);
    if (child == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0) _exit(10);
        int fd = open(memfd_path, O_RDWR);
        if (fd >= 0) _exit(1); /* opened another user's region */
        int s = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof sa.sun_path, "%.100s", a.shm_path);
        if (connect(s, (struct sockaddr *)&sa, sizeof sa) == 0) _exit(2);
        _exit(errno == EACCES ? 0 : 3);
    }
    int status = 0;
    waitpid(child, &status, 0);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "as nobody: exit %d (1: opened the memfd, 2: connected to the side socket, 3: "
              "connect failed but not with EACCES, 10: setuid failed)",
              WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    raw_close(&a);
}

/* Idle connections from one user take at most 16 of the side socket's 64 pending places:
 * the 17th from that user is refused, naming it, while another user's request is served
 * (found by the breaker: 64 idle connections from anyone kept every session off shared
 * memory). */
Test(shm, one_user_cannot_hold_the_side_socket)
{
    raw_session a;
    memset(&a, 0, sizeof a);
    open_shm_raw(&a);
    int idle[16];
    for (int i = 0; i < 16; i++) {
        idle[i] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof sa.sun_path, "%.100s", a.shm_path);
        cr_assert_eq(connect(idle[i], (struct sockaddr *)&sa, sizeof sa), 0, "idle %d", i);
    }
    uint8_t req[32];
    make_req(req, a.session_id, a.shm_secret);
    side_reply r;
    /* the server accepts in its own thread: give it the time to see the 16 */
    bool refused = false;
    for (int tries = 0; tries < 50 && !refused; tries++) {
        cr_assert(side_ask(a.shm_path, req, sizeof req, &r));
        refused = r.fd < 0 && strstr(r.msg, "from this user") != NULL;
        if (r.fd >= 0) cr_assert_fail("the 17th connection of one user got the region");
        if (!refused) usleep(20 * 1000);
    }
    cr_expect(refused, "the 17th connection of one user: '%s'", r.msg);
    if (geteuid() == 0) {
        cr_assert_eq(chmod(a.shm_path, 0666), 0);
        pid_t child = fork();
        cr_assert_geq(child, 0);
        if (child == 0) {
            if (setgid(65534) != 0 || setuid(65534) != 0) _exit(10);
            side_reply c;
            if (!side_ask(a.shm_path, req, sizeof req, &c)) _exit(2);
            _exit(c.status == 0 && c.fd >= 0 ? 0 : 1);
        }
        int status = 0;
        waitpid(child, &status, 0);
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "another user's request while root holds 16: exit %d (1: refused, 2: no "
                  "answer, 10: setuid failed)",
                  WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    for (int i = 0; i < 16; i++) close(idle[i]);
    raw_close(&a);
}

Test(shm, no_region_without_asking)
{
    raw_session s;
    memset(&s, 0, sizeof s);
    open_raw(&s); /* no OpenSession.shm */
    cr_expect_eq(s.shm_bytes, 0u);
    int64_t dims[1] = {4};
    td__op op = raw_op_full(1, TD_F32, 1, dims, 1.0);
    cr_assert_neq(raw_send_ops(&s, &op, 1), 0u);
    Tensord__V1__ShmRead sr = TENSORD__V1__SHM_READ__INIT;
    sr.tensor = 1;
    sr.nbytes = 16;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_SHM_READ;
    cm.shm_read = &sr;
    uint64_t seq;
    cr_assert(raw_send(&s, &cm, NULL, 0, &seq));
    char msg[1024];
    cr_expect_eq(reply_to(&s, seq, msg, sizeof msg), 1);
    cr_expect(strstr(msg, "no shared-memory region") != NULL, "%s", msg);
    raw_close(&s);
}

/* ---- where shared memory is not offered ---- */

Test(shm_off, tcp_and_no_shm_use_the_stream)
{
    start_tcp();
    td_context *ctx = connect_with(NULL);
    cr_expect_str_eq(td_context_transport(ctx), "grpc");
    uint8_t src[300000];
    fill_random_bytes(src, sizeof src, 11);
    round_trip(ctx, src, sizeof src, "tcp");
    td_close(ctx);
    const char *out = tensorctl_info("", srv.addr);
    cr_expect(strstr(out, "transport: grpc (shared memory needs a unix: address)") != NULL, "%s",
              out);
    stop();
    const char *const args[] = {"--no-shm", NULL};
    start_server(true, args);
    ctx = connect_with(NULL);
    cr_expect_str_eq(td_context_transport(ctx), "grpc");
    round_trip(ctx, src, sizeof src, "unix --no-shm");
    td_close(ctx);
    out = tensorctl_info("", srv.addr);
    cr_expect(strstr(out, "transport: grpc (the server offers no shared memory") != NULL, "%s",
              out);
    stop();
}

/* The region is charged to the tenant: a max_bytes quota below it means no region (and a
 * working session on the stream), not a refused session. */
Test(shm_off, quota_too_small_falls_back)
{
    const char *const args[] = {"--max-tenant-bytes", "2M", "--shm-bytes", "4M", NULL};
    start_server(true, args);
    td_context *ctx = connect_with(NULL);
    cr_expect_str_eq(td_context_transport(ctx), "grpc");
    uint8_t src[300000];
    fill_random_bytes(src, sizeof src, 12);
    round_trip(ctx, src, sizeof src, "quota fallback");
    td_close(ctx);
    stop();
}

/* The region counts against the session's byte limit too: a limit not above the region
 * means no region (and the stream), not a refused session. */
Test(shm_off, session_limit_below_region_falls_back)
{
    const char *const args[] = {"--max-session-bytes", "4M", "--shm-bytes", "4M", NULL};
    start_server(true, args);
    td_context *ctx = connect_with(NULL);
    cr_expect_str_eq(td_context_transport(ctx), "grpc");
    uint8_t src[300000];
    fill_random_bytes(src, sizeof src, 14);
    round_trip(ctx, src, sizeof src, "session limit fallback");
    td_close(ctx);
    stop();
}

/* A tensor over the session's byte quota: the server refuses it, the shm upload's failure
 * is deferred, the shm read fails with the quota's message, and the context goes on. */
Test(shm_off, errors_as_on_the_stream)
{
    /* the region's 4 MiB count against the session's 5 MiB: 1 MiB is left for tensors */
    const char *const args[] = {"--max-session-bytes", "5M", "--shm-bytes", "4M", NULL};
    start_server(true, args);
    td_context *ctx = connect_with(NULL);
    cr_assert_str_eq(td_context_transport(ctx), "shm+ring");
    size_t n = (size_t)2 << 20;
    uint8_t *src = malloc(n), *back = malloc(n);
    fill_random_bytes(src, n, 13);
    int64_t dims[1] = {(int64_t)n};
    td_tensor *t = td_from_host(ctx, TD_U8, 1, dims, src);
    cr_assert_not_null(t, "%s", td_last_error(ctx));
    td_status st = td_read(t, back, n);
    cr_expect_neq(st, TD_OK);
    cr_expect(strstr(td_last_error(ctx), "quota") != NULL || strstr(td_last_error(ctx), "max") != NULL,
              "%s: %s", td_status_name(st), td_last_error(ctx));
    td_release(t);
    (void)td_fence(ctx); /* the deferred upload failure, if not reported yet */
    round_trip(ctx, src, (size_t)300 << 10, "after the quota failure");
    free(src);
    free(back);
    td_close(ctx);
    stop();
}

/* ---- host buffers (td_host_alloc): transfers the server copies once ---- */

/* A server whose default region is small (no room for host buffers past the slots) and
 * that grants up to 64 MiB on request; each session may hold 96 MiB, region included. */
static const char *const k_host_args[] = {"--shm-bytes", "4M", "--shm-max-bytes", "64M",
                                          "--max-session-bytes", "96M", NULL};
static void start_host(void) { start_server(true, k_host_args); }
TestSuite(shm_host, .init = start_host, .fini = stop, .timeout = 120);

#define MiB ((size_t)1 << 20)

static uint64_t round_trips(td_context *ctx)
{
    td_stats st;
    td_get_stats(ctx, &st);
    return st.round_trips;
}

/* Bytes uploaded from a host buffer (at its start and at an odd offset into it) and read
 * back into plain memory and into another host buffer are the source's; sizes cross the
 * 64 KiB threshold and the 16 MiB pieces. A host-buffer write waits for the server's copy
 * (one round trip, README "Same-host clients"), a plain-pointer write of the same size
 * does not: the two took different paths. */
Test(shm_host, buffers_move_the_same_bytes_in_one_copy)
{
    td_options o = {.shm_host_bytes = 44 * MiB, .blob_min_bytes = SIZE_MAX};
    td_context *ctx = connect_with(&o);
    cr_assert_str_eq(td_context_transport(ctx), "shm+ring");
    const size_t sizes[] = {1000, 64 << 10, MiB + 1, 16 * MiB, 16 * MiB + 1, 20 * MiB + 4099};
    const size_t skews[] = {0, 4099};
    size_t max = 20 * MiB + 4099 + 4099;
    uint8_t *src = malloc(max), *back = malloc(max);
    uint8_t *hb = td_host_alloc(ctx, max);
    uint8_t *hb2 = td_host_alloc(ctx, max);
    cr_assert(hb != NULL && hb2 != NULL, "%s", td_last_error(ctx));
    cr_expect_eq((uintptr_t)hb % 4096, 0u, "a shared-memory host buffer is page aligned");
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        for (size_t k = 0; k < 2; k++) {
            size_t n = sizes[i];
            uint8_t *p = hb + skews[k];
            fill_random_bytes(src, n, 31 * i + k + 1);
            memcpy(p, src, n);
            int64_t dims[1] = {(int64_t)n};
            uint64_t rt0 = round_trips(ctx);
            td_tensor *t = td_from_host(ctx, TD_U8, 1, dims, p);
            cr_assert_not_null(t, "%zu bytes: %s", n, td_last_error(ctx));
            uint64_t waited = round_trips(ctx) - rt0;
            if (n >= (64 << 10))
                cr_expect_eq(waited, 1u, "%zu bytes from a host buffer: %llu round trips, "
                             "expected the one that waits for the server's copy", n,
                             (unsigned long long)waited);
            memset(p, 0x5A, n); /* the buffer is the caller's again: the tensor keeps its bytes */
            memset(back, 0xA5, n);
            cr_assert_eq(td_read(t, back, n), TD_OK, "%s", td_last_error(ctx));
            cr_expect(memcmp(back, src, n) == 0, "%zu bytes (skew %zu): plain read differs", n,
                      skews[k]);
            uint8_t *q = hb2 + skews[1 - k];
            memset(q, 0xA5, n);
            cr_assert_eq(td_read(t, q, n), TD_OK, "%s", td_last_error(ctx));
            cr_expect(memcmp(q, src, n) == 0, "%zu bytes (skew %zu): host-buffer read differs",
                      n, skews[1 - k]);
            /* td_write from plain memory: the two-copy path, no wait */
            fill_random_bytes(src, n, 977 + i);
            rt0 = round_trips(ctx);
            cr_assert_eq(td_write(t, src, n), TD_OK, "%s", td_last_error(ctx));
            cr_expect_eq(round_trips(ctx) - rt0, 0u, "%zu bytes from plain memory waited", n);
            cr_assert_eq(td_read(t, q, n), TD_OK, "%s", td_last_error(ctx));
            cr_expect(memcmp(q, src, n) == 0, "%zu bytes: after a plain td_write", n);
            td_release(t);
        }
    }
    /* A computed result read into a host buffer equals the one read into plain memory. */
    int64_t d2[2] = {512, 513};
    float *x = (float *)hb;
    for (size_t k = 0; k < 512 * 513; k++) x[k] = (float)(k % 200) - 100.0f;
    td_tensor *a = td_from_host(ctx, TD_F32, 2, d2, x);
    td_tensor *sq = td_mul(a, a);
    cr_assert_eq(td_read(sq, hb2, 512 * 513 * 4), TD_OK, "%s", td_last_error(ctx));
    for (size_t k = 0; k < 512 * 513; k++) {
        float v = (float)(k % 200) - 100.0f;
        if (((float *)hb2)[k] != v * v)
            cr_assert_fail("mul result %zu: %g, expected %g", k, ((float *)hb2)[k], v * v);
    }
    td_release(a);
    td_release(sq);
    cr_expect_eq(td_host_free(ctx, hb), TD_OK);
    cr_expect_eq(td_host_free(ctx, hb2), TD_OK);
    free(src);
    free(back);
    td_close(ctx);
}

/* A full region is TD_ENOMEM naming what to do; freeing makes room again; bad frees are
 * TD_EINVAL and free nothing; td_close frees what is still held (LSan would see a leak
 * of plain buffers). */
Test(shm_host, full_region_and_bad_frees)
{
    td_options o = {.shm_host_bytes = 40 * MiB};
    td_context *ctx = connect_with(&o);
    cr_assert_str_eq(td_context_transport(ctx), "shm+ring");
    void *a = td_host_alloc(ctx, 30 * MiB);
    cr_assert_not_null(a, "%s", td_last_error(ctx));
    cr_expect_null(td_host_alloc(ctx, 20 * MiB), "40 MiB of host buffers hold 30 + 20 MiB?");
    cr_expect_eq(td_last_status(ctx), TD_ENOMEM);
    const char *e = td_last_error(ctx);
    cr_expect(strstr(e, "td_host_free") != NULL && strstr(e, "shm_host_bytes") != NULL &&
                  strstr(e, "--shm-max-bytes") != NULL,
              "the message says what to do: %s", e);
    void *b = td_host_alloc(ctx, 10 * MiB); /* the 10 MiB left */
    cr_expect_not_null(b, "%s", td_last_error(ctx));
    cr_assert_eq(td_host_free(ctx, a), TD_OK);
    void *c = td_host_alloc(ctx, 20 * MiB);
    cr_expect_not_null(c, "after a free: %s", td_last_error(ctx));
    /* bad frees */
    cr_expect_eq(td_host_free(ctx, (uint8_t *)c + 1), TD_EINVAL);
    cr_expect(strstr(td_last_error(ctx), "not a live buffer") != NULL, "%s", td_last_error(ctx));
    cr_assert_eq(td_host_free(ctx, b), TD_OK);
    cr_expect_eq(td_host_free(ctx, b), TD_EINVAL, "a second free");
    int stack;
    cr_expect_eq(td_host_free(ctx, &stack), TD_EINVAL, "a stack pointer");
    td_context *other = connect_with(NULL);
    cr_expect_eq(td_host_free(other, c), TD_EINVAL, "another context's buffer");
    cr_expect_eq(td_host_free(ctx, NULL), TD_OK);
    cr_expect_null(td_host_alloc(ctx, 0));
    cr_expect_eq(td_last_status(ctx), TD_EINVAL);
    cr_expect_null(td_host_alloc(NULL, 10));
    cr_expect_eq(td_host_free(NULL, c), TD_EINVAL);
    /* c is still good after the refused frees */
    memset(c, 7, 20 * MiB);
    int64_t dims[1] = {(int64_t)(20 * MiB)};
    td_tensor *t = td_from_host(ctx, TD_U8, 1, dims, c);
    cr_assert_not_null(t, "%s", td_last_error(ctx));
    uint8_t *back = malloc(20 * MiB);
    cr_assert_eq(td_read(t, back, 20 * MiB), TD_OK, "%s", td_last_error(ctx));
    cr_expect(back[0] == 7 && back[20 * MiB - 1] == 7);
    free(back);
    /* Contexts without host memory of their own (the stream, local) give plain memory
     * with the same rules; buffers still held at td_close are freed by it. */
    td_options g = {.no_shm = 1};
    td_context *grpc = connect_with(&g);
    td_context *local = NULL;
    cr_assert_eq(td_connect("local:cpu", NULL, &local), TD_OK);
    td_context *plain[2] = {grpc, local};
    for (int i = 0; i < 2; i++) {
        uint8_t *p = td_host_alloc(plain[i], 3 * MiB + 5);
        cr_assert_not_null(p, "%s", td_last_error(plain[i]));
        cr_expect_eq((uintptr_t)p % 64, 0u);
        fill_random_bytes(p, 3 * MiB + 5, 40 + (uint64_t)i);
        int64_t d[1] = {3 * MiB + 5};
        td_tensor *u = td_from_host(plain[i], TD_U8, 1, d, p);
        uint8_t *r = malloc(3 * MiB + 5);
        cr_assert_eq(td_read(u, r, 3 * MiB + 5), TD_OK, "%s", td_last_error(plain[i]));
        cr_expect(memcmp(r, p, 3 * MiB + 5) == 0, "context %d: bytes differ", i);
        free(r);
        cr_expect_eq(td_host_free(plain[i], p + 64), TD_EINVAL);
        cr_expect_eq(td_host_free(plain[i], p), TD_OK);
        cr_expect_eq(td_host_free(plain[i], p), TD_EINVAL, "a second free");
        for (int k = 0; k < 20; k++) cr_expect_not_null(td_host_alloc(plain[i], 1000 + k));
    }
    td_close(grpc);
    td_close(local);
    td_close(other);
    td_close(ctx); /* c and t still held */
}

/* A read into a host buffer of a tensor the server refused (over the session's 96 MiB,
 * with the 64 MiB region) fails with the quota's message; the context goes on. */
Test(shm_host, errors_through_host_buffers)
{
    td_options o = {.shm_host_bytes = 48 * MiB}; /* clamped to the 64 MiB --shm-max-bytes */
    td_context *ctx = connect_with(&o);
    cr_assert_str_eq(td_context_transport(ctx), "shm+ring");
    size_t n = 40 * MiB;
    uint8_t *hb = td_host_alloc(ctx, n);
    cr_assert_not_null(hb, "%s", td_last_error(ctx));
    int64_t dims[1] = {(int64_t)n};
    td_tensor *t = td_full(ctx, TD_U8, 1, dims, 3.0);
    td_status st = td_read(t, hb, n);
    cr_expect_neq(st, TD_OK);
    cr_expect(strstr(td_last_error(ctx), "quota") != NULL ||
                  strstr(td_last_error(ctx), "max") != NULL,
              "%s: %s", td_status_name(st), td_last_error(ctx));
    td_release(t);
    (void)td_fence(ctx);
    int64_t small[1] = {(int64_t)(5 * MiB)};
    fill_random_bytes(hb, 5 * MiB, 9);
    td_tensor *u = td_from_host(ctx, TD_U8, 1, small, hb);
    uint8_t *back = malloc(5 * MiB);
    cr_assert_eq(td_read(u, back, 5 * MiB), TD_OK, "after the failure: %s", td_last_error(ctx));
    cr_expect(memcmp(back, hb, 5 * MiB) == 0);
    free(back);
    td_close(ctx);
}

/* The size a session asks for (OpenSession.shm_bytes) is rounded up to 8 KiB, at least
 * 1 MiB, at most --shm-max-bytes; 0 is the --shm-bytes default. */
Test(shm_host, region_requests_are_rounded_and_clamped)
{
    const struct {
        uint64_t ask, want;
    } cases[] = {{0, 4 * MiB},
                 {1, MiB},
                 {5 * MiB + 1, 5 * MiB + 8192},
                 {64 * MiB, 64 * MiB},
                 {64 * MiB + 1, 64 * MiB},
                 {UINT64_MAX, 64 * MiB}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        raw_session s;
        memset(&s, 0, sizeof s);
        raw_want_shm = true;
        raw_want_shm_bytes = cases[i].ask;
        bool ok = raw_open(&s, srv.addr, TD_PROTOCOL_MIN, TD_PROTOCOL_MAX, "cpu");
        raw_want_shm = false;
        raw_want_shm_bytes = 0;
        cr_assert(ok, "raw open: %s", raw_details(&s));
        cr_expect_eq(s.shm_bytes, cases[i].want, "asked %llu: got %llu, expected %llu",
                     (unsigned long long)cases[i].ask, (unsigned long long)s.shm_bytes,
                     (unsigned long long)cases[i].want);
        raw_close(&s);
    }
}

/* Host bytes whose region the session's byte limit cannot hold: no region, the stream,
 * and td_host_alloc gives plain memory that works. */
Test(shm_off, host_bytes_over_the_session_limit_fall_back)
{
    const char *const args[] = {"--max-session-bytes", "32M", "--shm-bytes", "4M",
                                "--shm-max-bytes", "64M", NULL};
    start_server(true, args);
    td_options o = {.shm_host_bytes = 40 * MiB};
    td_context *ctx = connect_with(&o);
    cr_expect_str_eq(td_context_transport(ctx), "grpc");
    /* the answer says why (a client's debug line shows it) */
    raw_session s;
    memset(&s, 0, sizeof s);
    raw_want_shm = true;
    raw_want_shm_bytes = 40 * MiB;
    bool ok = raw_open(&s, srv.addr, TD_PROTOCOL_MIN, TD_PROTOCOL_MAX, "cpu");
    raw_want_shm = false;
    raw_want_shm_bytes = 0;
    cr_assert(ok, "raw open: %s", raw_details(&s));
    cr_expect_eq(s.shm_bytes, 0u);
    cr_expect(strstr(s.shm_refused, "byte limit") != NULL, "shm_refused: '%s'", s.shm_refused);
    raw_close(&s);
    uint8_t *p = td_host_alloc(ctx, 300000);
    cr_assert_not_null(p, "%s", td_last_error(ctx));
    fill_random_bytes(p, 300000, 15);
    round_trip(ctx, p, 300000, "host bytes fallback");
    td_close(ctx);
    stop();
}

/* The blob offer is off by default on a shared-memory session (tensord.h blob_min_bytes):
 * a 2 MiB upload from plain memory waits for no round trip (the offer's fingerprint query
 * is one), while the same upload with blob_min_bytes set explicitly makes the offer. Over
 * TCP the default still offers. Each read-back equals what was written. */
Test(shm_host, blob_offer_is_off_by_default_on_shared_memory)
{
    const size_t n = 2 * MiB;
    uint8_t *src = malloc(n), *back = malloc(n);
    cr_assert(src != NULL && back != NULL);
    for (int explicit_offer = 0; explicit_offer < 2; explicit_offer++) {
        td_options o = {.blob_min_bytes = explicit_offer ? MiB : 0};
        td_context *ctx = connect_with(&o);
        cr_assert_str_eq(td_context_transport(ctx), "shm+ring");
        int64_t dims[1] = {(int64_t)n};
        td_tensor *t = td_full(ctx, TD_U8, 1, dims, 0);
        cr_assert(t != NULL && td_fence(ctx) == TD_OK, "%s", td_last_error(ctx));
        fill_random_bytes(src, n, 77 + (uint64_t)explicit_offer);
        uint64_t rt0 = round_trips(ctx);
        cr_assert_eq(td_write(t, src, n), TD_OK, "%s", td_last_error(ctx));
        uint64_t waited = round_trips(ctx) - rt0;
        if (explicit_offer)
            cr_expect_geq(waited, 1u, "blob_min_bytes set: the upload made the offer");
        else
            cr_expect_eq(waited, 0u, "default options on shared memory: no offer");
        cr_assert_eq(td_read(t, back, n), TD_OK, "%s", td_last_error(ctx));
        cr_expect_eq(memcmp(src, back, n), 0);
        td_release(t);
        td_close(ctx);
    }
    free(src);
    free(back);
}

Test(shm_off, blob_offer_stays_on_by_default_over_tcp)
{
    const size_t n = 2 * MiB;
    uint8_t *src = malloc(n);
    cr_assert(src != NULL);
    start_tcp();
    td_context *ctx = connect_with(NULL);
    cr_assert_str_eq(td_context_transport(ctx), "grpc");
    int64_t dims[1] = {(int64_t)n};
    td_tensor *t = td_full(ctx, TD_U8, 1, dims, 0);
    cr_assert(t != NULL && td_fence(ctx) == TD_OK, "%s", td_last_error(ctx));
    fill_random_bytes(src, n, 91);
    uint64_t rt0 = round_trips(ctx);
    cr_assert_eq(td_write(t, src, n), TD_OK, "%s", td_last_error(ctx));
    cr_expect_geq(round_trips(ctx) - rt0, 1u, "default options over TCP: the upload made the offer");
    td_release(t);
    td_close(ctx);
    free(src);
    stop();
}
