/* e2e/placement.c — devices in one server (issue 19), against a real tensord started with
 * --cpu-devices 3, so that placement, --devices and tenant allow-lists are tested without
 * a GPU: "auto" spreads concurrent sessions over the least-loaded devices and the client
 * is told where it landed; --devices hides the others; a tenant pinned to one device in
 * the tokens file cannot open another; the default device and "cpu" are cpu:0. */
#include "server_fixture.h"
#include "suite_fixture.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256];
static char tokens[320];

/* --devices cpu: the same three devices in builds with a Vulkan module (lavapipe) */
static void start_three(void)
{
    const char *args[] = {"--cpu-devices", "3", "--devices", "cpu", NULL};
    start_with(args);
}

static void expect_refused(const char *device, const td_options *o, td_status want,
                           const char *needle)
{
    char uri[700];
    td_test_server_uri(&srv, device, uri, sizeof uri);
    td_context *ctx = NULL;
    td_status st = td_connect(uri, o, &ctx);
    cr_assert_eq(st, want, "td_connect(%s): %s, want %s (%s)", uri, td_status_name(st),
                 td_status_name(want), td_connect_error());
    cr_expect(strstr(td_connect_error(), needle) != NULL, "message '%s' lacks '%s'",
              td_connect_error(), needle);
    cr_assert_null(ctx);
}

Test(placement, info_lists_three_cpu_devices, .init = start_three, .fini = stop, .timeout = 60)
{
    td_server_info info;
    cr_assert_eq(td_server_info_get(srv.addr, 5000, &info), TD_OK, "%s", td_connect_error());
    cr_assert_eq(info.n_devices, 3);
    for (int i = 0; i < 3; i++) {
        char want[16];
        snprintf(want, sizeof want, "cpu:%d", i);
        cr_expect_str_eq(info.devices[i].name, want);
        cr_expect_str_eq(info.devices[i].kind, "cpu");
        cr_expect_gt(info.devices[i].memory_total, 0);
    }
}

Test(placement, default_and_plain_cpu_are_cpu0, .init = start_three, .fini = stop,
     .timeout = 60)
{
    char uri[700];
    snprintf(uri, sizeof uri, "tensord://%s", srv.addr);
    td_context *ctx;
    cr_assert_eq(td_connect(uri, NULL, &ctx), TD_OK, "%s", td_connect_error());
    cr_expect_str_eq(td_device_name(ctx), "cpu:0");
    td_close(ctx);
    ctx = connect_device("cpu", NULL);
    cr_expect_str_eq(td_device_name(ctx), "cpu:0");
    td_close(ctx);
    ctx = connect_device("cpu:2", NULL);
    cr_expect_str_eq(td_device_name(ctx), "cpu:2");
    td_close(ctx);
    /* no accelerator here: a kind without index has no candidate */
    expect_refused("cuda", NULL, TD_EINVAL, "no cuda device");
    expect_refused("cpu:3", NULL, TD_EINVAL, "unknown device 'cpu:3'");
}

/* Which of cpu:0..2 the name is, or -1. */
static int cpu_index(const char *name)
{
    if (strncmp(name, "cpu:", 4) != 0 || name[4] < '0' || name[4] > '2' || name[5] != '\0')
        return -1;
    return name[4] - '0';
}

Test(placement, auto_goes_to_the_least_loaded_device, .init = start_three, .fini = stop,
     .timeout = 60)
{
    /* three concurrent sessions: one on each device */
    td_context *ctx[3];
    bool seen[3] = {false, false, false};
    for (int i = 0; i < 3; i++) {
        ctx[i] = connect_device("auto", NULL);
        int k = cpu_index(td_device_name(ctx[i]));
        cr_assert_geq(k, 0, "auto placed session %d on '%s'", i, td_device_name(ctx[i]));
        cr_expect_not(seen[k], "auto put two of three sessions on %s", td_device_name(ctx[i]));
        seen[k] = true;
    }
    /* the sessions work where they were placed */
    td_tensor *a = td_from_host(ctx[1], TD_F32, 1, (int64_t[]){4}, (float[]){1, 2, 3, 4});
    td_tensor *b = td_add(a, a);
    float out[4];
    cr_assert_eq(td_read(b, out, sizeof out), TD_OK, "%s", td_last_error(ctx[1]));
    cr_expect_eq(out[3], 8.0f);
    td_release(a);
    td_release(b);
    /* free the device of session 1: the next auto session goes there */
    char freed[32];
    snprintf(freed, sizeof freed, "%s", td_device_name(ctx[1]));
    td_close(ctx[1]);
    td_server_info info;
    cr_assert(td_test_wait_usage(srv.addr, 2, 0, 10000, &info) || info.sessions == 2,
              "server still counts %llu sessions", (unsigned long long)info.sessions);
    ctx[1] = connect_device("auto", NULL);
    cr_expect_str_eq(td_device_name(ctx[1]), freed);
    /* a fourth goes to some device (all equally loaded) and a fifth avoids that one */
    td_context *d4 = connect_device("auto", NULL);
    td_context *d5 = connect_device("auto", NULL);
    cr_expect_str_neq(td_device_name(d4), td_device_name(d5));
    td_close(d4);
    td_close(d5);
    for (int i = 0; i < 3; i++) td_close(ctx[i]);
}

