/* vulkan_alloc.c — the Vulkan backend's device-memory allocator (backends/vulkan/vk_device.c,
 * "large allocations"), driven through the module's own table: the test dlopens
 * tensord-backend-vulkan.so (TD_VULKAN_MODULE, set by meson) like engine/device.c does and
 * counts the module's vkAllocateMemory calls itself: this executable defines
 * vkAllocateMemory (exported: meson's export_dynamic), which the module's reference binds to
 * before the loader's, counts and forwards to the loader's. The module's own debug lines
 * ("vkAllocateMemory of N bytes") must agree.
 *
 * What must hold: a loop that allocates a large (dedicated) buffer, computes into it and
 * frees it calls vkAllocateMemory only on its first pass, whether the free comes after the
 * work has finished or while it is still recorded; sizes of one class share blocks; when the
 * device runs out of memory the cache of freed blocks is released and the allocation tried
 * again (TENSORD_TEST_VULKAN_MEMORY_CAP makes lavapipe run out at a chosen size); a request
 * above the heap is TD_ENOMEM at once. Without a Vulkan device every test is skipped.
 */
#include "backends/backend.h"
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

static atomic_int g_vkalloc; /* vkAllocateMemory calls (the interposer below) */
static atomic_int g_allocs;  /* "vkAllocateMemory of" lines */
static atomic_int g_reclaim; /* "releasing ... cached" lines */

VKAPI_ATTR VkResult VKAPI_CALL vkAllocateMemory(VkDevice dev, const VkMemoryAllocateInfo *ai,
                                                const VkAllocationCallbacks *cb,
                                                VkDeviceMemory *mem);
VKAPI_ATTR VkResult VKAPI_CALL vkAllocateMemory(VkDevice dev, const VkMemoryAllocateInfo *ai,
                                                const VkAllocationCallbacks *cb,
                                                VkDeviceMemory *mem)
{
    static PFN_vkAllocateMemory real;
    if (real == NULL) {
        void *lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_NOLOAD);
        void *sym = lib != NULL ? dlsym(lib, "vkAllocateMemory") : NULL;
        if (sym == NULL) return VK_ERROR_INITIALIZATION_FAILED;
        memcpy(&real, &sym, sizeof real);
    }
    atomic_fetch_add(&g_vkalloc, 1);
    return real(dev, ai, cb, mem);
}

static void count_log(int level, const char *msg)
{
    (void)level;
    if (strstr(msg, "vkAllocateMemory of") != NULL) atomic_fetch_add(&g_allocs, 1);
    if (strstr(msg, "cached bytes of freed large tensors") != NULL)
        atomic_fetch_add(&g_reclaim, 1);
}

typedef struct fixture {
    void *so;
    const td__backend *be;
    td__device dev;
} fixture;

/* Load the module and open vulkan:0; false (after cr_skip) where there is no device. */
static bool open_vulkan(fixture *f)
{
    memset(f, 0, sizeof *f);
    const char *path = getenv("TD_VULKAN_MODULE");
    cr_assert(path != NULL, "TD_VULKAN_MODULE is not set (meson sets it)");
    f->so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert(f->so != NULL, "dlopen %s: %s", path, dlerror());
    void *sym = dlsym(f->so, "td_backend_entry");
    cr_assert(sym != NULL);
    const td__backend *(*entry)(void);
    memcpy(&entry, &sym, sizeof entry); /* POSIX: a function's address from dlsym */
    f->be = entry();
    f->be->set_log(count_log);
    int n = 0;
    cr_assert_eq(f->be->device_count(&n), TD_OK);
    if (n == 0) return false;
    f->dev.backend = f->be;
    snprintf(f->dev.name, sizeof f->dev.name, "vulkan:0");
    char err[256] = "";
    cr_assert_eq(f->be->device_open(&f->dev, 0, err, sizeof err), TD_OK, "%s", err);
    cr_assert_gt(atomic_load(&g_vkalloc), 0, "the vkAllocateMemory interposer saw no call "
                 "while the device opened (is the executable's symbol exported?)");
    atomic_store(&g_vkalloc, 0);
    atomic_store(&g_allocs, 0);
    atomic_store(&g_reclaim, 0);
    return true;
}

