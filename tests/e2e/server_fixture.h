/* server_fixture.h — run a real tensord for end-to-end tests.
 *
 * Starts $TENSORD_BIN --listen 127.0.0.1:0 (or a fresh unix socket under /tmp) as a child
 * process, waits for its one stdout line "listening on ADDR", and stops it at the end.
 * Thread-safety: one thread (the test's main thread). */
#ifndef TD_TESTS_E2E_SERVER_FIXTURE_H
#define TD_TESTS_E2E_SERVER_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct td_test_server {
    pid_t pid;          /* 0 when not running */
    int stdout_fd;      /* read end of the server's stdout; kept open so it never gets EPIPE */
    bool is_unix;
    char addr[512];     /* as printed: "127.0.0.1:PORT" or "unix:PATH" */
    char sock_path[256];/* unix socket path ("" for TCP) */
    int port;           /* TCP port (0 for unix) */
} td_test_server;

/* The tensord binary the suites run: $TD_TEST_TENSORD when set (tests/run.sh points it at
 * a ThreadSanitizer build of the server), else $TENSORD_BIN (set by meson test). */
const char *td_test_tensord_bin(void);
/* Start the server. extra_args (may be NULL) is a NULL-terminated list of more flags.
 * Returns true, or false with a message in err (binary missing, no "listening on" line
 * within 15 s, ...). */
bool td_test_server_start(td_test_server *s, bool unix_socket, const char *const *extra_args,
                          char *err, size_t errlen);

/* The sanitizer runtime the running server has mapped: "asan", "tsan", or NULL for a plain
 * build. Its RSS then holds shadow memory, redzones and quarantine that are not the
 * server's own: memory bounds in tests widen for ASan and are not checked under TSan (the
 * plain and ASan passes check them; the TSan pass is for races). */
const char *td_test_server_sanitizer(const td_test_server *s);
/* SIGTERM, wait up to 15 s (then SIGKILL). Returns the exit status (0 = clean), 128+signal
 * if it died of a signal, or -1 if it was not running. */
int td_test_server_stop(td_test_server *s);

/* SIGKILL and reap (the "server crashed" case). */
void td_test_server_kill(td_test_server *s);

/* "tensord://ADDR/DEVICE" (TCP) or "ADDR/DEVICE" (unix) for td_connect. */
void td_test_server_uri(const td_test_server *s, const char *device, char *buf, size_t len);

/* A TCP port on 127.0.0.1 that nothing listens on (bound, then released). */
int td_test_free_port(void);

/* Poll GetInfo on addr until sessions == want_sessions and bytes_in_use == want_bytes, for
 * up to timeout_ms. Returns true when reached; *last has the last answer (zeroed if none). */
struct td_server_info;
bool td_test_wait_usage(const char *addr, uint64_t want_sessions, uint64_t want_bytes,
                        int timeout_ms, struct td_server_info *last);

/* Milliseconds on a monotonic clock. */
double td_test_now_ms(void);
#endif