struct opener {
    char uri[700];
    td_context *ctx;
    td_status st;
};

static void *open_thread(void *arg)
{
    struct opener *o = arg;
    o->st = td_connect(o->uri, NULL, &o->ctx);
    return NULL;
}

Test(placement, concurrent_auto_opens_spread, .init = start_three, .fini = stop, .timeout = 60)
{
    struct opener op[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        memset(&op[i], 0, sizeof op[i]);
        td_test_server_uri(&srv, "auto", op[i].uri, sizeof op[i].uri);
        cr_assert_eq(pthread_create(&th[i], NULL, open_thread, &op[i]), 0);
    }
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    bool seen[3] = {false, false, false};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(op[i].st, TD_OK, "%s", td_status_name(op[i].st));
        int k = cpu_index(td_device_name(op[i].ctx));
        cr_assert_geq(k, 0);
        cr_expect_not(seen[k], "two concurrent auto sessions on %s", td_device_name(op[i].ctx));
        seen[k] = true;
    }
    for (int i = 0; i < 3; i++) td_close(op[i].ctx);
}

static void start_filtered(void)
{
    const char *args[] = {"--cpu-devices", "3", "--devices", "cpu:0,cpu:2", NULL};
    start_with(args);
}

Test(placement, devices_flag_hides_the_others, .init = start_filtered, .fini = stop,
     .timeout = 60)
{
    td_server_info info;
    cr_assert_eq(td_server_info_get(srv.addr, 5000, &info), TD_OK, "%s", td_connect_error());
    cr_assert_eq(info.n_devices, 2);
    cr_expect_str_eq(info.devices[0].name, "cpu:0");
    cr_expect_str_eq(info.devices[1].name, "cpu:2");
    expect_refused("cpu:1", NULL, TD_EINVAL, "unknown device 'cpu:1'");
    td_context *a = connect_device("auto", NULL);
    td_context *b = connect_device("auto", NULL);
    cr_expect_str_neq(td_device_name(a), "cpu:1");
    cr_expect_str_neq(td_device_name(b), "cpu:1");
    cr_expect_str_neq(td_device_name(a), td_device_name(b));
    td_close(a);
    td_close(b);
}

Test(placement, devices_flag_naming_no_device_stops_the_server, .timeout = 60)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "'%s' --listen 127.0.0.1:0 --cpu-devices 2 --devices cpu:0,cuda:5 2>&1 </dev/null",
             td_test_tensord_bin());
    FILE *p = popen(cmd, "r");
    cr_assert(p != NULL);
    char all[8192] = "";
    size_t len = 0;
    for (size_t n; (n = fread(all + len, 1, sizeof all - 1 - len, p)) > 0;) len += n;
    all[len] = '\0';
    int rc = pclose(p);
    cr_expect_neq(rc, 0, "tensord started with --devices naming a missing device");
    cr_expect(strstr(all, "'cuda:5' names no device of this host") != NULL, "output: %s", all);
    cr_expect(strstr(all, "cpu:1") != NULL, "the message lists the host's devices: %s", all);
}

/* tensord with `flags` must refuse to start, saying `needle`. */
static void expect_start_refused(const char *flags, const char *needle)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' --listen 127.0.0.1:0 %s 2>&1 </dev/null",
             td_test_tensord_bin(), flags);
    FILE *p = popen(cmd, "r");
    cr_assert(p != NULL);
    char all[8192] = "";
    size_t len = 0;
    for (size_t n; (n = fread(all + len, 1, sizeof all - 1 - len, p)) > 0;) len += n;
    all[len] = '\0';
    cr_expect_neq(pclose(p), 0, "tensord started with %s", flags);
    cr_expect(strstr(all, needle) != NULL, "%s: output: %s", flags, all);
}

