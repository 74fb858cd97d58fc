/* device.c — the device registry (see device.h). Devices are opened once per process, on
 * first use, and live until exit: sessions and clients borrow them.
 *
 * Backends come from two places: the ones compiled in (the CPU backend), then loadable
 * modules (GPU backends) found with dlopen, so one tensord or libtensord binary runs on hosts
 * with or without a GPU driver and lists what it finds. Why modules rather than linking the
 * GPU runtimes in: a binary linked against libcudart/libcublas would not even start where
 * they are missing, and loading cuBLAS costs a second that CPU-only programs should not pay.
 * A module that cannot be loaded (its runtime libraries are absent) is an info line, not an
 * error. Module handles stay open for the life of the process (devices are never closed).
 */
#include "engine/device.h"
#include "common/alloc.h"
#include "common/log.h"
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TD_MAX_DEVICES 16
#define TD_MAX_BACKENDS 8
/* Build-tree search: how many directories above the executable (or libtensord) to look
 * for a meson build root. build/tests/unit/backends/x is three levels below build/. */
#define TD_BUILD_ROOT_DEPTH 5

#ifndef TD_BACKEND_DIR
#define TD_BACKEND_DIR ""
#endif

static td__device g_devices[TD_MAX_DEVICES];
static int g_ndevices;
static td_status g_init_status = TD_OK;
static char g_init_err[512];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static const td__backend *g_backends[TD_MAX_BACKENDS];
static int g_nbackends;

static void add_compiled_in(void)
{
#ifdef TD_HAVE_CPU
    g_backends[g_nbackends++] = &td__cpu_backend;
#endif
}

static bool kind_known(const char *kind)
{
    for (int i = 0; i < g_nbackends; i++)
        if (strcmp(g_backends[i]->kind, kind) == 0) return true;
    return false;
}

td_status td__backend_module_open(const char *path, const td__backend **out, void **handle,
                                  char *err, size_t errlen)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *why = dlerror();
        snprintf(err, errlen, "backend module %s not loaded: %s", path, why ? why : "?");
        return TD_ENOTFOUND;
    }
    /* The version first: nothing else of a module built for another ABI may run. */
    void *abi_sym = dlsym(h, "td_backend_abi");
    uint32_t abi = 1; /* modules from before the version was exported */
    if (abi_sym != NULL) {
        uint32_t (*abi_fn)(void);
        memcpy(&abi_fn, &abi_sym, sizeof abi_fn); /* ISO C's way from void * to a function */
        abi = abi_fn();
    }
    if (abi != TD_BACKEND_ABI_VERSION) {
        snprintf(err, errlen,
                 "backend module %s refused: built for backend ABI %u%s, this engine has ABI %u "
                 "(rebuild the module from the same tree as the program)",
                 path, abi, abi_sym == NULL ? " (it exports no td_backend_abi)" : "",
                 TD_BACKEND_ABI_VERSION);
        dlclose(h);
        return TD_EUNSUPPORTED;
    }
    void *sym = dlsym(h, "td_backend_entry");
    if (sym == NULL) {
        snprintf(err, errlen, "backend module %s not loaded: no td_backend_entry symbol", path);
        dlclose(h);
        return TD_ENOTFOUND;
    }
    const td__backend *(*entry)(void);
    memcpy(&entry, &sym, sizeof entry);
    const td__backend *be = entry();
    if (be == NULL || be->kind == NULL || be->device_count == NULL || be->device_open == NULL ||
        be->buffer_alloc == NULL || be->buffer_free == NULL || be->buffer_write == NULL ||
        be->buffer_read == NULL || be->exec == NULL) {
        snprintf(err, errlen, "backend module %s not loaded: incomplete backend table", path);
        dlclose(h);
        return TD_EINVAL;
    }
    *out = be;
    *handle = h;
    return TD_OK;
}

/* A loadable module's log lines (backend.h, set_log): through td__log, level clamped. */
static void module_log(int level, const char *msg)
{
    td__log(level <= 0 ? TD_LOG_DEBUG : level == 1 ? TD_LOG_INFO : level == 2 ? TD_LOG_WARN
                                                                              : TD_LOG_ERROR,
            "%s", msg);
}

/* dlopen one module file and register its backend (first module of a kind wins). */
static void load_module(const char *path)
{
    if (g_nbackends >= TD_MAX_BACKENDS) return;
    const td__backend *be;
    void *h;
    char err[PATH_MAX + 256];
    td_status st = td__backend_module_open(path, &be, &h, err, sizeof err);
    if (st != TD_OK) {
        /* a missing runtime library is normal on hosts without that GPU; the rest is not */
        td__log(st == TD_ENOTFOUND ? TD_LOG_INFO : TD_LOG_WARN, "%s", err);
        return;
    }
    if (kind_known(be->kind)) {
        td__log(TD_LOG_DEBUG, "backend module %s skipped: backend %s already loaded", path,
                be->kind);
        dlclose(h);
        return;
    }
    /* the module's host memory goes through this process's allocation hooks */
    static const td__alloc_hooks engine_alloc = {td__malloc, td__calloc, td__realloc, td__free};
    if (be->set_host_alloc != NULL) be->set_host_alloc(&engine_alloc);
    if (be->set_log != NULL) be->set_log(module_log);
    g_backends[g_nbackends++] = be;
    td__log(TD_LOG_DEBUG, "backend %s: loaded from %s (ABI %u)", be->kind, path,
            TD_BACKEND_ABI_VERSION);
}

