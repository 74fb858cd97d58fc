/* e2e/info.c — GetInfo against a real tensord: the library calls and tensorctl, over TCP
 * and a unix socket, in every address form the API documents. */
#include "server_fixture.h"
#include "suite_fixture.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static void check_info(const char *address)
{
    td_server_info info;
    memset(&info, 0xA5, sizeof info);
    td_status st = td_server_info_get(address, 5000, &info);
    cr_assert_eq(st, TD_OK, "td_server_info_get(%s): %s: %s", address, td_status_name(st),
                 td_connect_error());
    cr_expect_leq(info.protocol_min, 1u);
    cr_expect_geq(info.protocol_max, 1u);
    cr_expect_neq(info.server_version[0], '\0', "empty server version");
    cr_assert_geq(info.n_devices, 1);
    cr_assert_leq(info.n_devices, 16);
    bool has_cpu = false;
    for (int i = 0; i < info.n_devices; i++) {
        cr_expect_neq(info.devices[i].name[0], '\0');
        cr_expect_neq(info.devices[i].kind[0], '\0');
        cr_expect_leq(info.devices[i].memory_free, info.devices[i].memory_total);
        if (strcmp(info.devices[i].name, "cpu") == 0) {
            has_cpu = true;
            cr_expect_str_eq(info.devices[i].kind, "cpu");
        }
    }
    cr_expect(has_cpu, "no cpu device listed");
    /* The wire limits this client was built for. */
    cr_expect_eq(info.chunk_bytes, 1u << 20);
    cr_expect_geq(info.max_message_bytes, (1u << 20) + 4096);
    cr_expect_gt(info.max_tensor_bytes, 0);
    cr_expect_eq(info.sessions, 0);
    cr_expect_eq(info.tensors, 0);
    cr_expect_eq(info.bytes_in_use, 0);
}

Test(info, tcp_address_forms, .init = start_tcp, .fini = stop, .timeout = 60)
{
    char a[600];
    check_info(srv.addr);
    snprintf(a, sizeof a, "tensord://%s", srv.addr);
    check_info(a);
    snprintf(a, sizeof a, "tensord://%s/cpu", srv.addr);
    check_info(a);
    snprintf(a, sizeof a, "localhost:%d", srv.port);
    check_info(a);
}

Test(info, unix_socket, .init = start_unix, .fini = stop, .timeout = 60)
{
    char a[600];
    check_info(srv.addr);
    /* The td_connect form with a trailing device also works. */
    snprintf(a, sizeof a, "%s/cpu", srv.addr);
    check_info(a);
}

Test(info, ping_one_channel, .init = start_tcp, .fini = stop, .timeout = 60)
{
    uint64_t rtt[50];
    memset(rtt, 0, sizeof rtt);
    td_status st = td_server_ping(srv.addr, 50, 5000, rtt);
    cr_assert_eq(st, TD_OK, "%s", td_connect_error());
    for (int i = 0; i < 50; i++) {
        cr_expect_gt(rtt[i], 0, "round trip %d took 0 ns", i);
        cr_expect_lt(rtt[i], 5000000000ull, "round trip %d slower than its timeout", i);
    }
    cr_expect_eq(td_server_ping(srv.addr, 0, 5000, rtt), TD_EINVAL);
}

Test(info, bad_addresses, .timeout = 60)
{
    td_server_info info;
    const char *bad[] = {"", "nohost", "127.0.0.1:", "127.0.0.1:http", "local:cpu",
                         "http://127.0.0.1:80", "unix:", "[::1:7070"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        td_status st = td_server_info_get(bad[i], 1000, &info);
        cr_expect_eq(st, TD_EINVAL, "'%s' gave %s", bad[i], td_status_name(st));
        cr_expect_neq(td_connect_error()[0], '\0', "'%s': no message", bad[i]);
    }
}