Test(placement, cpu_devices_zero_is_refused, .timeout = 60)
{
    expect_start_refused("--cpu-devices 0", "is not an integer in 1..8");
}

/* --devices takes the entries devices= does (auth/tokens.h): no repeats, no 'auto' */
Test(placement, devices_flag_takes_distinct_device_names, .timeout = 60)
{
    expect_start_refused("--cpu-devices 2 --devices cpu:1,cpu:1", "list of distinct device");
    expect_start_refused("--cpu-devices 2 --devices auto", "list of distinct device");
}

/* ---- a tenant pinned to one device ---- */

static void token_new(const char *tenant, const char *flags, char *out, size_t cap)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "'%s' token new --tenant %s --tokens-file '%s' %s",
             getenv("TENSORCTL_BIN"), tenant, tokens, flags);
    FILE *p = popen(cmd, "r");
    cr_assert(p != NULL);
    cr_assert(fgets(out, (int)cap, p) != NULL, "no token from '%s'", cmd);
    cr_assert_eq(pclose(p), 0);
    out[strcspn(out, "\n")] = '\0';
}

static char pinned[80], free_tenant[80], pair[80];

static void start_pinned(void)
{
    snprintf(dir, sizeof dir, "/tmp/td-place-XXXXXX");
    cr_assert(mkdtemp(dir) != NULL);
    snprintf(tokens, sizeof tokens, "%s/tokens", dir);
    token_new("pinned", "--devices cpu:1", pinned, sizeof pinned);
    token_new("roaming", "", free_tenant, sizeof free_tenant);
    token_new("pair", "--devices cpu:2,cpu:1", pair, sizeof pair);
    const char *args[] = {"--cpu-devices", "3", "--devices", "cpu", "--tokens-file", tokens,
                          NULL};
    start_with(args);
}

static void stop_pinned(void)
{
    stop();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

Test(placement, pinned_tenant_cannot_open_another_device, .init = start_pinned,
     .fini = stop_pinned, .timeout = 60)
{
    td_options o;
    memset(&o, 0, sizeof o);
    o.token = pinned;
    expect_refused("cpu:0", &o, TD_EUNAUTHENTICATED, "tenant 'pinned' may not use device cpu:0");
    expect_refused("cpu", &o, TD_EUNAUTHENTICATED, "its devices: cpu:1");
    expect_refused("cpu:2", &o, TD_EUNAUTHENTICATED, "may not use device cpu:2");
    td_context *c = connect_device("cpu:1", &o);
    cr_expect_str_eq(td_device_name(c), "cpu:1");
    td_close(c);
    /* auto and no device place it on its one device, however loaded */
    td_context *a = connect_device("auto", &o);
    td_context *b = connect_device("auto", &o);
    cr_expect_str_eq(td_device_name(a), "cpu:1");
    cr_expect_str_eq(td_device_name(b), "cpu:1");
    char uri[700];
    snprintf(uri, sizeof uri, "tensord://%s", srv.addr);
    td_context *d;
    cr_assert_eq(td_connect(uri, &o, &d), TD_OK, "%s", td_connect_error());
    cr_expect_str_eq(td_device_name(d), "cpu:1");
    td_close(a);
    td_close(b);
    td_close(d);
    /* another tenant is not restricted */
    o.token = free_tenant;
    c = connect_device("cpu:0", &o);
    cr_expect_str_eq(td_device_name(c), "cpu:0");
    td_close(c);
}

/* devices= entries no device can match ("bogus", "auto", a repeated one) are refused by
 * token new and by the server loading the file (--check-config included); a well-formed
 * name this host lacks (cpu:9) is accepted: the file may serve other hosts. */
static int run_status(const char *cmd)
{
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

Test(placement, token_devices_must_be_device_names, .timeout = 60)
{
    snprintf(dir, sizeof dir, "/tmp/td-tokdev-XXXXXX");
    cr_assert(mkdtemp(dir) != NULL);
    snprintf(tokens, sizeof tokens, "%s/tokens", dir);
    char cmd[1400], conf[300];
    static const char *const bad[] = {"bogus", "auto", "CPU", "cpu:1,cpu:1", "cuda,cuda",
                                      "cpu:01", "cpu:", "cpu,,cpu:1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "'%s' token new --tenant t --tokens-file '%s' --devices '%s' "
                 ">/dev/null 2>&1", getenv("TENSORCTL_BIN"), tokens, bad[i]);
        cr_expect_eq(run_status(cmd), 2, "token new --devices '%s' was accepted", bad[i]);
    }
    char tok[80];
    token_new("elsewhere", "--devices cpu:9,cuda:0,hip,vulkan:1", tok, sizeof tok);
    snprintf(conf, sizeof conf, "%s/tensord.conf", dir);
    FILE *f = fopen(conf, "w");
    cr_assert(f != NULL);
    fprintf(f, "tokens_file = %s\n", tokens);
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' --check-config '%s' >/dev/null 2>&1", td_test_tensord_bin(),
             conf);
    cr_expect_eq(run_status(cmd), 0, "--check-config refused well-formed devices=");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        f = fopen(tokens, "a");
        cr_assert(f != NULL);
        fprintf(f, "sha256:%064d bad devices=%s\n", 0, bad[i]);
        fclose(f);
        snprintf(cmd, sizeof cmd, "'%s' --check-config '%s' 2>&1 | grep -q 'distinct device "
                 "names or kinds'", td_test_tensord_bin(), conf);
        cr_expect_eq(run_status(cmd), 0, "--check-config accepted devices=%s", bad[i]);
        snprintf(cmd, sizeof cmd, "sed -i '$d' '%s'", tokens);
        cr_assert_eq(run_status(cmd), 0);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

/* ---- tensors between devices of one server (issue 19, item 2) ---- */

/* n f32 elements whose bits are every pattern class: NaNs with payloads, infinities,
 * denormals, negative zero; bit-exact comparison is then meaningful. */
static uint32_t *bit_patterns(size_t n)
{
    uint32_t *v = malloc(n * sizeof *v);
    cr_assert(v != NULL);
    uint32_t x = 0x9E3779B9u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        v[i] = x;
    }
    if (n >= 4) {
        v[0] = 0x7FC00001u; /* NaN with a payload */
        v[1] = 0x80000000u; /* -0 */
        v[2] = 0x00000001u; /* smallest denormal */
        v[3] = 0xFF800000u; /* -inf */
    }
    return v;
}

