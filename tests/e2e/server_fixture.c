/* server_fixture.c — start and stop a real tensord process for end-to-end tests.
 *
 * The server is forked and exec'd at once, binds port 0 or a fresh socket path, and tells
 * us where it listens on its one stdout line. Its stderr is inherited so its log shows in
 * test output.
 */
#include "server_fixture.h"
#include "tensord.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define FIXTURE_START_MS 15000
#define FIXTURE_STOP_MS 15000

double td_test_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void reap(td_test_server *s)
{
    if (s->stdout_fd >= 0) close(s->stdout_fd);
    s->stdout_fd = -1;
    if (s->sock_path[0]) unlink(s->sock_path);
    s->pid = 0;
}

const char *td_test_server_sanitizer(const td_test_server *s)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%ld/maps", (long)s->pid);
    FILE *f = s->pid > 0 ? fopen(path, "r") : NULL;
    const char *which = NULL;
    while (f != NULL && which == NULL && fgets(line, sizeof line, f) != NULL) {
        if (strstr(line, "libasan") != NULL) which = "asan";
        if (strstr(line, "libtsan") != NULL) which = "tsan";
    }
    if (f != NULL) fclose(f);
    return which;
}

const char *td_test_tensord_bin(void)
{
    const char *bin = getenv("TD_TEST_TENSORD");
    return bin != NULL && bin[0] != '\0' ? bin : getenv("TENSORD_BIN");
}

bool td_test_server_start(td_test_server *s, bool unix_socket, const char *const *extra_args,
                          char *err, size_t errlen)
{
    static atomic_int counter;
    memset(s, 0, sizeof *s);
    s->stdout_fd = -1;
    s->is_unix = unix_socket;
    const char *bin = td_test_tensord_bin();
    if (bin == NULL || bin[0] == '\0') {
        snprintf(err, errlen, "TENSORD_BIN is not set (run the tests through meson test)");
        return false;
    }
    if (access(bin, X_OK) != 0) {
        snprintf(err, errlen, "TENSORD_BIN %s: %s", bin, strerror(errno));
        return false;
    }
    char listen[300];
    if (unix_socket) {
        snprintf(s->sock_path, sizeof s->sock_path, "/tmp/tensord-e2e-%ld-%d.sock",
                 (long)getpid(), atomic_fetch_add(&counter, 1));
        unlink(s->sock_path);
        snprintf(listen, sizeof listen, "unix:%s", s->sock_path);
    } else {
        snprintf(listen, sizeof listen, "127.0.0.1:0");
    }

    const char *argv[32];
    int argc = 0;
    argv[argc++] = bin;
    argv[argc++] = "--listen";
    argv[argc++] = listen;
    /* A test that stops its server with a session still open waits 2 s, not the default
     * drain timeout (extra_args may give another). */
    argv[argc++] = "--drain-timeout";
    argv[argc++] = "2";
    for (int i = 0; extra_args != NULL && extra_args[i] != NULL && argc < 30; i++)
        argv[argc++] = extra_args[i];
    argv[argc] = NULL;

    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return false;
    }
    /* fork + exec rather than posix_spawn, to set PR_SET_PDEATHSIG: a test killed by its
     * timeout then takes its server with it. The child only calls async-signal-safe
     * functions before exec, so this is safe even after gRPC started threads here. */
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fds[0]);
        close(fds[1]);
        snprintf(err, errlen, "fork: %s", strerror(e));
        return false;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execve(bin, (char *const *)argv, environ);
        _exit(127);
    }
    close(fds[1]);
    s->pid = pid;
    s->stdout_fd = fds[0];

    /* Read the "listening on ADDR" line. */
    char line[480];
    size_t len = 0;
    double deadline = td_test_now_ms() + FIXTURE_START_MS;
    for (;;) {
        char *nl = memchr(line, '\n', len);
        if (nl != NULL) {
            *nl = '\0';
            break;
        }
        double left = deadline - td_test_now_ms();
        struct pollfd pfd = {.fd = s->stdout_fd, .events = POLLIN};
        int pr = left > 0 ? poll(&pfd, 1, (int)left) : 0;
        if (pr < 0 && errno == EINTR) continue;
        ssize_t n = 0;
        if (pr > 0) n = read(s->stdout_fd, line + len, sizeof line - 1 - len);
        if (pr <= 0 || n <= 0 || len + (size_t)n >= sizeof line - 1) {
            line[len] = '\0';
            snprintf(err, errlen, "%s printed no 'listening on' line within %d ms (got '%s')",
                     bin, FIXTURE_START_MS, line);
            td_test_server_kill(s);
            return false;
        }
        len += (size_t)n;
    }
    const char *prefix = "listening on ";
    if (strncmp(line, prefix, strlen(prefix)) != 0) {
        snprintf(err, errlen, "unexpected first line from tensord: '%s'", line);
        td_test_server_kill(s);
        return false;
    }
    snprintf(s->addr, sizeof s->addr, "%s", line + strlen(prefix));
    if (!unix_socket) {
        const char *colon = strrchr(s->addr, ':');
        s->port = colon != NULL ? atoi(colon + 1) : 0;
        if (s->port <= 0) {
            snprintf(err, errlen, "no port in the listening line '%s'", line);
            td_test_server_kill(s);
            return false;
        }
    }
    return true;
}

int td_test_server_stop(td_test_server *s)
{
    if (s->pid <= 0) return -1;
    kill(s->pid, SIGTERM);
    int status = 0;
    double deadline = td_test_now_ms() + FIXTURE_STOP_MS;
    for (;;) {
        pid_t r = waitpid(s->pid, &status, WNOHANG);
        if (r == s->pid) break;
        if (r < 0 && errno != EINTR) {
            reap(s);
            return -1;
        }
        if (td_test_now_ms() > deadline) {
            fprintf(stderr, "server_fixture: tensord did not exit within %d ms of SIGTERM\n",
                    FIXTURE_STOP_MS);
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &status, 0);
            break;
        }
        usleep(10000);
    }
    reap(s);
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
}

void td_test_server_kill(td_test_server *s)
{
    if (s->pid <= 0) return;
    kill(s->pid, SIGKILL);
    int status;
    while (waitpid(s->pid, &status, 0) < 0 && errno == EINTR) {
    }
    reap(s);
}

void td_test_server_uri(const td_test_server *s, const char *device, char *buf, size_t len)
{
    if (s->is_unix)
        snprintf(buf, len, "%s/%s", s->addr, device);
    else
        snprintf(buf, len, "tensord://%s/%s", s->addr, device);
}

int td_test_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = 0;
    socklen_t sl = sizeof sa;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

bool td_test_wait_usage(const char *addr, uint64_t want_sessions, uint64_t want_bytes,
                        int timeout_ms, struct td_server_info *last)
{
    double deadline = td_test_now_ms() + timeout_ms;
    memset(last, 0, sizeof *last);
    for (;;) {
        if (td_server_info_get(addr, 2000, last) == TD_OK && last->sessions == want_sessions &&
            last->bytes_in_use == want_bytes)
            return true;
        if (td_test_now_ms() > deadline) return false;
        usleep(20000);
    }
}