static void close_vulkan(fixture *f)
{
    f->be->device_close(&f->dev);
    dlclose(f->so);
}

#define MIB ((size_t)1 << 20)

/* 48 MiB: above half of the 64 MiB sub-allocated blocks, so a dedicated allocation. */
Test(vulkan_alloc, free_then_alloc_same_size_reuses)
{
    fixture f;
    if (!open_vulkan(&f)) cr_skip_test("no Vulkan device");
    const size_t nb = 48 * MIB;
    for (int i = 0; i < 10; i++) {
        void *p = NULL;
        cr_assert_eq(f.be->buffer_alloc(&f.dev, NULL, nb, &p), TD_OK);
        const uint32_t w = 0x12345678u + (uint32_t)i;
        uint32_t back = 0;
        cr_assert_eq(f.be->buffer_write(&f.dev, NULL, p, nb - 4, &w, 4), TD_OK);
        cr_assert_eq(f.be->buffer_read(&f.dev, NULL, p, nb - 4, &back, 4), TD_OK);
        cr_assert_eq(back, w);
        f.be->buffer_free(&f.dev, NULL, p, nb);
        cr_assert_eq(atomic_load(&g_vkalloc), 1, "pass %d: %d vkAllocateMemory calls, want 1", i,
                     atomic_load(&g_vkalloc));
        cr_assert_eq(atomic_load(&g_allocs), 1);
    }
    close_vulkan(&f);
}

/* 33 MiB and 35 MiB round to one 36 MiB class (eighths of 32 MiB: 4 MiB steps). */
Test(vulkan_alloc, nearby_sizes_share_a_class)
{
    fixture f;
    if (!open_vulkan(&f)) cr_skip_test("no Vulkan device");
    void *p = NULL, *q = NULL;
    cr_assert_eq(f.be->buffer_alloc(&f.dev, NULL, 33 * MIB, &p), TD_OK);
    f.be->buffer_free(&f.dev, NULL, p, 33 * MIB);
    cr_assert_eq(f.be->buffer_alloc(&f.dev, NULL, 35 * MIB, &q), TD_OK);
    cr_assert_eq(atomic_load(&g_vkalloc), 1);
    cr_assert_eq(atomic_load(&g_allocs), 1);
    /* a live block is not handed out twice: a second one of the class is new memory */
    cr_assert_eq(f.be->buffer_alloc(&f.dev, NULL, 34 * MIB, &p), TD_OK);
    cr_assert_neq(p, q);
    cr_assert_eq(atomic_load(&g_vkalloc), 2);
    cr_assert_eq(atomic_load(&g_allocs), 2);
    f.be->buffer_free(&f.dev, NULL, p, 34 * MIB);
    f.be->buffer_free(&f.dev, NULL, q, 35 * MIB);
    close_vulkan(&f);
}

/* ADD of two f32 vectors of n elements into out (a validated op, as the engine sends it). */
static td_status run_add(fixture *f, void *x, void *y, void *out, int64_t n)
{
    td__op op = {.opcode = TD_OP_ADD, .n_inputs = 2};
    td__view in[2], o;
    for (int k = 0; k < 2; k++) {
        in[k].desc = (td__desc){.dtype = TD_F32, .rank = 1, .dims = {n}};
        in[k].data = k == 0 ? x : y;
    }
    o.desc = in[0].desc;
    o.data = out;
    char err[256] = "";
    td_status s = f->be->exec(&f->dev, NULL, &op, in, &o, err, sizeof err);
    cr_assert_eq(s, TD_OK, "%s", err);
    return s;
}

/* allocate the output, compute, free it: vkAllocateMemory on the first pass only, whether
 * the output is freed after a sync or while its op is still recorded (a zombie) */