static void check_moves(td_context *ctx, const char *first, const char *second,
                        const char *outside)
{
    cr_assert_eq(td_context_device_count(ctx), 2);
    cr_expect_str_eq(td_context_device_at(ctx, 0), first);
    cr_expect_str_eq(td_context_device_at(ctx, 1), second);
    cr_expect_null(td_context_device_at(ctx, 2));
    const size_t n = (size_t)3 << 18; /* 3 MiB of f32: several chunks each way */
    uint32_t *bits = bit_patterns(n);
    td_tensor *x = td_from_host(ctx, TD_F32, 2, (int64_t[]){768, 1024}, bits);
    cr_assert_not_null(x, "%s", td_last_error(ctx));
    cr_expect_str_eq(td_tensor_device(x), first);
    td_tensor *y = td_to_device(x, second);
    cr_assert_not_null(y, "%s", td_last_error(ctx));
    cr_expect_str_eq(td_tensor_device(y), second);
    uint32_t *got = calloc(n, sizeof *got);
    cr_assert(got != NULL);
    cr_assert_eq(td_read(y, got, n * 4), TD_OK, "%s", td_last_error(ctx));
    cr_expect_eq(memcmp(got, bits, n * 4), 0, "the copy on %s differs from the original",
                 second);
    /* ops run where their inputs are, and the result stays there */
    td_tensor *z = td_neg(y);
    cr_assert_not_null(z, "%s", td_last_error(ctx));
    cr_expect_str_eq(td_tensor_device(z), second);
    /* ... and back: still the same bits */
    td_tensor *w = td_to_device(z, first);
    td_tensor *back = td_neg(w);
    cr_assert_not_null(back, "%s", td_last_error(ctx));
    cr_expect_str_eq(td_tensor_device(back), first);
    memset(got, 0, n * 4);
    cr_assert_eq(td_read(back, got, n * 4), TD_OK, "%s", td_last_error(ctx));
    cr_expect_eq(memcmp(got, bits, n * 4), 0, "moving there and back changed the bits");
    /* inputs on two devices: refused at once, naming both; nothing copied */
    td_tensor *mixed = td_add(x, y);
    cr_expect_null(mixed);
    cr_expect_eq(td_last_status(ctx), TD_EINVAL);
    char want[128];
    snprintf(want, sizeof want, "is on device %s and input 1", first);
    cr_expect(strstr(td_last_error(ctx), want) != NULL, "%s", td_last_error(ctx));
    snprintf(want, sizeof want, "on device %s;", second);
    cr_expect(strstr(td_last_error(ctx), want) != NULL, "%s", td_last_error(ctx));
    /* a device the session does not span */
    cr_expect_null(td_to_device(x, outside));
    cr_expect(strstr(td_last_error(ctx), "not one of this session's") != NULL, "%s",
              td_last_error(ctx));
    /* graphs take inputs on the first device: one on the second is refused, naming it */
    cr_assert_eq(td_graph_begin(ctx), TD_OK, "%s", td_last_error(ctx));
    td_tensor *gi = td_graph_input(ctx, "x", TD_F32, 2, (int64_t[]){768, 1024});
    cr_assert_eq(td_graph_output(ctx, "y", td_neg(gi)), TD_OK, "%s", td_last_error(ctx));
    td_graph *g;
    cr_assert_eq(td_graph_end(ctx, &g), TD_OK, "%s", td_last_error(ctx));
    td_tensor *gout = NULL;
    cr_expect_eq(td_graph_run(g, 1, NULL, &y, 1, NULL, &gout), TD_EINVAL);
    cr_expect(strstr(td_last_error(ctx), "is on device") != NULL &&
                  strstr(td_last_error(ctx), second) != NULL,
              "%s", td_last_error(ctx));
    cr_assert_eq(td_graph_run(g, 1, NULL, &x, 1, NULL, &gout), TD_OK, "%s", td_last_error(ctx));
    cr_expect_str_eq(td_tensor_device(gout), first);
    td_release(gout);
    td_graph_destroy(g);
    /* the session is fine afterwards */
    cr_expect_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
    td_release(x);
    td_release(y);
    td_release(z);
    td_release(w);
    td_release(back);
    free(bits);
    free(got);
}

