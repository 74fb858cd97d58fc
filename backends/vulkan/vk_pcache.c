/* vk_pcache.c — the Vulkan backend's on-disk pipeline cache.
 *
 * Why: creating a pipeline compiles its SPIR-V for the device (lavapipe JIT-compiles it with
 * LLVM), and a training run or a conformance pass creates hundreds, one per (shader
 * variant, opcode): seconds to tens of seconds at every start. A VkPipelineCache saved when
 * the device closes and loaded at the next open hands the driver its earlier compilations.
 *
 * Where: $TENSORD_VULKAN_CACHE (a directory; "off" disables the cache), else
 * $XDG_CACHE_HOME/tensord, else $HOME/.cache/tensord; one file per physical device,
 * vulkan-VENDOR-DEVICE-UUID.bin (the driver's pipelineCacheUUID changes with its build).
 * Loading checks the header the Vulkan spec defines (VkPipelineCacheHeaderVersionOne:
 * header size, version, vendor and device IDs, cache UUID) against this device before the
 * driver sees the data; a file that is short, foreign, stale or that the driver refuses is
 * ignored with an info line and replaced. The engine keeps devices open for the life of
 * the process, so the cache is saved after a submission completes when pipelines were
 * created since the last save (at most every VK_PCACHE_EVERY_S seconds), and at device
 * close. Files are read with a size ceiling
 * (VK_PCACHE_MAX) and written whole to a temporary name, then renamed, so concurrent
 * processes never see half a file (the last writer wins). Failures never fail the device:
 * the cache is an optimisation.
 *
 * Thread-safety: called with the device's mutex held (open and close hold it alone).
 */
#include "backends/vulkan/vk_internal.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define VK_PCACHE_MAX ((size_t)256 << 20)
#define VK_PCACHE_EVERY_S 2.0 /* at most one save per this many seconds while running */

/* The cache file of vd's physical device into path; false when the cache is off. */
static bool cache_path(const vk_device *vd, char *path, size_t len, bool make_dirs)
{
    const char *env = getenv("TENSORD_VULKAN_CACHE");
    char dir[512];
    if (env != NULL && strcmp(env, "off") == 0) return false;
    if (env != NULL && env[0] != '\0') {
        snprintf(dir, sizeof dir, "%s", env);
    } else {
        const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        char base[400];
        if (xdg != NULL && xdg[0] == '/') snprintf(base, sizeof base, "%s", xdg);
        else if (home != NULL && home[0] == '/') snprintf(base, sizeof base, "%s/.cache", home);
        else return false;
        if (make_dirs) (void)mkdir(base, 0700);
        snprintf(dir, sizeof dir, "%s/tensord", base);
    }
    if (make_dirs) (void)mkdir(dir, 0700);
    VkPhysicalDeviceProperties pr;
    vkGetPhysicalDeviceProperties(vd->phys, &pr);
    char uuid[2 * VK_UUID_SIZE + 1];
    for (unsigned i = 0; i < VK_UUID_SIZE; i++)
        snprintf(uuid + 2 * i, 3, "%02x", pr.pipelineCacheUUID[i]);
    int n = snprintf(path, len, "%s/vulkan-%04x-%04x-%s.bin", dir, pr.vendorID, pr.deviceID, uuid);
    return n > 0 && (size_t)n < len;
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Why `data` (n bytes) is not a cache of this device, or NULL when its header matches. */
static const char *header_mismatch(const vk_device *vd, const unsigned char *data, size_t n)
{
    VkPhysicalDeviceProperties pr;
    vkGetPhysicalDeviceProperties(vd->phys, &pr);
    const size_t hdr = 16 + VK_UUID_SIZE;
    if (n < hdr) return "shorter than its header";
    if (le32(data) < hdr || le32(data) > n) return "bad header size";
    if (le32(data + 4) != VK_PIPELINE_CACHE_HEADER_VERSION_ONE) return "unknown header version";
    if (le32(data + 8) != pr.vendorID || le32(data + 12) != pr.deviceID)
        return "another device's";
    if (memcmp(data + 16, pr.pipelineCacheUUID, VK_UUID_SIZE) != 0)
        return "another driver build's";
    return NULL;
}

/* The whole file at path (at most VK_PCACHE_MAX bytes) in a new buffer, or NULL. */
static unsigned char *read_file(const char *path, size_t *n, const char **why)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        *why = errno == ENOENT ? NULL : strerror(errno);
        return NULL;
    }
    unsigned char *buf = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || (size_t)size > VK_PCACHE_MAX || fseek(f, 0, SEEK_SET) != 0) {
        *why = size < 0 ? "cannot size it" : "larger than 256 MiB";
    } else if ((buf = td__vk_calloc((size_t)size + 1, 1)) == NULL) {
        *why = "out of host memory";
    } else if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
        *why = "read error";
        td__vk_free(buf);
        buf = NULL;
    } else {
        *n = (size_t)size;
    }
    fclose(f);
    return buf;
}