Test(vulkan_alloc, op_loop_allocates_once)
{
    fixture f;
    if (!open_vulkan(&f)) cr_skip_test("no Vulkan device");
    const int64_t n = 10 << 20; /* 40 MiB a tensor */
    const size_t nb = (size_t)n * 4;
    float *h = malloc(nb);
    cr_assert(h != NULL);
    for (int64_t i = 0; i < n; i++) h[i] = (float)(i % 1000);
    void *x = NULL, *y = NULL;
    cr_assert_eq(f.be->buffer_alloc(&f.dev, NULL, nb, &x), TD_OK);
    cr_assert_eq(f.be->buffer_alloc(&f.dev, NULL, nb, &y), TD_OK);
    cr_assert_eq(f.be->buffer_write(&f.dev, NULL, x, 0, h, nb), TD_OK);
    cr_assert_eq(f.be->buffer_write(&f.dev, NULL, y, 0, h, nb), TD_OK);
    int after_first = -1;
    for (int i = 0; i < 6; i++) {
        void *out = NULL;
        cr_assert_eq(f.be->buffer_alloc(&f.dev, NULL, nb, &out), TD_OK);
        run_add(&f, x, y, out, n);
        if (i % 2 == 0) { /* synced, read, then freed */
            cr_assert_eq(f.be->stream_sync(&f.dev, NULL), TD_OK);
            float v[2];
            cr_assert_eq(f.be->buffer_read(&f.dev, NULL, out, nb - 8, v, 8), TD_OK);
            /* element i holds 2 * (i % 1000): n - 2 = 10485758, % 1000 = 758 */
            cr_assert_eq(v[0], 1516.0f);
            cr_assert_eq(v[1], 1518.0f);
        }
        f.be->buffer_free(&f.dev, NULL, out, nb); /* odd passes: still recorded */
        if (i == 0) after_first = atomic_load(&g_vkalloc);
    }
    cr_assert_eq(f.be->stream_sync(&f.dev, NULL), TD_OK);
    cr_assert_geq(after_first, 3, "x, y and the first output: 3 vkAllocateMemory calls");
    cr_assert_eq(atomic_load(&g_vkalloc), after_first,
                 "%d vkAllocateMemory calls after the first pass, want 0",
                 atomic_load(&g_vkalloc) - after_first);
    cr_assert_eq(atomic_load(&g_allocs), atomic_load(&g_vkalloc));
    f.be->buffer_free(&f.dev, NULL, x, nb);
    f.be->buffer_free(&f.dev, NULL, y, nb);
    free(h);
    close_vulkan(&f);
}

/* With device memory capped at 100 MiB, a cached 48 MiB block must be released to make room
 * for a 64 MiB one (48 + 64 > 100), and the allocation succeed on the retry. */
Test(vulkan_alloc, pressure_releases_cache)
{
    setenv("TENSORD_TEST_VULKAN_MEMORY_CAP", "104857600", 1);
    fixture f;
    const bool have = open_vulkan(&f);
    unsetenv("TENSORD_TEST_VULKAN_MEMORY_CAP");
    if (!have) cr_skip_test("no Vulkan device");
    void *p = NULL;
    cr_assert_eq(f.be->buffer_alloc(&f.dev, NULL, 48 * MIB, &p), TD_OK);
    f.be->buffer_free(&f.dev, NULL, p, 48 * MIB);
    cr_assert_eq(f.be->buffer_alloc(&f.dev, NULL, 64 * MIB, &p), TD_OK,
                 "the cached 48 MiB block was not released under pressure");
    cr_assert_eq(atomic_load(&g_reclaim), 1);
    cr_assert_eq(atomic_load(&g_allocs), 2);
    /* past the cap with nothing cached: TD_ENOMEM, and the device goes on */
    void *q = NULL;
    cr_assert_eq(f.be->buffer_alloc(&f.dev, NULL, 48 * MIB, &q), TD_ENOMEM);
    f.be->buffer_free(&f.dev, NULL, p, 64 * MIB);
    cr_assert_eq(f.be->buffer_alloc(&f.dev, NULL, 48 * MIB, &q), TD_OK);
    f.be->buffer_free(&f.dev, NULL, q, 48 * MIB);
    close_vulkan(&f);
}

/* a request above the heap (200 GiB): TD_ENOMEM at once, no allocation attempted */
Test(vulkan_alloc, above_heap_is_enomem)
{
    fixture f;
    if (!open_vulkan(&f)) cr_skip_test("no Vulkan device");
    void *p = NULL;
    cr_assert_eq(f.be->buffer_alloc(&f.dev, NULL, (size_t)200 << 30, &p), TD_ENOMEM);
    cr_assert_eq(atomic_load(&g_vkalloc), 0);
    close_vulkan(&f);
}
