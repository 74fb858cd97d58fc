/* unit/client/shm.c — the client's end of the shared-memory handshake (client/shm.c,
 * compiled in) against a fake side socket in this process, as a rogue or broken server
 * would answer: the client maps only a sealed region of the offered size, and turns a
 * refusal, a wrong size, an unsealed fd, garbage or silence into an error (the context
 * then uses the stream), never a crash or a hang.
 */
#include "client/shm.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define SIZE ((uint64_t)1 << 20)

enum fake_mode { SEALED, UNSEALED, WRONG_SIZE, REFUSE, GARBAGE, SILENT };

typedef struct fake {
    int listen_fd;
    enum fake_mode mode;
    uint8_t req[TD_SHM_REQUEST_BYTES];
    char path[108];
} fake;

static void *serve(void *arg)
{
    fake *f = arg;
    int c = accept(f->listen_fd, NULL, NULL);
    if (c < 0) return NULL;
    size_t got = 0;
    while (got < sizeof f->req) {
        ssize_t n = recv(c, f->req + got, sizeof f->req - got, 0);
        if (n <= 0) break;
        got += (size_t)n;
    }
    if (f->mode == SILENT) {
        sleep(2);
        close(c);
        return NULL;
    }
    int fd = memfd_create("fake", MFD_ALLOW_SEALING | MFD_CLOEXEC);
    uint64_t size = f->mode == WRONG_SIZE ? SIZE / 2 : SIZE;
    cr_assert(fd >= 0 && ftruncate(fd, (off_t)size) == 0);
    if (f->mode != UNSEALED) cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    uint8_t rep[TD_SHM_REPLY_BYTES + 16];
    memcpy(rep, f->mode == GARBAGE ? "HTTP/1.1" : TD_SHM_MAGIC, 8);
    uint32_t st = f->mode == REFUSE ? TD_EUNAUTHENTICATED : 0, mlen = f->mode == REFUSE ? 6 : 2;
    memcpy(rep + 8, &st, 4);
    memcpy(rep + 12, &mlen, 4);
    memcpy(rep + 16, &size, 8);
    memcpy(rep + 24, f->mode == REFUSE ? "nope!!" : "ok", mlen);
    struct iovec iov = {.iov_base = rep, .iov_len = TD_SHM_REPLY_BYTES + mlen};
    union {
        char raw[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.raw,
                        .msg_controllen = sizeof ctl.raw};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    (void)sendmsg(c, &mh, MSG_NOSIGNAL);
    close(fd);
    close(c);
    return NULL;
}

static td_status ask(enum fake_mode mode, int timeout_ms, td__shm_map *m, char *err, size_t len,
                     fake *f)
{
    memset(f, 0, sizeof *f);
    f->mode = mode;
    snprintf(f->path, sizeof f->path, "/tmp/td-unit-shm-%d-%d.sock", (int)getpid(), (int)mode);
    unlink(f->path);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", f->path);
    f->listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
    cr_assert(bind(f->listen_fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
              listen(f->listen_fd, 1) == 0);
    pthread_t th;
    pthread_create(&th, NULL, serve, f);
    uint8_t secret[TD_SHM_SECRET_BYTES];
    for (int i = 0; i < TD_SHM_SECRET_BYTES; i++) secret[i] = (uint8_t)(i * 7 + 1);
    memset(m, 0, sizeof *m);
    td_status st = td__shm_map_open(f->path, 0x0102030405060708ull, secret, SIZE, timeout_ms,
                                    m, err, len);
    pthread_join(th, NULL);
    close(f->listen_fd);
    unlink(f->path);
    return st;
}

Test(client_shm, sealed_region_is_mapped_and_request_is_well_formed)
{
    td__shm_map m;
    char err[512] = "";
    fake f;
    td_status st = ask(SEALED, 5000, &m, err, sizeof err, &f);
    cr_assert_eq(st, TD_OK, "%s", err);
    cr_expect_not_null(m.data);
    cr_expect_eq(m.size, SIZE);
    m.data[0] = 1;
    m.data[SIZE - 1] = 2; /* mapped read-write, whole */
    cr_expect(memcmp(f.req, TD_SHM_MAGIC, 8) == 0);
    cr_expect_eq(f.req[8], 0x08); /* session id, little-endian */
    cr_expect_eq(f.req[15], 0x01);
    cr_expect_eq(f.req[16], 1);
    cr_expect_eq(f.req[31], (uint8_t)(15 * 7 + 1));
    td__shm_map_close(&m);
    cr_expect_null(m.data);
}

Test(client_shm, unsealed_region_is_refused)
{
    td__shm_map m;
    char err[512] = "";
    fake f;
    cr_expect_eq(ask(UNSEALED, 5000, &m, err, sizeof err, &f), TD_EPROTO);
    cr_expect(strstr(err, "not sealed") != NULL, "%s", err);
    cr_expect_null(m.data);
}

Test(client_shm, wrong_size_is_refused)
{
    td__shm_map m;
    char err[512] = "";
    fake f;
    cr_expect_eq(ask(WRONG_SIZE, 5000, &m, err, sizeof err, &f), TD_EPROTO);
    cr_expect(strstr(err, "no region of the 1048576 bytes offered") != NULL, "%s", err);
    cr_expect_null(m.data);
}

Test(client_shm, refusal_garbage_and_silence)
{
    td__shm_map m;
    char err[512] = "";
    fake f;
    cr_expect_eq(ask(REFUSE, 5000, &m, err, sizeof err, &f), TD_EUNAUTHENTICATED);
    cr_expect(strstr(err, "refused: nope!!") != NULL, "%s", err);
    cr_expect_eq(ask(GARBAGE, 5000, &m, err, sizeof err, &f), TD_EPROTO);
    cr_expect(strstr(err, "does not speak") != NULL, "%s", err);
    cr_expect_eq(ask(SILENT, 300, &m, err, sizeof err, &f), TD_ETIMEOUT);
    cr_expect(strstr(err, "no answer") != NULL, "%s", err);
    cr_expect_null(m.data);
    /* nobody listening */
    uint8_t secret[TD_SHM_SECRET_BYTES] = {0};
    cr_expect_eq(td__shm_map_open("/tmp/td-unit-shm-nobody.sock", 1, secret, SIZE, 500, &m, err,
                                  sizeof err),
                 TD_EUNAVAILABLE);
    cr_expect_eq(td__shm_map_open("/tmp/x", 1, secret, 0, 500, &m, err, sizeof err), TD_EPROTO);
}