Test(info, nothing_listening, .timeout = 60)
{
    int port = td_test_free_port();
    cr_assert_gt(port, 0);
    char a[64];
    snprintf(a, sizeof a, "127.0.0.1:%d", port);
    td_server_info info;
    double t0 = td_test_now_ms();
    td_status st = td_server_info_get(a, 2000, &info);
    double dt = td_test_now_ms() - t0;
    cr_expect_eq(st, TD_EUNAVAILABLE, "%s: %s", td_status_name(st), td_connect_error());
    cr_expect_lt(dt, 3000, "took %.0f ms", dt);
    cr_expect(strstr(td_connect_error(), a) != NULL, "message does not name %s: %s", a,
              td_connect_error());
    st = td_server_info_get("unix:/nonexistent/tensord-e2e.sock", 2000, &info);
    cr_expect_eq(st, TD_EUNAVAILABLE, "%s: %s", td_status_name(st), td_connect_error());
}

/* Run tensorctl with args; returns its exit status and its stdout in out. */
static int run_tensorctl(const char *args, char *out, size_t outlen)
{
    const char *bin = getenv("TENSORCTL_BIN");
    cr_assert(bin != NULL, "TENSORCTL_BIN is not set");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", bin, args);
    FILE *p = popen(cmd, "r");
    cr_assert(p != NULL);
    size_t n = fread(out, 1, outlen - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Test(tensorctl, info_and_ping, .init = start_tcp, .fini = stop, .timeout = 60)
{
    char out[8192], args[700];
    snprintf(args, sizeof args, "info %s", srv.addr);
    int rc = run_tensorctl(args, out, sizeof out);
    cr_expect_eq(rc, 0, "tensorctl info: exit %d: %s", rc, out);
    cr_expect(strstr(out, "cpu") != NULL, "no cpu device in: %s", out);
    cr_expect(strstr(out, "protocol") != NULL, "no protocol line in: %s", out);
    cr_expect(strstr(out, "GiB") != NULL || strstr(out, "memory unknown") != NULL,
              "no memory figures in: %s", out);

    snprintf(args, sizeof args, "ping %s -n 20", srv.addr);
    rc = run_tensorctl(args, out, sizeof out);
    cr_expect_eq(rc, 0, "tensorctl ping: exit %d: %s", rc, out);
    cr_expect(strstr(out, "median") != NULL && strstr(out, "p99") != NULL, "%s", out);
}

/* A server that shows its CPU only (--devices cpu), also on a GPU host. */
static const char *const cpu_only[] = {"--devices", "cpu", NULL};
static void start_tcp_cpu(void) { start_server(false, cpu_only); }
static void start_unix_cpu(void) { start_server(true, cpu_only); }

/* A device the server lacks, named in ADDR: exit 1, naming it and the devices there are. */
static void expect_no_device(const char *addr, const char *missing)
{
    char out[8192], args[700], want[128];
    snprintf(args, sizeof args, "info %s", addr);
    int rc = run_tensorctl(args, out, sizeof out);
    cr_expect_eq(rc, 1, "tensorctl info %s: exit %d: %s", addr, rc, out);
    snprintf(want, sizeof want, "no device '%s'; it has: cpu", missing);
    cr_expect(strstr(out, want) != NULL, "tensorctl info %s: no \"%s\" in: %s", addr, want,
              out);
    cr_expect(strstr(out, "version:") == NULL, "printed the info anyway: %s", out);
}

static void expect_info_ok(const char *addr)
{
    char out[8192], args[700];
    snprintf(args, sizeof args, "info %s", addr);
    int rc = run_tensorctl(args, out, sizeof out);
    cr_expect_eq(rc, 0, "tensorctl info %s: exit %d: %s", addr, rc, out);
}

/* A device list a session open refuses by itself: tensorctl info at `addr` exits 1 with the
 * message td_connect gives for `uri` (the same list), and prints no info. */
static void expect_open_refusal(const char *addr, const char *uri)
{
    td_context *c = NULL;
    td_status st = td_connect(uri, NULL, &c);
    cr_assert_neq(st, TD_OK, "td_connect(%s) opened a session", uri);
    char msg[1024], out[8192], args[700];
    snprintf(msg, sizeof msg, "%s", td_connect_error());
    snprintf(args, sizeof args, "info '%s'", addr);
    int rc = run_tensorctl(args, out, sizeof out);
    cr_expect_eq(rc, 1, "tensorctl info %s: exit %d: %s", addr, rc, out);
    cr_expect(strstr(out, msg) != NULL, "tensorctl info %s: not the open's \"%s\" in: %s", addr,
              msg, out);
    cr_expect(strstr(out, "version:") == NULL, "printed the info anyway: %s", out);
}

Test(tensorctl, info_names_a_missing_device, .init = start_tcp_cpu, .fini = stop, .timeout = 60)
{
    char a[700];
    snprintf(a, sizeof a, "tensord://%s/cuda:0", srv.addr);
    expect_no_device(a, "cuda:0");
    snprintf(a, sizeof a, "%s/cuda:0", srv.addr); /* HOST:PORT/DEVICE, no tensord:// */
    expect_no_device(a, "cuda:0");
    snprintf(a, sizeof a, "--json tensord://%s/cpu,cuda:1", srv.addr);
    expect_no_device(a, "cuda:1");
    snprintf(a, sizeof a, "tensord://%s/cuda", srv.addr);
    expect_no_device(a, "cuda");
    const char *have[] = {"cpu", "cpu:0", "auto"};
    for (size_t i = 0; i < sizeof have / sizeof have[0]; i++) {
        snprintf(a, sizeof a, "tensord://%s/%s", srv.addr, have[i]);
        expect_info_ok(a);
        snprintf(a, sizeof a, "%s/%s", srv.addr, have[i]);
        expect_info_ok(a);
    }
}

/* Lists every server refuses passed the check: 'auto' after the first entry, cpu:0 twice
 * (cpu is cpu:0), empty entries. */
Test(tensorctl, info_refuses_what_the_open_refuses, .init = start_tcp_cpu, .fini = stop,
     .timeout = 60)
{
    const char *bad[] = {"cpu,auto", "cpu:0,cpu", ",,"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char uri[700], bare[700];
        snprintf(uri, sizeof uri, "tensord://%s/%s", srv.addr, bad[i]);
        snprintf(bare, sizeof bare, "%s/%s", srv.addr, bad[i]);
        expect_open_refusal(uri, uri);
        expect_open_refusal(bare, uri);
    }
    /* what the open refuses in the rest of the address, refused before connecting in the
     * open's words (it was "cannot reach ... is the server running?"), and a device list too
     * long for the open (it was cut to 63 bytes and checked as another name) */
    expect_open_refusal("127.0.0.1:99999/cpu", "tensord://127.0.0.1:99999/cpu");
    char uri[700];
    snprintf(uri, sizeof uri, "tensord://%s/%070d", srv.addr, 0);
    expect_open_refusal(uri, uri);
}

/* ADDR names no server td_connect could open: exit 1, no info printed. */
static void expect_refused(const char *addr)
{
    char out[8192], args[700];
    snprintf(args, sizeof args, "info '%s'", addr);
    int rc = run_tensorctl(args, out, sizeof out);
    cr_expect_eq(rc, 1, "tensorctl info %s: exit %d: %s", addr, rc, out);
    cr_expect(strstr(out, "version:") == NULL, "printed the info anyway: %s", out);
}

Test(tensorctl, info_names_a_missing_device_unix, .init = start_unix_cpu, .fini = stop,
     .timeout = 60)
{
    char a[700];
    snprintf(a, sizeof a, "%s/cuda:0", srv.addr);
    expect_no_device(a, "cuda:0");
    snprintf(a, sizeof a, "%s/cpu", srv.addr);
    expect_info_ok(a);
    snprintf(a, sizeof a, "%s/cpu,auto", srv.addr);
    expect_open_refusal(a, a);
    /* a last component that is no device name is part of the socket path, for td_connect
     * and for tensorctl alike: no socket there (it printed the info and exited 0) */
    const char *not_devices[] = {"gpu", "bogus", "CPU"};
    for (size_t i = 0; i < sizeof not_devices / sizeof not_devices[0]; i++) {
        snprintf(a, sizeof a, "%s/%s", srv.addr, not_devices[i]);
        td_context *c = NULL;
        cr_expect_eq(td_connect(a, NULL, &c), TD_EUNAVAILABLE, "td_connect(%s)", a);
        if (c != NULL) td_close(c);
        expect_refused(a);
    }
}

Test(tensorctl, usage_and_failures, .timeout = 60)
{
    char out[8192];
    cr_expect_eq(run_tensorctl("--help", out, sizeof out), 0);
    cr_expect(strstr(out, "usage") != NULL, "%s", out);
    cr_expect_eq(run_tensorctl("info --help", out, sizeof out), 0);
    cr_expect_eq(run_tensorctl("ping -h", out, sizeof out), 0);
    cr_expect_eq(run_tensorctl("", out, sizeof out), 2);
    cr_expect_eq(run_tensorctl("frobnicate", out, sizeof out), 2);
    cr_expect_eq(run_tensorctl("info", out, sizeof out), 2);
    cr_expect_eq(run_tensorctl("ping 127.0.0.1:1 -n 0", out, sizeof out), 2);
    cr_expect_eq(run_tensorctl("ping 127.0.0.1:1 -n", out, sizeof out), 2);
    cr_expect_eq(run_tensorctl("info a b", out, sizeof out), 2);
    char args[64];
    snprintf(args, sizeof args, "info 127.0.0.1:%d", td_test_free_port());
    int rc = run_tensorctl(args, out, sizeof out);
    cr_expect_eq(rc, 1, "exit %d: %s", rc, out);
    cr_expect(strstr(out, "cannot reach") != NULL, "%s", out);
}

/* tensorctl with args exits want_rc, and its output holds needle. */
static void expect_tensorctl(const char *args, int want_rc, const char *needle)
{
    char out[8192];
    int rc = run_tensorctl(args, out, sizeof out);
    cr_expect_eq(rc, want_rc, "tensorctl %s: exit %d, not %d: %s", args, rc, want_rc, out);
    cr_expect(strstr(out, needle) != NULL, "tensorctl %s: no \"%s\" in: %s", args, needle, out);
}

/* The GNU spelling --name=value, as getopt_long takes it: the value is the rest of the
 * argument after the first '=' (so it may hold '='); a flag given a value, an empty value
 * and an unknown option are usage errors that say which. */
Test(tensorctl, name_equals_value, .init = start_tcp, .fini = stop, .timeout = 60)
{
    char args[700], want[700];
    snprintf(args, sizeof args, "ping -n 2 --timeout=5000 %s", srv.addr);
    snprintf(want, sizeof want, "2 GetInfo round trips to %s", srv.addr);
    expect_tensorctl(args, 0, want);
    snprintf(args, sizeof args, "ping --count=3 -t 5000 %s", srv.addr);
    snprintf(want, sizeof want, "3 GetInfo round trips to %s", srv.addr);
    expect_tensorctl(args, 0, want);
    snprintf(args, sizeof args, "info --timeout=5000 --json %s", srv.addr);
    snprintf(want, sizeof want, "{\"server\": \"%s\", \"version\": ", srv.addr);
    expect_tensorctl(args, 0, want);

    /* usage errors: values that reached their option's own check, then an empty value, a
     * flag given a value, an unknown option */
    const struct {
        const char *args, *msg;
    } bad[] = {
        {"ping --timeout=0", "tensorctl: bad timeout '0' (milliseconds, 1..3600000)"},
        {"ping --timeout=5000=1", "tensorctl: bad timeout '5000=1'"},
        {"ping --count=0", "tensorctl: bad count '0' (1..1000000)"},
        {"sessions --kill=0", "tensorctl: bad session id '0' (1..2^63-1)"},
        {"ping --timeout=", "tensorctl: option --timeout needs a value"},
        {"info --token=", "tensorctl: option --token needs a value"},
        {"sessions --kill=", "tensorctl: option --kill needs a value"},
        {"info --json=1", "tensorctl: option --json takes no value"},
        {"sessions --json=", "tensorctl: option --json takes no value"},
        {"info --help=1", "tensorctl: option --help takes no value"},
        {"ping --json=1", "tensorctl: unknown option '--json'"}, /* ping has no --json */
        {"info --foo=bar", "tensorctl: unknown option '--foo'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "%s %s", bad[i].args, srv.addr);
        expect_tensorctl(args, 2, bad[i].msg);
        expect_tensorctl(args, 2, "usage: tensorctl ");
    }
    expect_tensorctl("--help=1", 2, "tensorctl: option --help takes no value");
    expect_tensorctl("--version=1", 2, "tensorctl: option --version takes no value");
}
