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
#include <unistd.h>

static char dir[256];
static char tokens[320];

static void start_three(void)
{
    const char *args[] = {"--cpu-devices", "3", NULL};
    start_with(args);
}

static td_context *open_on(const char *device, const td_options *o)
{
    char uri[700];
    td_test_server_uri(&srv, device, uri, sizeof uri);
    td_context *ctx = NULL;
    td_status st = td_connect(uri, o, &ctx);
    cr_assert_eq(st, TD_OK, "td_connect(%s): %s: %s", uri, td_status_name(st),
                 td_connect_error());
    return ctx;
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
    ctx = open_on("cpu", NULL);
    cr_expect_str_eq(td_device_name(ctx), "cpu:0");
    td_close(ctx);
    ctx = open_on("cpu:2", NULL);
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
        ctx[i] = open_on("auto", NULL);
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
    ctx[1] = open_on("auto", NULL);
    cr_expect_str_eq(td_device_name(ctx[1]), freed);
    /* a fourth goes to some device (all equally loaded) and a fifth avoids that one */
    td_context *d4 = open_on("auto", NULL);
    td_context *d5 = open_on("auto", NULL);
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
    td_context *a = open_on("auto", NULL);
    td_context *b = open_on("auto", NULL);
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

static char pinned[80], free_tenant[80];

static void start_pinned(void)
{
    snprintf(dir, sizeof dir, "/tmp/td-place-XXXXXX");
    cr_assert(mkdtemp(dir) != NULL);
    snprintf(tokens, sizeof tokens, "%s/tokens", dir);
    token_new("pinned", "--devices cpu:1", pinned, sizeof pinned);
    token_new("roaming", "", free_tenant, sizeof free_tenant);
    const char *args[] = {"--cpu-devices", "3", "--tokens-file", tokens, NULL};
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
    td_context *c = open_on("cpu:1", &o);
    cr_expect_str_eq(td_device_name(c), "cpu:1");
    td_close(c);
    /* auto and no device place it on its one device, however loaded */
    td_context *a = open_on("auto", &o);
    td_context *b = open_on("auto", &o);
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
    c = open_on("cpu:0", &o);
    cr_expect_str_eq(td_device_name(c), "cpu:0");
    td_close(c);
}