static int is_module_name(const struct dirent *e)
{
    const char *n = e->d_name;
    size_t len = strlen(n);
    return strncmp(n, "tensord-backend-", 16) == 0 && len > 19 && strcmp(n + len - 3, ".so") == 0;
}

/* Load every tensord-backend-*.so in dir, in name order. */
static void scan_dir(const char *dir)
{
    struct dirent **list = NULL;
    int n = scandir(dir, &list, is_module_name, alphasort);
    td__log(TD_LOG_DEBUG, "backend modules: %d in %s", n < 0 ? 0 : n, dir);
    if (n < 0) return;
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, list[i]->d_name) < (int)sizeof path)
            load_module(path);
        free(list[i]);
    }
    free(list);
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* If `file` lies inside a tensord build tree (an ancestor holding meson-private/ and
 * engine/libtd_engine.a), scan that tree's backends/<kind>/ folders and return true. */
static bool scan_build_tree(const char *file)
{
    char dir[PATH_MAX];
    if (realpath(file, dir) == NULL) return false;
    for (int up = 0; up <= TD_BUILD_ROOT_DEPTH; up++) {
        char *slash = strrchr(dir, '/');
        if (slash == NULL || slash == dir) return false;
        *slash = '\0';
        char probe[PATH_MAX + 32];
        snprintf(probe, sizeof probe, "%s/meson-private", dir);
        if (!is_dir(probe)) continue;
        snprintf(probe, sizeof probe, "%s/engine/libtd_engine.a", dir);
        if (access(probe, F_OK) != 0) continue;
        snprintf(probe, sizeof probe, "%s/backends", dir);
        struct dirent **kinds = NULL;
        int n = scandir(probe, &kinds, NULL, alphasort);
        for (int i = 0; i < n; i++) {
            if (kinds[i]->d_name[0] != '.') {
                char sub[PATH_MAX + 300];
                snprintf(sub, sizeof sub, "%s/%s", probe, kinds[i]->d_name);
                if (is_dir(sub)) scan_dir(sub);
            }
            free(kinds[i]);
        }
        free(kinds);
        return true;
    }
    return false;
}

/* Where modules are looked for (see device.h). */
static void load_modules(void)
{
    const char *env = getenv("TENSORD_BACKEND_DIR");
    if (env != NULL) {
        char dirs[4096];
        snprintf(dirs, sizeof dirs, "%s", env);
        char *save = NULL;
        for (char *d = strtok_r(dirs, ":", &save); d != NULL; d = strtok_r(NULL, ":", &save))
            scan_dir(d);
        return;
    }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    bool in_tree = false;
    if (len > 0) {
        exe[len] = '\0';
        in_tree = scan_build_tree(exe);
    }
    /* the object holding this code: libtensord.so for client programs, else the executable */
    Dl_info info;
    if (!in_tree && dladdr(&g_ndevices, &info) != 0 && info.dli_fname != NULL &&
        info.dli_fname[0] == '/')
        in_tree = scan_build_tree(info.dli_fname);
    /* a build tree never mixes in installed modules, which may be of another version */
    if (!in_tree && TD_BACKEND_DIR[0] != '\0') scan_dir(TD_BACKEND_DIR);
}

/* TENSORD_DEVICES, split at commas (see td__devices_init): entries and whether each
 * matched a device. */
#define TD_MAX_FILTER 32
static char g_filter_buf[512];
static const char *g_filter[TD_MAX_FILTER];
static bool g_filter_hit[TD_MAX_FILTER];
static int g_nfilter;
static char g_hidden[256]; /* names of the devices the filter hid, for its error message */

static td_status filter_parse(void)
{
    const char *env = getenv("TENSORD_DEVICES");
    if (env == NULL || env[0] == '\0') return TD_OK;
    if (strlen(env) >= sizeof g_filter_buf) {
        snprintf(g_init_err, sizeof g_init_err, "device list '%.64s...' is longer than %zu "
                 "characters", env, sizeof g_filter_buf - 1);
        return TD_EINVAL;
    }
    snprintf(g_filter_buf, sizeof g_filter_buf, "%s", env);
    char *save = NULL;
    for (char *e = strtok_r(g_filter_buf, ", ", &save); e != NULL;
         e = strtok_r(NULL, ", ", &save)) {
        if (g_nfilter == TD_MAX_FILTER) {
            snprintf(g_init_err, sizeof g_init_err, "device list '%.200s' has more than %d "
                     "entries", env, TD_MAX_FILTER);
            return TD_EINVAL;
        }
        g_filter[g_nfilter++] = e;
    }
    if (g_nfilter == 0) {
        snprintf(g_init_err, sizeof g_init_err, "device list '%.200s' names no device", env);
        return TD_EINVAL;
    }
    return TD_OK;
}