Test(placement, session_spanning_two_devices_moves_bit_exactly, .init = start_three,
     .fini = stop, .timeout = 60)
{
    td_context *ctx = connect_device("cpu:0,cpu:1", NULL);
    cr_expect_str_eq(td_device_name(ctx), "cpu:0");
    check_moves(ctx, "cpu:0", "cpu:1", "cpu:2");
    td_close(ctx);
    /* the other way round, on other devices */
    ctx = connect_device("cpu:2,cpu:0", NULL);
    check_moves(ctx, "cpu:2", "cpu:0", "cpu:1");
    td_close(ctx);
    /* every tensor's memory is back; what stays is the graph the server caches for the
     * tenant (a few hundred bytes, charged to it while kept) */
    td_server_info info;
    td_test_wait_usage(srv.addr, 0, 0, 3000, &info);
    cr_expect_eq(info.sessions, 0u);
    cr_expect_lt(info.bytes_in_use, 4096u, "memory left after the sessions closed: %llu bytes",
                 (unsigned long long)info.bytes_in_use);
    /* refusals at open: an unknown device (by the server), a repeat and a placement word
     * after the first (by the client, before it connects) */
    expect_refused("cpu:0,cpu:7", NULL, TD_EINVAL, "'cpu:7' is not a device of this server");
    expect_refused("cpu:1,cpu:1", NULL, TD_EINVAL, "named twice");
    expect_refused("cpu:1,auto", NULL, TD_EINVAL, "entry 2 ('auto') asks the server to place");
}

Test(placement, pinned_tenant_cannot_span_another_device, .init = start_pinned,
     .fini = stop_pinned, .timeout = 60)
{
    td_options o;
    memset(&o, 0, sizeof o);
    o.token = pinned;
    expect_refused("cpu:1,cpu:2", &o, TD_EUNAUTHENTICATED, "may not use device cpu:2");
}

/* The first entry's placement leaves out the devices named after it: "auto,cpu:1" used to
 * fail with "device cpu:1 is named twice" whenever auto chose cpu:1 (here the only idle
 * device), and a tenant pinned to cpu:2,cpu:1 could never open "auto,cpu:1". */