void td__vk_pcache_open(vk_device *vd)
{
    char path[640];
    vd->pcache = VK_NULL_HANDLE;
    vd->pcache_dirty = false;
    vd->pcache_saved_s = -VK_PCACHE_EVERY_S;
    if (!cache_path(vd, path, sizeof path, false)) return;
    size_t n = 0;
    const char *why = NULL;
    unsigned char *data = read_file(path, &n, &why);
    if (data != NULL) why = header_mismatch(vd, data, n);
    VkPipelineCacheCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    if (data != NULL && why == NULL) {
        ci.initialDataSize = n;
        ci.pInitialData = data;
        if (vkCreatePipelineCache(vd->dev, &ci, NULL, &vd->pcache) != VK_SUCCESS) {
            why = "refused by the driver";
            vd->pcache = VK_NULL_HANDLE;
        }
    }
    if (why != NULL)
        td__vk_log(1, "vulkan:%d: pipeline cache %s ignored (%s)", vd->index, path, why);
    else if (data != NULL)
        td__vk_log(0, "vulkan:%d: pipeline cache %s loaded (%zu bytes)", vd->index, path, n);
    td__vk_free(data);
    if (vd->pcache == VK_NULL_HANDLE) {
        ci.initialDataSize = 0;
        ci.pInitialData = NULL;
        if (vkCreatePipelineCache(vd->dev, &ci, NULL, &vd->pcache) != VK_SUCCESS)
            vd->pcache = VK_NULL_HANDLE; /* pipelines are then created without one */
        vd->pcache_dirty = why != NULL;  /* replace a bad file even if nothing new is made */
    }
}

void td__vk_pcache_save(vk_device *vd)
{
    if (vd->pcache == VK_NULL_HANDLE || !vd->pcache_dirty) return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    vd->pcache_saved_s = (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
    vd->pcache_dirty = false;
    char path[640], tmp[700];
    size_t n = 0;
    unsigned char *data = NULL;
    if (cache_path(vd, path, sizeof path, true) &&
        vkGetPipelineCacheData(vd->dev, vd->pcache, &n, NULL) == VK_SUCCESS && n > 0 &&
        n <= VK_PCACHE_MAX && (data = td__vk_calloc(n, 1)) != NULL &&
        vkGetPipelineCacheData(vd->dev, vd->pcache, &n, data) == VK_SUCCESS) {
        snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
        FILE *f = fopen(tmp, "wb");
        bool ok = f != NULL && fwrite(data, 1, n, f) == n;
        if (f != NULL && fclose(f) != 0) ok = false;
        if (ok && rename(tmp, path) == 0) {
            td__vk_log(0, "vulkan:%d: pipeline cache %s saved (%zu bytes)", vd->index, path, n);
        } else {
            td__vk_log(2, "vulkan:%d: cannot write the pipeline cache %s: %s", vd->index, path,
                       strerror(errno));
            (void)remove(tmp);
        }
    }
    td__vk_free(data);
}

void td__vk_pcache_flushed(vk_device *vd)
{
    if (vd->pcache == VK_NULL_HANDLE || !vd->pcache_dirty) return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((double)now.tv_sec + 1e-9 * (double)now.tv_nsec - vd->pcache_saved_s >= VK_PCACHE_EVERY_S)
        td__vk_pcache_save(vd);
}

void td__vk_pcache_close(vk_device *vd)
{
    if (vd->pcache == VK_NULL_HANDLE) return;
    td__vk_pcache_save(vd);
    vkDestroyPipelineCache(vd->dev, vd->pcache, NULL);
    vd->pcache = VK_NULL_HANDLE;
}