/* Whether the filter keeps device `d` (no filter: every device); marks the entries hit. */
static bool filter_keeps(const td__device *d)
{
    if (g_nfilter == 0) return true;
    bool keep = false;
    for (int f = 0; f < g_nfilter; f++)
        if (td__device_list_match(d, g_filter[f])) keep = g_filter_hit[f] = true;
    if (!keep) {
        size_t len = strlen(g_hidden);
        snprintf(g_hidden + len, sizeof g_hidden - len, "%s%s", len ? ", " : "", d->name);
    }
    return keep;
}

static void open_backend(const td__backend *be)
{
    int n = 0;
    if (be->device_count(&n) != TD_OK || n <= 0) {
        char why[200] = "";
        if (be->no_device_reason != NULL) be->no_device_reason(why, sizeof why);
        if (why[0] != '\0') td__log(TD_LOG_INFO, "backend %s: no devices (%s)", be->kind, why);
        else td__log(TD_LOG_INFO, "backend %s: no devices", be->kind);
        return;
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
        if (!filter_keeps(d)) {
            td__log(TD_LOG_DEBUG, "device %s: hidden (not in TENSORD_DEVICES / --devices)",
                    d->name);
            continue;
        }
        char err[256] = "";
        if (be->device_open(d, i, err, sizeof err) != TD_OK) {
            td__log(TD_LOG_WARN, "device %s: cannot open: %s", d->name, err);
            continue;
        }
        g_ndevices++;
    }
}

static void init_once(void)
{
    if ((g_init_status = filter_parse()) != TD_OK) return;
    add_compiled_in();
    load_modules();
    for (int b = 0; b < g_nbackends; b++) open_backend(g_backends[b]);
    for (int f = 0; f < g_nfilter; f++) {
        if (g_filter_hit[f]) continue;
        char have[320] = "";
        size_t len = 0;
        for (int i = 0; i < g_ndevices && len < sizeof have; i++)
            len += (size_t)snprintf(have + len, sizeof have - len, "%s%s", len ? ", " : "",
                                    g_devices[i].name);
        if (g_hidden[0] != '\0' && len < sizeof have)
            snprintf(have + len, sizeof have - len, "%s%s", len ? ", " : "", g_hidden);
        snprintf(g_init_err, sizeof g_init_err,
                 "device list entry '%.40s' names no device of this host (it has: %.180s)",
                 g_filter[f], have[0] ? have : "none");
        g_init_status = TD_EINVAL;
        return;
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

bool td__backend_loaded(const char *kind) { return kind != NULL && kind_known(kind); }

int td__device_count(void) { return g_ndevices; }

td__device *td__device_at(int i) { return i >= 0 && i < g_ndevices ? &g_devices[i] : NULL; }

/* Whether `name` names `d`: its name, "<kind>:<index>", or "cpu" for cpu:0. */
static bool names_device(const td__device *d, const char *name)
{
    char alias[40];
    snprintf(alias, sizeof alias, "%s:%d", d->backend->kind, d->index);
    if (strcmp(name, d->name) == 0 || strcmp(name, alias) == 0) return true;
    return d->index == 0 && strcmp(d->backend->kind, "cpu") == 0 && strcmp(name, "cpu") == 0;
}

bool td__device_is_accelerator(const td__device *d)
{
    if (d == NULL || strcmp(d->backend->kind, "cpu") == 0) return false;
    /* Mesa's software Vulkan (lavapipe) names its device "llvmpipe (...)" */
    return !(strcmp(d->backend->kind, "vulkan") == 0 && strstr(d->description, "llvmpipe"));
}

td__device *td__device_default(void)
{
    for (int i = 0; i < g_ndevices; i++)
        if (td__device_is_accelerator(&g_devices[i])) return &g_devices[i];
    return g_ndevices > 0 ? &g_devices[0] : NULL;
}

td__device *td__device_find(const char *name)
{
    if (g_ndevices == 0) return NULL;
    if (name == NULL || name[0] == '\0') return td__device_default();
    for (int i = 0; i < g_ndevices; i++)
        if (names_device(&g_devices[i], name)) return &g_devices[i];
    return NULL;
}

bool td__device_list_match(const td__device *d, const char *entry)
{
    if (d == NULL || entry == NULL) return false;
    if (strcmp(entry, d->backend->kind) == 0) return true;
    return strcmp(entry, "cpu") != 0 && names_device(d, entry);
}

bool td__device_is_placement(const char *name)
{
    if (name == NULL) return false;
    return strcmp(name, "auto") == 0 || strcmp(name, "cuda") == 0 || strcmp(name, "hip") == 0 ||
           strcmp(name, "vulkan") == 0;
}

bool td__device_place_candidate(const td__device *d, const char *request)
{
    if (d == NULL || request == NULL) return false;
    if (strcmp(request, "auto") == 0) {
        if (td__device_is_accelerator(d)) return true;
        for (int i = 0; i < g_ndevices; i++)
            if (td__device_is_accelerator(&g_devices[i])) return false;
        return strcmp(d->backend->kind, "cpu") == 0; /* not a software Vulkan device */
    }
    return strcmp(request, d->backend->kind) == 0;
}