Test(placement, auto_first_avoids_the_further_devices, .init = start_pinned,
     .fini = stop_pinned, .timeout = 60)
{
    td_options o;
    memset(&o, 0, sizeof o);
    o.token = free_tenant;
    td_context *busy0 = connect_device("cpu:0", &o), *busy2 = connect_device("cpu:2", &o);
    for (int round = 0; round < 3; round++) {
        td_context *c = connect_device("auto,cpu:1", &o);
        cr_expect_str_neq(td_device_name(c), "cpu:1");
        cr_expect_str_eq(td_context_device_at(c, 1), "cpu:1");
        td_close(c);
    }
    td_close(busy0);
    td_close(busy2);
    o.token = pair;
    td_context *c = connect_device("auto,cpu:1", &o);
    cr_expect_str_eq(td_device_name(c), "cpu:2");
    td_close(c);
    c = connect_device("auto,cpu:2", &o);
    cr_expect_str_eq(td_device_name(c), "cpu:1");
    td_close(c);
    o.token = pinned; /* its one device is taken by the second entry: nothing is left */
    expect_refused("auto,cpu:1", &o, TD_EUNAUTHENTICATED,
                   "no device for 'auto' other than the session's further devices cpu:1");
}

/* unix: uris are never pools: a device list after a path names its bad entry the way the
 * user wrote it (it used to say "server list ... entry 2 is not HOST:PORT"). */
static void start_three_unix(void)
{
    const char *args[] = {"--cpu-devices", "3", "--devices", "cpu", NULL};
    start_server(true, args);
}

Test(placement, unix_device_list_is_not_a_pool, .init = start_three_unix, .fini = stop,
     .timeout = 60)
{
    char uri[700];
    snprintf(uri, sizeof uri, "%s/cpu:1,cpu:2", srv.addr);
    td_context *c = NULL;
    cr_assert_eq(td_connect(uri, NULL, &c), TD_OK, "%s: %s", uri, td_connect_error());
    cr_expect_str_eq(td_device_name(c), "cpu:1");
    cr_expect_str_eq(td_context_device_at(c, 1), "cpu:2");
    td_close(c);
    snprintf(uri, sizeof uri, "%s/cpu:0,bogus", srv.addr);
    c = NULL;
    td_status st = td_connect(uri, NULL, &c);
    cr_expect_eq(st, TD_EINVAL, "%s: %s: %s", uri, td_status_name(st), td_connect_error());
    cr_expect(strstr(td_connect_error(), "'bogus' is not a device of this server (entry 2 ") !=
                  NULL,
              "%s", td_connect_error());
    cr_expect(strstr(td_connect_error(), "server list") == NULL, "%s", td_connect_error());
    /* entries are numbered as the user wrote them: 'bogus' is entry 3, not devices[1] */
    snprintf(uri, sizeof uri, "%s/cpu:1,cpu:2,bogus", srv.addr);
    st = td_connect(uri, NULL, &c);
    cr_expect_eq(st, TD_EINVAL, "%s: %s: %s", uri, td_status_name(st), td_connect_error());
    cr_expect(strstr(td_connect_error(), "'bogus' is not a device of this server (entry 3 of "
                     "the device list, devices[1];") != NULL, "%s", td_connect_error());
}

Test(placement, local_session_spans_cpu_devices, .timeout = 60)
{
    setenv("TENSORD_CPU_DEVICES", "2", 1); /* read once per process, at the first connect */
    setenv("TENSORD_DEVICES", "cpu", 1);   /* no Vulkan module's lavapipe device */
    td_context *ctx;
    cr_assert_eq(td_connect("local:cpu:0,cpu:1", NULL, &ctx), TD_OK, "%s", td_connect_error());
    cr_expect_str_eq(td_context_server(ctx), "");
    check_moves(ctx, "cpu:0", "cpu:1", "cuda:0");
    td_close(ctx);
    cr_assert_eq(td_connect("local:auto", NULL, &ctx), TD_OK, "%s", td_connect_error());
    cr_expect_eq(strncmp(td_device_name(ctx), "cpu:", 4), 0, "%s", td_device_name(ctx));
    td_close(ctx);
    /* auto leaves out the devices named after it (both have the same free memory) */
    for (int k = 0; k < 2; k++) {
        char uri[32];
        snprintf(uri, sizeof uri, "local:auto,cpu:%d", k);
        cr_assert_eq(td_connect(uri, NULL, &ctx), TD_OK, "%s: %s", uri, td_connect_error());
        cr_expect_str_eq(td_device_name(ctx), k == 0 ? "cpu:1" : "cpu:0");
        td_close(ctx);
    }
}
