/* device.c — the device registry (see device.h). Devices are opened once per process, on
 * first use, and live until exit: sessions and clients borrow them. */
#include "engine/device.h"
#include "common/log.h"
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define TD_MAX_DEVICES 16

static td__device g_devices[TD_MAX_DEVICES];
static int g_ndevices;
static td_status g_init_status = TD_OK;
static char g_init_err[256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static const td__backend *const g_backends[] = {
#ifdef TD_HAVE_CPU
    &td__cpu_backend,
#endif
    NULL,
};

static void init_once(void)
{
    for (size_t b = 0; g_backends[b] != NULL; b++) {
        const td__backend *be = g_backends[b];
        int n = 0;
        if (be->device_count(&n) != TD_OK || n <= 0) {
            td__log(TD_LOG_INFO, "backend %s: no devices", be->kind);
            continue;
        }
        for (int i = 0; i < n && g_ndevices < TD_MAX_DEVICES; i++) {
            td__device *d = &g_devices[g_ndevices];
            memset(d, 0, sizeof *d);
            d->backend = be;
            d->index = i;
            if (strcmp(be->kind, "cpu") == 0 && n == 1) {
                snprintf(d->name, sizeof d->name, "cpu");
            } else {
                snprintf(d->name, sizeof d->name, "%s:%d", be->kind, i);
            }
            char err[256] = "";
            if (be->device_open(d, i, err, sizeof err) != TD_OK) {
                td__log(TD_LOG_WARN, "device %s: cannot open: %s", d->name, err);
                continue;
            }
            g_ndevices++;
        }
    }
    if (g_ndevices == 0) {
        g_init_status = TD_EDEVICE;
        snprintf(g_init_err, sizeof g_init_err, "no usable device (was the CPU backend built?)");
    }
}

td_status td__devices_init(char *err, size_t errlen)
{
    pthread_once(&g_once, init_once);
    if (g_init_status != TD_OK && err != NULL) snprintf(err, errlen, "%s", g_init_err);
    return g_init_status;
}

int td__device_count(void) { return g_ndevices; }

td__device *td__device_at(int i) { return i >= 0 && i < g_ndevices ? &g_devices[i] : NULL; }

td__device *td__device_find(const char *name)
{
    if (g_ndevices == 0) return NULL;
    if (name == NULL || name[0] == '\0') return &g_devices[0];
    for (int i = 0; i < g_ndevices; i++) {
        td__device *d = &g_devices[i];
        char alias[40];
        snprintf(alias, sizeof alias, "%s:%d", d->backend->kind, d->index);
        if (strcmp(name, d->name) == 0 || strcmp(name, alias) == 0) return d;
    }
    return NULL;
}
