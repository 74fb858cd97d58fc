/* vk_device.c — the Vulkan backend's module table and everything under the ops: the
 * instance, one device per physical device with a compute queue, the device-memory
 * sub-allocator, transfers, recording and submission, and the pipeline table. The module is
 * tensord-backend-vulkan.so (devices "vulkan:0", ...); engine/device.c loads it. Without a
 * Vulkan loader the module does not load (one info line from the engine); with a loader
 * but no ICD, or no usable device, it lists none ("backend vulkan: no devices").
 *
 * Devices: every physical device with a compute queue, Vulkan 1.2, VK_KHR_push_descriptor,
 * 64-bit floats and integers, 8- and 16-bit storage and integer types (the shaders use them
 * for u8/bool elements, i64 indices and double accumulators); others are skipped. GPUs come
 * before CPU implementations (lavapipe also enumerates on a GPU host), in the order the
 * loader gives within each type. A device that lists VK_NV_cooperative_matrix with a shape
 * matmul_coop.comp is built for (coop_pick) gets that extension, shaderFloat16 and
 * vulkanMemoryModel enabled too, and runs f16 MATMUL and the f16 convolutions' GEMMs on it
 * (TENSORD_VULKAN_NO_COOP=1: not);
 * one info line per device says whether it does and, if not, why.
 *
 * Memory: tensors are sub-allocated from blocks of VK_BLOCK_BYTES (or maxMemoryAllocationSize
 * when smaller), first fit with coalescing free lists, VK_ALIGN-aligned, so steady-state
 * training steps allocate no VkDeviceMemory; a buffer above half a block gets a dedicated
 * allocation, one above maxMemoryAllocationSize (or the heap) is TD_ENOMEM at once (the
 * engine names the op and the size; the session goes on). Large allocations: a dedicated
 * block is sized by class (dedicated_class: the request rounded up to an eighth of its
 * power of two, at least 2 MiB) and, when freed, kept in a cache of at most a quarter of
 * the heap (oldest dropped first) from which a later request of the same class takes it
 * back, so a loop that allocates, computes into and frees a large output of one size calls
 * vkAllocateMemory once, not once per op (the H100 spent ~43 of the 47 ms of an add on
 * 2^28 f32 allocating, zeroing and freeing its 1 GiB output). A request that misses the
 * cache while a freed block of its class waits for recorded work (a zombie, below) finishes
 * that work first and takes the block. When vkAllocateMemory reports out of device memory
 * the cache is released and the allocation tried once more before TD_ENOMEM. Reused
 * memory is not cleared: no tensor promises zeroed memory from buffer_alloc (EMPTY arrives
 * as FULL 0, backend.h), as with sub-allocated ranges. The number of tensor
 * vkAllocateMemory calls is logged at debug level per call and in the profile's table.
 * Ops on a tensor larger than maxStorageBufferRange are refused by supports_op (one binding
 * must cover a tensor), so the engine answers TD_EUNSUPPORTED for them rather than a shader
 * reading out of range.
 * Where host memory is the device's memory (lavapipe, integrated GPUs) tensors live in a
 * host-visible coherent type and reads and writes are memcpy through the mapping; on a
 * discrete GPU (or with TENSORD_VULKAN_STAGING=1, which tests use to cover this path on
 * lavapipe) they live in device-local memory that is preferably not host-visible and move
 * through two host-visible staging slots (cached where the device has such a type) of
 * VK_STAGE_BYTES, double-buffered, with vkCmdCopyBuffer (pick_memory says why; the H200
 * ran elementwise ops at 1-2% of CUDA's bandwidth with tensors in the mapped BAR type).
 * TENSORD_VULKAN_MAPPED=1 keeps the mapped choice on a discrete GPU, for A/B runs.
 *
 * Submission: one command buffer per device records every dispatch of every session, with a
 * compute-to-compute memory barrier after each; it is submitted once, with a fence, when a
 * session synchronises (stream_sync: the engine calls it before results are read and at
 * fences), when a transfer needs the recorded work done, or when the parameter ring (one
 * 256-byte block per dispatch, VK_PARAM_RING bytes) is full. So a batch of ops is one queue
 * submission. Sharing one command buffer between sessions orders all work on a device like
 * CUDA's legacy stream, which is what lets buffer_read/write/free ignore their `stream`
 * argument and still be correct: they flush first when anything is recorded. A buffer freed while recorded work
 * may still use it is parked (zombie list) and returned to its block after the next
 * submission completes. Descriptors are pushed (vkCmdPushDescriptorSetKHR): no pools to
 * allocate or reset. Pipelines are created once per (shader variant, opcode) — the opcode is
 * a specialization constant — and kept in a table for the life of the device, through a
 * pipeline cache saved on disk between runs (vk_pcache.c). Completion is a fence per
 * submission, waited for at once: one recording command buffer is in flight at a time, so a
 * timeline semaphore would add nothing until submissions overlap (several command buffers
 * in flight per device), which this design does not do yet.
 *
 * Errors: every Vulkan failure becomes a status: VK_ERROR_OUT_OF_*_MEMORY TD_ENOMEM, anything
 * else TD_EDEVICE; VK_ERROR_DEVICE_LOST marks the device lost and every later call fails
 * with TD_EDEVICE (sessions see errors, the process goes on). Nothing aborts.
 *
 * Thread-safety: one mutex per device around every entry (vk_internal.h).
 */
#include "backends/vulkan/vk_internal.h"
#include "common/errbuf.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define VK_BLOCK_BYTES ((uint64_t)64 << 20)
#define VK_STAGE_BYTES ((uint64_t)32 << 20) /* one staging slot (two per device) */
#define VK_MAX_PHYS 16

/* ---- host memory: the engine's allocation hooks, handed over at load (backend.h) ---- */

static td__alloc_hooks g_host = {malloc, calloc, realloc, free};

static void vk_set_host_alloc(const td__alloc_hooks *hooks)
{
    if (hooks != NULL && hooks->malloc_fn != NULL && hooks->calloc_fn != NULL &&
        hooks->realloc_fn != NULL && hooks->free_fn != NULL)
        g_host = *hooks;
}

void *td__vk_calloc(size_t count, size_t size) { return g_host.calloc_fn(count, size); }
void td__vk_free(void *p)
{
    if (p != NULL) g_host.free_fn(p);
}
static void *vk_realloc(void *p, size_t n) { return g_host.realloc_fn(p, n); }

/* ---- log lines: through the engine's logger, handed over at load (backend.h) ---- */

static void (*g_log)(int level, const char *msg);

static void vk_set_log(void (*log)(int level, const char *msg)) { g_log = log; }

void td__vk_log(int level, const char *fmt, ...)
{
    if (g_log == NULL) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    g_log(level, line);
}

td_status td__vk_fail(char *err, size_t errlen, td_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    td__verrf(err, errlen, fmt, ap);
    va_end(ap);
    return s;
}

static td_status status_of(vk_device *vd, VkResult r)
{
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY) return TD_ENOMEM;
    if (r == VK_ERROR_DEVICE_LOST && vd != NULL) vd->lost = true;
    return TD_EDEVICE;
}

/* ---- the instance and the physical devices ---- */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static VkInstance g_instance;
static VkPhysicalDevice g_phys[VK_MAX_PHYS];
static int g_nphys;

static bool has_extension(VkPhysicalDevice p, const char *name)
{
    uint32_t n = 0;
    if (vkEnumerateDeviceExtensionProperties(p, NULL, &n, NULL) != VK_SUCCESS || n == 0)
        return false;
    VkExtensionProperties *e = td__vk_calloc(n, sizeof *e);
    bool found = false;
    if (e != NULL && vkEnumerateDeviceExtensionProperties(p, NULL, &n, e) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++) found = strcmp(e[i].extensionName, name) == 0;
    td__vk_free(e);
    return found;
}

static int compute_family(VkPhysicalDevice p)
{
    uint32_t n = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(p, &n, NULL);
    VkQueueFamilyProperties q[32];
    if (n > 32) n = 32;
    vkGetPhysicalDeviceQueueFamilyProperties(p, &n, q);
    for (uint32_t i = 0; i < n; i++)
        if (q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) return (int)i;
    return -1;
}

/* What the shaders need (see the header comment). */
static bool usable(VkPhysicalDevice p)
{
    VkPhysicalDeviceProperties pr;
    vkGetPhysicalDeviceProperties(p, &pr);
    if (pr.apiVersion < VK_API_VERSION_1_2 || compute_family(p) < 0) return false;
    if (pr.limits.minStorageBufferOffsetAlignment > VK_ALIGN) return false;
    if (pr.limits.maxPerStageDescriptorStorageBuffers < VK_MAX_BINDINGS) return false;
    if (!has_extension(p, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME)) return false;
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
                                            .pNext = &f12};
    VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11};
    vkGetPhysicalDeviceFeatures2(p, &f);
    return f.features.shaderFloat64 && f.features.shaderInt64 && f.features.shaderInt16 &&
           f11.storageBuffer16BitAccess && f12.storageBuffer8BitAccess && f12.shaderInt8;
}

/* ---- cooperative matrices: f16 MATMUL on tensor cores (shaders/matmul_coop.comp) ---- */

/* matmul_coop.comp's variants, preferred first, with the shape each needs listed by
 * vkGetPhysicalDeviceCooperativeMatrixPropertiesNV (A and B f16, C and D f32, subgroup
 * scope); NVIDIA's tensor cores run 16 x 8 x 16 natively and drivers list 16 x 16 x 16 too. */
static const struct {
    uint32_t m, n, k;
    const char *shape, *shader, *shader_f32, *emu;
} k_coop_shapes[] = {
    {16, 16, 16, "16x16x16", "mx_f16_16x16x16", "mx_f16_f32_16x16x16", "emu16x16x16"},
    {16, 8, 16, "16x8x16", "mx_f16_16x8x16", "mx_f16_f32_16x8x16", "emu16x8x16"},
    {16, 8, 8, "16x8x8", "mx_f16_16x8x8", "mx_f16_f32_16x8x8", "emu16x8x8"}};

/* TENSORD_TEST_VULKAN_COOP_EMU=16x16x16 (or another shape of k_coop_shapes): the EMU variant
 * of that shape (matmul_coop.comp's element-by-element stand-in, any device) as the
 * cooperative matrix path, for tests of the shader's indexing on lavapipe; NULL: unset. */
static const char *coop_emu(void)
{
    const char *e = getenv("TENSORD_TEST_VULKAN_COOP_EMU");
    for (size_t s = 0; e != NULL && s < sizeof k_coop_shapes / sizeof k_coop_shapes[0]; s++)
        if (strcmp(e, k_coop_shapes[s].shape) == 0) return k_coop_shapes[s].emu;
    return NULL;
}

/* matmul_coop.comp's shared memory: A's and B's padded tiles and four 16 x 16 f32 staging
 * tiles */
#define VK_COOP_SHARED_BYTES (128u * 5u * 16u + 32u * 17u * 16u + 4u * 256u * 4u)

/* The cooperative matrix shape ("16x16x16") of the matmul_coop.comp variants device p can
 * run, or NULL with *why saying what it lacks.
 * Needs VK_NV_cooperative_matrix (the feature, the compute stage and one shape of
 * k_coop_shapes), shaderFloat16 (the f16 matrix type), vulkanMemoryModel (glslang declares
 * the Vulkan memory model for the cooperative matrix code), 32-invocation subgroups with
 * basic operations in compute (the shader splits its 128 invocations into 4 subgroups by
 * gl_SubgroupID) and VK_COOP_SHARED_BYTES of shared memory. VK_KHR_cooperative_matrix alone
 * is not enough: its SPIR-V differs, and Debian 12's glslc (glslang 11.13) cannot compile
 * GL_KHR_cooperative_matrix. */
static const char *coop_pick(VkPhysicalDevice p, const char **why)
{
    if (!has_extension(p, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME)) {
        *why = has_extension(p, "VK_KHR_cooperative_matrix")
                   ? "only VK_KHR_cooperative_matrix, and this build's shader is "
                     "VK_NV_cooperative_matrix's"
                   : "no VK_NV_cooperative_matrix";
        return NULL;
    }
    VkPhysicalDeviceCooperativeMatrixFeaturesNV fc = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
    VkPhysicalDeviceVulkan12Features f12 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, .pNext = &fc};
    VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                   .pNext = &f12};
    vkGetPhysicalDeviceFeatures2(p, &f);
    VkPhysicalDeviceCooperativeMatrixPropertiesNV pc = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_NV};
    VkPhysicalDeviceSubgroupProperties sp = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, .pNext = &pc};
    VkPhysicalDeviceProperties2 pr = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                      .pNext = &sp};
    vkGetPhysicalDeviceProperties2(p, &pr);
    if (!fc.cooperativeMatrix ||
        !(pc.cooperativeMatrixSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT)) {
        *why = "cooperativeMatrix is not offered in compute shaders";
        return NULL;
    }
    if (!f12.shaderFloat16 || !f12.vulkanMemoryModel) {
        *why = "no shaderFloat16 or vulkanMemoryModel";
        return NULL;
    }
    if (sp.subgroupSize != 32 || !(sp.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) ||
        !(sp.supportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT)) {
        *why = "subgroups are not 32 invocations with basic operations in compute";
        return NULL;
    }
    if (pr.properties.limits.maxComputeSharedMemorySize < VK_COOP_SHARED_BYTES) {
        *why = "too little shared memory";
        return NULL;
    }
    PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV list =
        (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV)vkGetInstanceProcAddr(
            g_instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV");
    uint32_t n = 0;
    *why = "no listed shape with f16 A and B, f32 C and D, subgroup scope and M x N x K "
           "16 x 16 x 16, 16 x 8 x 16 or 16 x 8 x 8";
    if (list == NULL || list(p, &n, NULL) != VK_SUCCESS || n == 0) return NULL;
    VkCooperativeMatrixPropertiesNV *cp = td__vk_calloc(n, sizeof *cp);
    if (cp == NULL) {
        *why = "out of host memory";
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++)
        cp[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
    const char *shape = NULL;
    if (list(p, &n, cp) >= 0)
        for (size_t s = 0; s < sizeof k_coop_shapes / sizeof k_coop_shapes[0] && !shape; s++)
            for (uint32_t i = 0; i < n && !shape; i++)
                if (cp[i].MSize == k_coop_shapes[s].m && cp[i].NSize == k_coop_shapes[s].n &&
                    cp[i].KSize == k_coop_shapes[s].k &&
                    cp[i].AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
                    cp[i].BType == VK_COMPONENT_TYPE_FLOAT16_NV &&
                    cp[i].CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
                    cp[i].DType == VK_COMPONENT_TYPE_FLOAT32_NV &&
                    cp[i].scope == VK_SCOPE_SUBGROUP_NV &&
                    td__vk_has_shader(k_coop_shapes[s].shader) &&
                    td__vk_has_shader(k_coop_shapes[s].shader_f32))
                    shape = k_coop_shapes[s].shape;
    td__vk_free(cp);
    return shape;
}

static int type_rank(VkPhysicalDevice p)
{
    VkPhysicalDeviceProperties pr;
    vkGetPhysicalDeviceProperties(p, &pr);
    switch (pr.deviceType) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 4;
    default: return 3;
    }
}

static void instance_init(void)
{
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                             .pApplicationName = "tensord",
                             .pEngineName = "tensord",
                             .apiVersion = VK_API_VERSION_1_2};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                               .pApplicationInfo = &app};
    if (vkCreateInstance(&ci, NULL, &g_instance) != VK_SUCCESS) {
        g_instance = VK_NULL_HANDLE; /* no ICD: no devices */
        return;
    }
    uint32_t n = 0;
    if (vkEnumeratePhysicalDevices(g_instance, &n, NULL) != VK_SUCCESS || n == 0) return;
    VkPhysicalDevice all[VK_MAX_PHYS];
    if (n > VK_MAX_PHYS) n = VK_MAX_PHYS;
    if (vkEnumeratePhysicalDevices(g_instance, &n, all) < 0) return;
    for (int rank = 0; rank <= 4; rank++)
        for (uint32_t i = 0; i < n; i++)
            if (type_rank(all[i]) == rank && usable(all[i])) g_phys[g_nphys++] = all[i];
}

static td_status vk_device_count(int *out)
{
    pthread_once(&g_once, instance_init);
    *out = g_nphys;
    return TD_OK;
}

/* ---- blocks ---- */

static vk_block *block_of(vk_device *vd, uint64_t ptr, uint64_t *off)
{
    uint64_t id = ptr >> VK_PTR_SHIFT;
    if (id == 0 || id > vd->nblocks) return NULL;
    *off = ptr & (((uint64_t)1 << VK_PTR_SHIFT) - 1);
    return vd->blocks[id - 1];
}

static void block_destroy(vk_device *vd, vk_block *b)
{
    if (b == NULL) return;
    if (b->mem != VK_NULL_HANDLE) vd->dev_bytes -= b->size;
    if (b->map != NULL) vkUnmapMemory(vd->dev, b->mem);
    if (b->buf != VK_NULL_HANDLE) vkDestroyBuffer(vd->dev, b->buf, NULL);
    if (b->mem != VK_NULL_HANDLE) vkFreeMemory(vd->dev, b->mem, NULL);
    td__vk_free(b->free);
    td__vk_free(b);
}

/* A VkBuffer of `size` bytes bound to fresh memory of type `type` (mapped when map). */
static VkResult make_buffer(vk_device *vd, uint64_t size, uint32_t type, bool map, VkBuffer *buf,
                            VkDeviceMemory *mem, void **mapped)
{
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                             .size = size,
                             .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    *buf = VK_NULL_HANDLE;
    *mem = VK_NULL_HANDLE;
    *mapped = NULL;
    VkResult r = vkCreateBuffer(vd->dev, &bi, NULL, buf);
    if (r != VK_SUCCESS) return r;
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(vd->dev, *buf, &req);
    if (!(req.memoryTypeBits & (1u << type)) || req.size > vd->max_alloc) {
        vkDestroyBuffer(vd->dev, *buf, NULL);
        *buf = VK_NULL_HANDLE;
        return VK_ERROR_OUT_OF_DEVICE_MEMORY;
    }
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                               .allocationSize = req.size,
                               .memoryTypeIndex = type};
    r = vkAllocateMemory(vd->dev, &ai, NULL, mem);
    if (r == VK_SUCCESS) r = vkBindBufferMemory(vd->dev, *buf, *mem, 0);
    if (r == VK_SUCCESS && map) r = vkMapMemory(vd->dev, *mem, 0, VK_WHOLE_SIZE, 0, mapped);
    if (r != VK_SUCCESS) {
        vkDestroyBuffer(vd->dev, *buf, NULL);
        if (*mem != VK_NULL_HANDLE) vkFreeMemory(vd->dev, *mem, NULL);
        *buf = VK_NULL_HANDLE;
        *mem = VK_NULL_HANDLE;
        *mapped = NULL;
    }
    return r;
}

/* A free id slot (index into vd->blocks, the id is slot + 1); false: no host memory. */
static bool block_slot(vk_device *vd, uint32_t *out)
{
    uint32_t slot = UINT32_MAX;
    for (uint32_t i = 0; i < vd->nblocks && slot == UINT32_MAX; i++)
        if (vd->blocks[i] == NULL) slot = i;
    if (slot == UINT32_MAX) {
        if (vd->nblocks == vd->capblocks) {
            uint32_t cap = vd->capblocks ? vd->capblocks * 2 : 16;
            vk_block **nb = vk_realloc(vd->blocks, cap * sizeof *nb);
            if (nb == NULL) return false;
            vd->blocks = nb;
            vd->capblocks = cap;
        }
        slot = vd->nblocks++;
        vd->blocks[slot] = NULL;
    }
    *out = slot;
    return true;
}

/* Tensor memory allocations so far, every device (the profile's table prints it). */
static uint64_t g_nallocs;

/* A new block in a free id slot; NULL on failure (*r says why). */
static vk_block *block_new(vk_device *vd, uint64_t size, bool dedicated, uint32_t *id, VkResult *r)
{
    uint32_t slot;
    if (!block_slot(vd, &slot)) {
        *r = VK_ERROR_OUT_OF_HOST_MEMORY;
        return NULL;
    }
    vk_block *b = td__vk_calloc(1, sizeof *b);
    if (b == NULL) {
        *r = VK_ERROR_OUT_OF_HOST_MEMORY;
        return NULL;
    }
    b->size = size;
    b->dedicated = dedicated;
    *r = vd->test_cap > 0 && vd->dev_bytes + size > vd->test_cap
             ? VK_ERROR_OUT_OF_DEVICE_MEMORY
             : make_buffer(vd, size, vd->mem_type, vd->mapped, &b->buf, &b->mem, &b->map);
    if (b->mem != VK_NULL_HANDLE) {
        vd->dev_bytes += size;
        vd->nallocs++;
        __atomic_add_fetch(&g_nallocs, 1, __ATOMIC_RELAXED);
        td__vk_log(0, "vulkan:%d: vkAllocateMemory of %llu bytes (%s; %llu tensor allocations "
                   "so far, %llu bytes cached)", vd->index, (unsigned long long)size,
                   dedicated ? "dedicated" : "block", (unsigned long long)vd->nallocs,
                   (unsigned long long)vd->cache_bytes);
    }
    if (*r == VK_SUCCESS && !dedicated) {
        b->free = td__vk_calloc(8, sizeof *b->free);
        if (b->free == NULL) *r = VK_ERROR_OUT_OF_HOST_MEMORY;
        else {
            b->capfree = 8;
            b->nfree = 1;
            b->free[0] = (vk_range){0, size};
        }
    }
    if (*r != VK_SUCCESS) {
        block_destroy(vd, b);
        return NULL;
    }
    vd->blocks[slot] = b;
    *id = slot + 1;
    return b;
}

/* First fit of len bytes in block b; UINT64_MAX when none. */
static uint64_t block_take(vk_block *b, uint64_t len)
{
    for (uint32_t i = 0; i < b->nfree; i++) {
        if (b->free[i].len < len) continue;
        uint64_t off = b->free[i].off;
        b->free[i].off += len;
        b->free[i].len -= len;
        if (b->free[i].len == 0) {
            memmove(&b->free[i], &b->free[i + 1], (b->nfree - i - 1) * sizeof *b->free);
            b->nfree--;
        }
        return off;
    }
    return UINT64_MAX;
}

/* Give [off, off + len) back to block b, merging neighbours; false: no host memory (the
 * range is then lost to this block, never handed out twice). */
static bool block_give(vk_block *b, uint64_t off, uint64_t len)
{
    uint32_t i = 0;
    while (i < b->nfree && b->free[i].off < off) i++;
    bool left = i > 0 && b->free[i - 1].off + b->free[i - 1].len == off;
    bool right = i < b->nfree && off + len == b->free[i].off;
    if (left && right) {
        b->free[i - 1].len += len + b->free[i].len;
        memmove(&b->free[i], &b->free[i + 1], (b->nfree - i - 1) * sizeof *b->free);
        b->nfree--;
    } else if (left) {
        b->free[i - 1].len += len;
    } else if (right) {
        b->free[i].off = off;
        b->free[i].len += len;
    } else {
        if (b->nfree == b->capfree) {
            vk_range *nf = vk_realloc(b->free, b->capfree * 2 * sizeof *nf);
            if (nf == NULL) return false;
            b->free = nf;
            b->capfree *= 2;
        }
        memmove(&b->free[i + 1], &b->free[i], (b->nfree - i) * sizeof *b->free);
        b->free[i] = (vk_range){off, len};
        b->nfree++;
    }
    return true;
}

static uint64_t round_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

/* ---- large allocations: size classes and the cache of freed dedicated blocks ---- */

/* The bytes a dedicated block for a request of len bytes takes: len rounded up to a
 * multiple of g, the largest power of two with 8 g <= len (at least 2 MiB), so at most an
 * eighth is wasted and nearby sizes share a class; len itself where rounding would pass
 * maxMemoryAllocationSize. */
static uint64_t dedicated_class(const vk_device *vd, uint64_t len)
{
    uint64_t g = (uint64_t)2 << 20;
    while (g * 16 <= len) g *= 2;
    const uint64_t c = round_up(len, g);
    return c <= vd->max_alloc ? c : len;
}

/* Keep freed dedicated block b for reuse, dropping the oldest cached blocks to stay within
 * cache_cap; destroy it where it alone exceeds the cap or there is no host memory. */
static void cache_put(vk_device *vd, vk_block *b)
{
    if (b->size > vd->cache_cap) {
        block_destroy(vd, b);
        return;
    }
    uint32_t drop = 0;
    uint64_t bytes = vd->cache_bytes;
    while (drop < vd->ncache && bytes + b->size > vd->cache_cap) bytes -= vd->cache[drop++]->size;
    for (uint32_t i = 0; i < drop; i++) block_destroy(vd, vd->cache[i]);
    if (drop > 0) /* (the cache array is NULL until the first put: no memmove of NULL) */
        memmove(vd->cache, vd->cache + drop, (vd->ncache - drop) * sizeof *vd->cache);
    vd->ncache -= drop;
    vd->cache_bytes = bytes;
    if (vd->ncache == vd->capcache) {
        uint32_t cap = vd->capcache ? vd->capcache * 2 : 8;
        vk_block **nc = vk_realloc(vd->cache, cap * sizeof *nc);
        if (nc == NULL) {
            block_destroy(vd, b);
            return;
        }
        vd->cache = nc;
        vd->capcache = cap;
    }
    vd->cache[vd->ncache++] = b;
    vd->cache_bytes += b->size;
}

/* A cached block of exactly `size` bytes (the newest), removed from the cache; NULL: none. */
static vk_block *cache_take(vk_device *vd, uint64_t size)
{
    for (uint32_t i = vd->ncache; i-- > 0;) {
        vk_block *b = vd->cache[i];
        if (b->size != size) continue;
        memmove(vd->cache + i, vd->cache + i + 1, (vd->ncache - i - 1) * sizeof *vd->cache);
        vd->ncache--;
        vd->cache_bytes -= b->size;
        return b;
    }
    return NULL;
}

/* Destroy every cached block (memory pressure, device close). */
static void cache_drop(vk_device *vd)
{
    for (uint32_t i = 0; i < vd->ncache; i++) block_destroy(vd, vd->cache[i]);
    vd->ncache = 0;
    vd->cache_bytes = 0;
}

/* block_new, and when the device is out of memory and blocks are cached: drop the cache
 * (one info line) and try once more. */
static vk_block *block_new_or_reclaim(vk_device *vd, uint64_t size, bool dedicated, uint32_t *id)
{
    VkResult r = VK_SUCCESS;
    vk_block *b = block_new(vd, size, dedicated, id, &r);
    if (b == NULL && r == VK_ERROR_OUT_OF_DEVICE_MEMORY && vd->ncache > 0) {
        td__vk_log(1, "vulkan:%d: out of device memory for %llu bytes: releasing %llu cached "
                   "bytes of freed large tensors and retrying", vd->index,
                   (unsigned long long)size, (unsigned long long)vd->cache_bytes);
        cache_drop(vd);
        b = block_new(vd, size, dedicated, id, &r);
    }
    return b;
}

static void release_now(vk_device *vd, uint64_t ptr, size_t nbytes)
{
    uint64_t off;
    vk_block *b = block_of(vd, ptr, &off);
    if (b == NULL) return;
    uint64_t len = round_up(nbytes, VK_ALIGN);
    vd->bytes_used -= b->dedicated ? b->size : len;
    if (b->dedicated) {
        vd->blocks[(ptr >> VK_PTR_SHIFT) - 1] = NULL;
        cache_put(vd, b);
        return;
    }
    block_give(b, off, len);
}

static void release_zombies(vk_device *vd)
{
    for (uint32_t i = 0; i < vd->nzombie; i++) release_now(vd, vd->zombie[i], vd->zombie_len[i]);
    vd->nzombie = 0;
}

/* ---- recording and submission ---- */

static td_status begin_recording(vk_device *vd, char *err, size_t errlen)
{
    if (vd->recording) return TD_OK;
    VkResult r = vkResetCommandBuffer(vd->cb, 0);
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    if (r == VK_SUCCESS) r = vkBeginCommandBuffer(vd->cb, &bi);
    if (r != VK_SUCCESS)
        return td__vk_fail(err, errlen, status_of(vd, r),
                           "vulkan:%d: cannot begin a command buffer (VkResult %d)", vd->index, r);
    vd->recording = true;
    vd->recorded = 0;
    vd->pused = 0;
    return TD_OK;
}

td_status td__vk_flush(vk_device *vd, char *err, size_t errlen)
{
    if (vd->lost)
        return td__vk_fail(err, errlen, TD_EDEVICE, "vulkan:%d: the device was lost", vd->index);
    if (!vd->recording) {
        release_zombies(vd);
        return TD_OK;
    }
    /* device writes made visible to the host reads that follow the fence */
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
    vkCmdPipelineBarrier(vd->cb,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
    vd->recording = false;
    VkResult r = vkEndCommandBuffer(vd->cb);
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                       .commandBufferCount = 1,
                       .pCommandBuffers = &vd->cb};
    if (r == VK_SUCCESS) r = vkQueueSubmit(vd->queue, 1, &si, vd->fence);
    if (r == VK_SUCCESS) {
        r = vkWaitForFences(vd->dev, 1, &vd->fence, VK_TRUE, UINT64_MAX);
        VkResult r2 = vkResetFences(vd->dev, 1, &vd->fence);
        if (r == VK_SUCCESS) r = r2;
    }
    if (r != VK_SUCCESS)
        return td__vk_fail(err, errlen, status_of(vd, r),
                           "vulkan:%d: queue submission failed (VkResult %d)", vd->index, r);
    release_zombies(vd);
    td__vk_pcache_flushed(vd);
    return TD_OK;
}

/* Shader `shader`'s module. On a device without shaderDenormPreserveFloat32 (or without
 * shaderSignedZeroInfNanPreserveFloat32) the module is made from a copy of the SPIR-V without
 * the DenormPreserve (SignedZeroInfNanPreserve) execution mode and capability that
 * shaders/common.glsl declares (asking for what the device lacks is invalid usage); the
 * SPIR-V is a header of 5 words then instructions whose first word holds (word count << 16)
 * | opcode, so dropping two instructions is a copy that skips them. */
static VkResult shader_module(vk_device *vd, uint32_t shader)
{
    const uint32_t *code = td__vk_shaders[shader].code;
    const size_t nwords = td__vk_shaders[shader].nbytes / 4;
    uint32_t *copy = NULL;
    if ((!vd->denorm_preserve || !vd->nan_preserve) && nwords > 5) {
        copy = td__vk_calloc(nwords, 4);
        if (copy == NULL) return VK_ERROR_OUT_OF_HOST_MEMORY;
        size_t o = 5;
        memcpy(copy, code, 5 * 4);
        for (size_t i = 5; i < nwords;) {
            const uint32_t wc = code[i] >> 16, opc = code[i] & 0xffffu;
            if (wc == 0 || i + wc > nwords) { /* malformed: keep the rest as it is */
                memcpy(copy + o, code + i, (nwords - i) * 4);
                o += nwords - i;
                break;
            }
            const bool cap = opc == 17 /* OpCapability */ && wc == 2;
            const bool mode = opc == 16 /* OpExecutionMode */ && wc >= 3;
            const bool drop =
                (!vd->denorm_preserve && ((cap && code[i + 1] == 4464) ||
                                          (mode && code[i + 2] == 4459))) ||
                (!vd->nan_preserve && ((cap && code[i + 1] == 4466) ||
                                       (mode && code[i + 2] == 4461)));
            if (!drop) {
                memcpy(copy + o, code + i, wc * 4);
                o += wc;
            }
            i += wc;
        }
        VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                       .codeSize = o * 4, .pCode = copy};
        VkResult r = vkCreateShaderModule(vd->dev, &mi, NULL, &vd->modules[shader]);
        td__vk_free(copy);
        return r;
    }
    VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                   .codeSize = td__vk_shaders[shader].nbytes, .pCode = code};
    return vkCreateShaderModule(vd->dev, &mi, NULL, &vd->modules[shader]);
}

static VkPipeline pipeline_for(vk_device *vd, uint32_t shader, uint32_t op, VkResult *res)
{
    uint32_t h = (shader * 2654435761u) ^ (op * 40503u);
    for (uint32_t k = 0; k < VK_PIPE_SLOTS; k++) {
        vk_pipe *p = &vd->pipes[(h + k) % VK_PIPE_SLOTS];
        if (p->shader == shader && p->op == op) return p->pipe;
        if (p->shader != UINT32_MAX) continue;
        VkResult r = VK_SUCCESS;
        if (vd->modules[shader] == VK_NULL_HANDLE) r = shader_module(vd, shader);
        VkSpecializationMapEntry me = {.constantID = 0, .offset = 0, .size = sizeof(uint32_t)};
        VkSpecializationInfo spec = {.mapEntryCount = 1, .pMapEntries = &me,
                                     .dataSize = sizeof op, .pData = &op};
        VkComputePipelineCreateInfo ci = {
            .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
            .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                      .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                      .module = vd->modules[shader],
                      .pName = "main",
                      .pSpecializationInfo = &spec},
            .layout = vd->layout};
        VkPipeline pipe = VK_NULL_HANDLE;
        if (r == VK_SUCCESS)
            r = vkCreateComputePipelines(vd->dev, vd->pcache, 1, &ci, NULL, &pipe);
        if (r == VK_SUCCESS) vd->pcache_dirty = true;
        *res = r;
        if (r != VK_SUCCESS) return VK_NULL_HANDLE;
        p->shader = shader;
        p->op = op;
        p->pipe = pipe;
        return pipe;
    }
    *res = VK_ERROR_TOO_MANY_OBJECTS;
    return VK_NULL_HANDLE;
}

static int shader_index(const char *name)
{
    for (size_t i = 0; i < td__vk_nshaders; i++)
        if (strcmp(td__vk_shaders[i].name, name) == 0) return (int)i;
    return -1;
}

bool td__vk_has_shader(const char *name) { return shader_index(name) >= 0; }

td_status td__vk_dispatch(vk_device *vd, const char *name, uint32_t op, uint32_t *params,
                          const vk_arg *args, int nargs, uint32_t gx, uint32_t gy, uint32_t gz,
                          char *err, size_t errlen)
{
    int si = shader_index(name);
    if (si < 0)
        return td__vk_fail(err, errlen, TD_EINTERNAL, "vulkan: no shader variant %s", name);
    if (vd->lost)
        return td__vk_fail(err, errlen, TD_EDEVICE, "vulkan:%d: the device was lost", vd->index);
    VkDescriptorBufferInfo bi[VK_MAX_BINDINGS];
    for (int k = 0; k < nargs && k < VK_MAX_BINDINGS - 1; k++) {
        uint64_t off;
        if (args[k].nbytes == 0) { /* an empty tensor has no buffer; the shader never reads it */
            bi[k + 1] = (VkDescriptorBufferInfo){vd->pbuf, 0, VK_PARAM_WORDS * 4};
            params[VK_P_BASE + k] = 0;
            continue;
        }
        vk_block *b = block_of(vd, (uint64_t)(uintptr_t)args[k].data, &off);
        if (b == NULL)
            return td__vk_fail(err, errlen, TD_EINTERNAL, "vulkan: %s: argument %d is not a "
                               "buffer of this device", name, k);
        uint64_t start = off / VK_ALIGN * VK_ALIGN, skew = off - start;
        uint64_t range = round_up(skew + (args[k].nbytes > 0 ? args[k].nbytes : 1), 4);
        if (range > b->size - start) range = b->size - start;
        if (range > vd->max_range)
            return td__vk_fail(err, errlen, TD_EUNSUPPORTED,
                               "vulkan:%d: %s: a tensor of %zu bytes exceeds the device's "
                               "maxStorageBufferRange of %llu bytes",
                               vd->index, name, args[k].nbytes, (unsigned long long)vd->max_range);
        bi[k + 1] = (VkDescriptorBufferInfo){b->buf, start, range};
        params[VK_P_BASE + k] = (uint32_t)(skew / args[k].esize);
    }
    td_status s = TD_OK;
    if (vd->recording && vd->pused + VK_PARAM_WORDS * 4 > VK_PARAM_RING)
        s = td__vk_flush(vd, err, errlen);
    if (s == TD_OK) s = begin_recording(vd, err, errlen);
    if (s != TD_OK) return s;
    VkResult r = VK_SUCCESS;
    VkPipeline pipe = pipeline_for(vd, (uint32_t)si, op, &r);
    if (pipe == VK_NULL_HANDLE)
        return td__vk_fail(err, errlen, status_of(vd, r),
                           "vulkan:%d: cannot create the pipeline of %s (VkResult %d)", vd->index,
                           name, r);
    memcpy((char *)vd->pmap + vd->pused, params, VK_PARAM_WORDS * 4);
    bi[0] = (VkDescriptorBufferInfo){vd->pbuf, vd->pused, VK_PARAM_WORDS * 4};
    vd->pused += VK_PARAM_WORDS * 4;
    for (int k = nargs + 1; k < VK_MAX_BINDINGS; k++) bi[k] = bi[0];
    VkWriteDescriptorSet w[VK_MAX_BINDINGS];
    for (int k = 0; k < VK_MAX_BINDINGS; k++)
        w[k] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                      .dstBinding = (uint32_t)k,
                                      .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo = &bi[k]};
    vkCmdBindPipeline(vd->cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
    vd->push_descriptor(vd->cb, VK_PIPELINE_BIND_POINT_COMPUTE, vd->layout, 0, VK_MAX_BINDINGS, w);
    vkCmdDispatch(vd->cb, gx, gy, gz);
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT};
    vkCmdPipelineBarrier(vd->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
    vd->recorded++;
    return TD_OK;
}

/* ---- devices ---- */

static void device_destroy(vk_device *vd)
{
    if (vd->dev != VK_NULL_HANDLE) {
        vkDeviceWaitIdle(vd->dev);
        td__vk_pcache_close(vd);
        for (uint32_t i = 0; i < VK_PIPE_SLOTS; i++)
            if (vd->pipes[i].shader != UINT32_MAX && vd->pipes[i].pipe != VK_NULL_HANDLE)
                vkDestroyPipeline(vd->dev, vd->pipes[i].pipe, NULL);
        for (size_t i = 0; vd->modules != NULL && i < td__vk_nshaders; i++)
            if (vd->modules[i] != VK_NULL_HANDLE) vkDestroyShaderModule(vd->dev, vd->modules[i], NULL);
        if (vd->layout != VK_NULL_HANDLE) vkDestroyPipelineLayout(vd->dev, vd->layout, NULL);
        if (vd->dsl != VK_NULL_HANDLE) vkDestroyDescriptorSetLayout(vd->dev, vd->dsl, NULL);
        for (uint32_t i = 0; i < vd->nblocks; i++) block_destroy(vd, vd->blocks[i]);
        cache_drop(vd);
        if (vd->pmap != NULL) vkUnmapMemory(vd->dev, vd->pmem);
        if (vd->pbuf != VK_NULL_HANDLE) vkDestroyBuffer(vd->dev, vd->pbuf, NULL);
        if (vd->pmem != VK_NULL_HANDLE) vkFreeMemory(vd->dev, vd->pmem, NULL);
        for (int k = 0; k < 2; k++) {
            if (vd->smap[k] != NULL) vkUnmapMemory(vd->dev, vd->smem[k]);
            if (vd->sbuf[k] != VK_NULL_HANDLE) vkDestroyBuffer(vd->dev, vd->sbuf[k], NULL);
            if (vd->smem[k] != VK_NULL_HANDLE) vkFreeMemory(vd->dev, vd->smem[k], NULL);
            if (vd->sfence[k] != VK_NULL_HANDLE) vkDestroyFence(vd->dev, vd->sfence[k], NULL);
        }
        if (vd->fence != VK_NULL_HANDLE) vkDestroyFence(vd->dev, vd->fence, NULL);
        if (vd->pool != VK_NULL_HANDLE) vkDestroyCommandPool(vd->dev, vd->pool, NULL);
        vkDestroyDevice(vd->dev, NULL);
    }
    td__vk_free(vd->modules);
    td__vk_free(vd->blocks);
    td__vk_free(vd->cache);
    td__vk_free(vd->zombie);
    td__vk_free(vd->zombie_len);
    pthread_mutex_destroy(&vd->mu);
    td__vk_free(vd);
}

/* A memory type's property flags as words ("device-local|host-visible|...") into buf. */
static const char *flag_words(VkMemoryPropertyFlags f, char *buf, size_t len)
{
    static const struct {
        VkMemoryPropertyFlags bit;
        const char *name;
    } w[] = {{VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, "device-local"},
             {VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT, "host-visible"},
             {VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, "host-coherent"},
             {VK_MEMORY_PROPERTY_HOST_CACHED_BIT, "host-cached"}};
    size_t at = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < sizeof w / sizeof w[0]; k++)
        if ((f & w[k].bit) && at < len) {
            int n = snprintf(buf + at, len - at, "%s%s", at > 0 ? "|" : "", w[k].name);
            if (n > 0) at += (size_t)n;
        }
    if (at == 0) snprintf(buf, len, "none");
    return buf;
}

/* Memory types. Where host memory is the device's own memory (a CPU implementation such as
 * lavapipe, an integrated GPU) tensors take a device-local type that is also host-visible
 * and coherent, and transfers are memcpy through the mapping. On a discrete GPU that type is
 * the PCIe BAR window, when there is one: shaders read it at device-memory speed only where
 * the driver places it in VRAM, and host reads of it are uncached (the H200 with NVIDIA's
 * driver, 2026-12: td_read of 64 MiB took 2.47 s, add on 2^28 f32 ran at 55-68 GB/s against
 * CUDA's 4392), so there tensors take a device-local type that is preferably not
 * host-visible and move through the staging slots (transfer()). Staging takes a
 * host-visible coherent type, cached where there is one (reads of it from the host are then
 * at memory speed; host writes to cached coherent memory are too). The parameter ring takes
 * a device-local host-visible coherent type on a discrete GPU where there is one (4 MiB, so
 * a small BAR holds it; shaders read it every dispatch), else a host-visible coherent one.
 * TENSORD_VULKAN_STAGING=1 forces staging (tests use it on lavapipe); TENSORD_VULKAN_MAPPED=1
 * forces the mapped choice on any device that has such a type (for A/B runs). Logged once
 * per device at info level. */
static bool pick_memory(vk_device *vd, VkPhysicalDeviceType type)
{
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(vd->phys, &mp);
    const VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                     VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    const VkMemoryPropertyFlags dl = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    const VkMemoryPropertyFlags hc = VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
    const char *es = getenv("TENSORD_VULKAN_STAGING"), *em = getenv("TENSORD_VULKAN_MAPPED");
    const bool force_staged = es != NULL && strcmp(es, "1") == 0;
    const bool force_mapped = em != NULL && strcmp(em, "1") == 0;
    const bool unified = type == VK_PHYSICAL_DEVICE_TYPE_CPU ||
                         type == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU;
    int both = -1, local = -1, local_only = -1, host = -1, cached = -1, cached_sys = -1;
    for (uint32_t i = 0; i < mp.memoryTypeCount; i++) {
        const VkMemoryPropertyFlags f = mp.memoryTypes[i].propertyFlags;
        if ((f & (hv | dl)) == (hv | dl) && both < 0) both = (int)i;
        if ((f & dl) && local < 0) local = (int)i;
        if ((f & dl) && !(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) && local_only < 0)
            local_only = (int)i;
        if ((f & hv) == hv && host < 0) host = (int)i;
        if ((f & (hv | hc)) == (hv | hc) && cached < 0) cached = (int)i;
        if ((f & (hv | hc)) == (hv | hc) && !(f & dl) && cached_sys < 0) cached_sys = (int)i;
    }
    if (host < 0 || (local < 0 && both < 0)) return false;
    if (both >= 0 && !force_staged && (unified || force_mapped)) {
        vd->mem_type = (uint32_t)both;
        vd->mapped = true;
    } else {
        vd->mem_type = (uint32_t)(local_only >= 0 ? local_only : local >= 0 ? local : both);
        vd->mapped = false;
    }
    vd->host_type = (uint32_t)(!unified && both >= 0 && !force_mapped ? both : host);
    vd->stage_type = (uint32_t)(cached_sys >= 0 ? cached_sys : cached >= 0 ? cached : host);
    vd->heap_size = mp.memoryHeaps[mp.memoryTypes[vd->mem_type].heapIndex].size;
    const struct {
        const char *what;
        uint32_t t;
    } used[] = {{"tensors", vd->mem_type}, {"staging", vd->stage_type}, {"parameters", vd->host_type}};
    char line[512], fw[96];
    size_t at = 0;
    for (size_t k = 0; k < sizeof used / sizeof used[0] && at < sizeof line; k++) {
        if (k == 1 && vd->mapped) continue; /* no staging slots */
        const VkMemoryType *mt = &mp.memoryTypes[used[k].t];
        int n = snprintf(line + at, sizeof line - at, "%s%s type %u (%s, heap %u of %.1f GiB)",
                         k > 0 ? "; " : "", used[k].what, used[k].t,
                         flag_words(mt->propertyFlags, fw, sizeof fw), mt->heapIndex,
                         (double)mp.memoryHeaps[mt->heapIndex].size / (1u << 30));
        if (n > 0) at += (size_t)n;
    }
    td__vk_log(1, "vulkan:%d: memory: %s; transfers %s", vd->index, line,
               vd->mapped ? "mapped (memcpy)" : "staged (2 slots, vkCmdCopyBuffer)");
    return true;
}

static td_status vk_device_open(td__device *dev, int index, char *err, size_t errlen)
{
    pthread_once(&g_once, instance_init);
    if (index < 0 || index >= g_nphys)
        return td__vk_fail(err, errlen, TD_ENOTFOUND, "vulkan:%d: no such device", index);
    vk_device *vd = td__vk_calloc(1, sizeof *vd);
    if (vd == NULL) return td__vk_fail(err, errlen, TD_ENOMEM, "vulkan:%d: out of host memory", index);
    if (pthread_mutex_init(&vd->mu, NULL) != 0) {
        td__vk_free(vd);
        return td__vk_fail(err, errlen, TD_EDEVICE, "vulkan:%d: cannot create a mutex", index);
    }
    for (uint32_t i = 0; i < VK_PIPE_SLOTS; i++) vd->pipes[i].shader = UINT32_MAX;
    vd->index = index;
    vd->phys = g_phys[index];
    vd->qfamily = (uint32_t)compute_family(vd->phys);
    VkPhysicalDeviceMaintenance3Properties m3 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceVulkan12Properties p12 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES, .pNext = &m3};
    VkPhysicalDeviceProperties2 pr = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                      .pNext = &p12};
    vkGetPhysicalDeviceProperties2(vd->phys, &pr);
    /* Every shader declares DenormPreserve for 32-bit floats (shaders/common.glsl): the CPU
     * reference keeps f32 (and bf16, computed in f32) subnormals, and NVIDIA's driver flushes
     * them to zero unless asked (the H200 run of 2026-12-05: 250 conformance cases with
     * subnormal inputs). A device that cannot preserve them is told so in the log. */
    vd->denorm_preserve = p12.shaderDenormPreserveFloat32;
    vd->nan_preserve = p12.shaderSignedZeroInfNanPreserveFloat32;
    if (!vd->nan_preserve)
        td__vk_log(1, "vulkan:%d (%s): cannot ask the compiler to keep NaN, infinities and "
                   "signed zeros (shaderSignedZeroInfNanPreserveFloat32 is false); NaN may not "
                   "propagate through max/min-like ops", index, pr.properties.deviceName);
    if (!vd->denorm_preserve)
        td__vk_log(1, "vulkan:%d (%s): cannot preserve f32 subnormals "
                   "(shaderDenormPreserveFloat32 is false); results that are subnormal may be "
                   "flushed to zero", index, pr.properties.deviceName);
    vd->max_range = pr.properties.limits.maxStorageBufferRange;
    vd->cpu_impl = pr.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    vd->max_alloc = m3.maxMemoryAllocationSize;
    vd->block_size = VK_BLOCK_BYTES < vd->max_alloc ? VK_BLOCK_BYTES : vd->max_alloc / VK_ALIGN * VK_ALIGN;
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                  .queueFamilyIndex = vd->qfamily,
                                  .queueCount = 1,
                                  .pQueuePriorities = &prio};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .storageBuffer8BitAccess = VK_TRUE,
                                            .shaderInt8 = VK_TRUE};
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
                                            .pNext = &f12,
                                            .storageBuffer16BitAccess = VK_TRUE};
    VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                   .pNext = &f11,
                                   .features = {.shaderFloat64 = VK_TRUE,
                                                .shaderInt64 = VK_TRUE,
                                                .shaderInt16 = VK_TRUE}};
    /* f16 MATMUL on cooperative matrices where the device has them (coop_pick), unless
     * TENSORD_VULKAN_NO_COOP=1 (A/B runs): then the extension and its features are enabled
     * too; a device that refuses them is created again without. */
    const char *why = "off (TENSORD_VULKAN_NO_COOP=1)";
    const char *nocoop = getenv("TENSORD_VULKAN_NO_COOP");
    if (nocoop == NULL || strcmp(nocoop, "1") != 0) vd->coop_shape = coop_pick(vd->phys, &why);
    VkPhysicalDeviceCooperativeMatrixFeaturesNV fc = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV,
        .cooperativeMatrix = VK_TRUE};
    const char *ext[] = {VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME,
                         VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME};
    VkDeviceCreateInfo di = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                             .pNext = &f,
                             .queueCreateInfoCount = 1,
                             .pQueueCreateInfos = &qi,
                             .enabledExtensionCount = 1,
                             .ppEnabledExtensionNames = ext};
    if (vd->coop_shape != NULL) {
        f12.pNext = &fc;
        f12.shaderFloat16 = VK_TRUE;
        f12.vulkanMemoryModel = VK_TRUE;
        di.enabledExtensionCount = 2;
    }
    VkResult r = vkCreateDevice(vd->phys, &di, NULL, &vd->dev);
    if (r != VK_SUCCESS && vd->coop_shape != NULL) {
        td__vk_log(2, "vulkan:%d (%s): vkCreateDevice with VK_NV_cooperative_matrix failed "
                   "(VkResult %d); trying without", index, pr.properties.deviceName, r);
        vd->coop_shape = NULL;
        why = "the device refused VK_NV_cooperative_matrix";
        f12.pNext = NULL;
        f12.shaderFloat16 = VK_FALSE;
        f12.vulkanMemoryModel = VK_FALSE;
        di.enabledExtensionCount = 1;
        r = vkCreateDevice(vd->phys, &di, NULL, &vd->dev);
    }
    if (r == VK_SUCCESS && vd->coop_shape == NULL && coop_emu() != NULL) {
        vd->coop_shape = coop_emu();
        td__vk_log(1, "vulkan:%d (%s): cooperative matrix emulated (%s, "
                   "TENSORD_TEST_VULKAN_COOP_EMU): f16 matmul and conv GEMMs on matmul_coop.comp "
                   "without tensor cores", index, pr.properties.deviceName, vd->coop_shape);
    } else if (r == VK_SUCCESS) {
        if (vd->coop_shape != NULL)
            td__vk_log(1, "vulkan:%d (%s): cooperative matrix: f16 matmul and conv GEMMs on "
                       "matmul_coop.comp, %s tiles (VK_NV_cooperative_matrix; f32 "
                       "accumulation)", index, pr.properties.deviceName, vd->coop_shape);
        else
            td__vk_log(1, "vulkan:%d (%s): cooperative matrix not used: %s; f16 matmul on "
                       "matmul.comp", index, pr.properties.deviceName, why);
    }
    const char *what = "vkCreateDevice";
    if (r == VK_SUCCESS) {
        vkGetDeviceQueue(vd->dev, vd->qfamily, 0, &vd->queue);
        vd->push_descriptor = (PFN_vkCmdPushDescriptorSetKHR)vkGetDeviceProcAddr(
            vd->dev, "vkCmdPushDescriptorSetKHR");
        if (vd->push_descriptor == NULL) r = VK_ERROR_EXTENSION_NOT_PRESENT;
        what = "vkCmdPushDescriptorSetKHR";
    }
    if (r == VK_SUCCESS && !pick_memory(vd, pr.properties.deviceType)) {
        r = VK_ERROR_FEATURE_NOT_PRESENT;
        what = "memory types";
    }
    if (r == VK_SUCCESS) {
        vd->cache_cap = vd->heap_size / 4;
        /* TENSORD_TEST_VULKAN_MEMORY_CAP (a test hook): tensor memory beyond this many bytes
         * fails as out of device memory, so tests reach the cache's release on pressure */
        const char *tc = getenv("TENSORD_TEST_VULKAN_MEMORY_CAP");
        const long long tcv = tc != NULL ? atoll(tc) : 0;
        if (tcv > 0) vd->test_cap = (uint64_t)tcv;
    }
    if (r == VK_SUCCESS) {
        vd->modules = td__vk_calloc(td__vk_nshaders > 0 ? td__vk_nshaders : 1, sizeof *vd->modules);
        if (vd->modules == NULL) r = VK_ERROR_OUT_OF_HOST_MEMORY;
        what = "host memory";
    }
    if (r == VK_SUCCESS) {
        VkCommandPoolCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                      .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                      .queueFamilyIndex = vd->qfamily};
        r = vkCreateCommandPool(vd->dev, &ci, NULL, &vd->pool);
        what = "vkCreateCommandPool";
    }
    if (r == VK_SUCCESS) {
        VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                          .commandPool = vd->pool,
                                          .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                          .commandBufferCount = 1};
        r = vkAllocateCommandBuffers(vd->dev, &ai, &vd->cb);
        what = "vkAllocateCommandBuffers";
    }
    if (r == VK_SUCCESS) {
        VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
        r = vkCreateFence(vd->dev, &fi, NULL, &vd->fence);
        what = "vkCreateFence";
    }
    if (r == VK_SUCCESS) {
        void *m = NULL;
        r = make_buffer(vd, VK_PARAM_RING, vd->host_type, true, &vd->pbuf, &vd->pmem, &m);
        vd->pmap = m;
        what = "the parameter buffer";
    }
    if (r == VK_SUCCESS && !vd->mapped) {
        vd->ssize = VK_STAGE_BYTES < vd->max_alloc ? VK_STAGE_BYTES : vd->max_alloc;
        /* TENSORD_TEST_VULKAN_STAGE_BYTES (a test hook): smaller slots, so that the staged
         * conformance run's small tensors cross several chunks */
        const char *ts = getenv("TENSORD_TEST_VULKAN_STAGE_BYTES");
        const long long tv = ts != NULL ? atoll(ts) : 0;
        if (tv >= 256 && (uint64_t)tv < vd->ssize) vd->ssize = (uint64_t)tv;
        VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                          .commandPool = vd->pool,
                                          .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                          .commandBufferCount = 2};
        VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
        r = vkAllocateCommandBuffers(vd->dev, &ai, vd->scb);
        for (int k = 0; k < 2 && r == VK_SUCCESS; k++) {
            r = make_buffer(vd, vd->ssize, vd->stage_type, true, &vd->sbuf[k], &vd->smem[k],
                            &vd->smap[k]);
            if (r == VK_SUCCESS) r = vkCreateFence(vd->dev, &fi, NULL, &vd->sfence[k]);
        }
        what = "the staging buffers";
    }
    if (r == VK_SUCCESS) {
        VkDescriptorSetLayoutBinding b[VK_MAX_BINDINGS];
        for (uint32_t k = 0; k < VK_MAX_BINDINGS; k++)
            b[k] = (VkDescriptorSetLayoutBinding){.binding = k,
                                                  .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                  .descriptorCount = 1,
                                                  .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
        VkDescriptorSetLayoutCreateInfo li = {
            .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
            .flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR,
            .bindingCount = VK_MAX_BINDINGS,
            .pBindings = b};
        r = vkCreateDescriptorSetLayout(vd->dev, &li, NULL, &vd->dsl);
        VkPipelineLayoutCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                         .setLayoutCount = 1,
                                         .pSetLayouts = &vd->dsl};
        if (r == VK_SUCCESS) r = vkCreatePipelineLayout(vd->dev, &pi, NULL, &vd->layout);
        what = "the pipeline layout";
    }
    if (r != VK_SUCCESS) {
        td_status s = status_of(NULL, r);
        td__vk_fail(err, errlen, s, "vulkan:%d: %s failed (VkResult %d)", index, what, r);
        device_destroy(vd);
        return s;
    }
    td__vk_pcache_open(vd);
    VkPhysicalDeviceProperties *p = &pr.properties;
    snprintf(dev->description, sizeof dev->description, "%.48s, Vulkan %u.%u, driver %u.%u.%u%s",
             p->deviceName, VK_API_VERSION_MAJOR(p->apiVersion), VK_API_VERSION_MINOR(p->apiVersion),
             VK_API_VERSION_MAJOR(p->driverVersion), VK_API_VERSION_MINOR(p->driverVersion),
             VK_API_VERSION_PATCH(p->driverVersion), vd->mapped ? "" : ", staged");
    dev->impl = vd;
    return TD_OK;
}

static void vk_device_close(td__device *dev)
{
    vk_device *vd = dev->impl;
    if (vd == NULL) return;
    device_destroy(vd);
    dev->impl = NULL;
}

static td_status vk_memory_info(td__device *dev, uint64_t *total, uint64_t *free_bytes)
{
    vk_device *vd = dev->impl;
    pthread_mutex_lock(&vd->mu);
    *total = vd->heap_size;
    *free_bytes = vd->heap_size > vd->bytes_used ? vd->heap_size - vd->bytes_used : 0;
    pthread_mutex_unlock(&vd->mu);
    return TD_OK;
}

/* ---- buffers ---- */

/* Whether a freed buffer waiting for recorded work (a zombie) is a dedicated block of
 * `size` bytes. */
static bool zombie_of_class(vk_device *vd, uint64_t size)
{
    for (uint32_t i = 0; i < vd->nzombie; i++) {
        uint64_t off;
        const vk_block *b = block_of(vd, vd->zombie[i], &off);
        if (b != NULL && b->dedicated && b->size == size) return true;
    }
    return false;
}

static td_status alloc_locked(vk_device *vd, size_t nbytes, void **out)
{
    if (nbytes == 0 || nbytes > vd->max_alloc || nbytes > vd->heap_size) return TD_ENOMEM;
    uint64_t len = round_up(nbytes, VK_ALIGN);
    uint32_t id = 0;
    if (len > vd->block_size / 2) {
        const uint64_t cls = dedicated_class(vd, len);
        vk_block *b = cache_take(vd, cls);
        if (b == NULL && zombie_of_class(vd, cls)) {
            char err[128];
            if (td__vk_flush(vd, err, sizeof err) == TD_OK) b = cache_take(vd, cls);
        }
        uint32_t slot;
        if (b != NULL && block_slot(vd, &slot)) {
            vd->blocks[slot] = b;
            id = slot + 1;
        } else {
            if (b != NULL) cache_put(vd, b);
            b = block_new_or_reclaim(vd, cls, true, &id);
            if (b == NULL) return TD_ENOMEM;
        }
        vd->bytes_used += b->size;
        *out = (void *)(uintptr_t)(((uint64_t)id << VK_PTR_SHIFT));
        return TD_OK;
    }
    for (uint32_t i = 0; i < vd->nblocks; i++) {
        vk_block *b = vd->blocks[i];
        if (b == NULL || b->dedicated) continue;
        uint64_t off = block_take(b, len);
        if (off != UINT64_MAX) {
            vd->bytes_used += len;
            *out = (void *)(uintptr_t)((((uint64_t)i + 1) << VK_PTR_SHIFT) + off);
            return TD_OK;
        }
    }
    vk_block *b = block_new_or_reclaim(vd, vd->block_size, false, &id);
    if (b == NULL) return TD_ENOMEM;
    uint64_t off = block_take(b, len);
    vd->bytes_used += len;
    *out = (void *)(uintptr_t)(((uint64_t)id << VK_PTR_SHIFT) + off);
    return TD_OK;
}

td_status td__vk_alloc_locked(vk_device *vd, size_t nbytes, void **out)
{
    td_status s = vd->lost ? TD_EDEVICE : alloc_locked(vd, nbytes, out);
    if (s == TD_ENOMEM && vd->nzombie > 0 && nbytes <= vd->max_alloc) {
        char err[128];
        if (td__vk_flush(vd, err, sizeof err) == TD_OK) s = alloc_locked(vd, nbytes, out);
    }
    return s;
}

static td_status vk_buffer_alloc(td__device *dev, void *stream, size_t nbytes, void **out)
{
    vk_device *vd = dev->impl;
    (void)stream; /* one command buffer orders every session's work (the header) */
    pthread_mutex_lock(&vd->mu);
    td_status s = td__vk_alloc_locked(vd, nbytes, out);
    pthread_mutex_unlock(&vd->mu);
    return s;
}

static void vk_buffer_free(td__device *dev, void *stream, void *data, size_t nbytes)
{
    vk_device *vd = dev->impl;
    (void)stream;
    pthread_mutex_lock(&vd->mu);
    td__vk_release_locked(vd, data, nbytes);
    pthread_mutex_unlock(&vd->mu);
}

void td__vk_release_locked(vk_device *vd, void *data, size_t nbytes)
{
    if (!vd->recording) {
        release_now(vd, (uint64_t)(uintptr_t)data, nbytes);
    } else {
        if (vd->nzombie == vd->capzombie) {
            uint32_t cap = vd->capzombie ? vd->capzombie * 2 : 64;
            uint64_t *z = vk_realloc(vd->zombie, cap * sizeof *z);
            if (z != NULL) vd->zombie = z;
            size_t *zl = z != NULL ? vk_realloc(vd->zombie_len, cap * sizeof *zl) : NULL;
            if (zl != NULL) {
                vd->zombie_len = zl;
                vd->capzombie = cap;
            }
        }
        if (vd->nzombie < vd->capzombie) {
            vd->zombie[vd->nzombie] = (uint64_t)(uintptr_t)data;
            vd->zombie_len[vd->nzombie++] = nbytes;
        } else {
            char err[128]; /* no host memory to park it: finish the recorded work instead */
            if (td__vk_flush(vd, err, sizeof err) == TD_OK)
                release_now(vd, (uint64_t)(uintptr_t)data, nbytes);
        }
    }
}

/* Staging slot k's copy of len bytes to (to_device) or from a tensor at block b, offset
 * off, recorded on the slot's command buffer and submitted with its fence, not waited for.
 * Barriers on both sides: the copy sees earlier submissions' shader and transfer writes,
 * and later submissions' shaders, copies and the host see its writes. */
static td_status stage_submit(vk_device *vd, int k, vk_block *b, uint64_t off, uint64_t len,
                              bool to_device)
{
    VkCommandBuffer cb = vd->scb[k];
    VkResult r = vkResetCommandBuffer(cb, 0);
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    if (r == VK_SUCCESS) r = vkBeginCommandBuffer(cb, &bi);
    if (r == VK_SUCCESS) {
        VkMemoryBarrier pre = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                               .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT |
                                                VK_ACCESS_TRANSFER_WRITE_BIT,
                               .dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT |
                                                VK_ACCESS_TRANSFER_WRITE_BIT};
        vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                             VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &pre, 0, NULL, 0, NULL);
        VkBufferCopy c = {.srcOffset = to_device ? 0 : off, .dstOffset = to_device ? off : 0,
                          .size = len};
        vkCmdCopyBuffer(cb, to_device ? vd->sbuf[k] : b->buf, to_device ? b->buf : vd->sbuf[k], 1,
                        &c);
        VkMemoryBarrier post = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                                .dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_SHADER_READ_BIT |
                                                 VK_ACCESS_SHADER_WRITE_BIT |
                                                 VK_ACCESS_TRANSFER_READ_BIT |
                                                 VK_ACCESS_TRANSFER_WRITE_BIT};
        vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT,
                             VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT |
                                 VK_PIPELINE_STAGE_TRANSFER_BIT,
                             0, 1, &post, 0, NULL, 0, NULL);
        r = vkEndCommandBuffer(cb);
    }
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                       .commandBufferCount = 1,
                       .pCommandBuffers = &cb};
    if (r == VK_SUCCESS) r = vkQueueSubmit(vd->queue, 1, &si, vd->sfence[k]);
    if (r != VK_SUCCESS) return status_of(vd, r);
    vd->spending[k] = true;
    return TD_OK;
}

/* Wait for staging slot k's submitted copy, if any. */
static td_status stage_wait(vk_device *vd, int k)
{
    if (!vd->spending[k]) return TD_OK;
    vd->spending[k] = false;
    VkResult r = vkWaitForFences(vd->dev, 1, &vd->sfence[k], VK_TRUE, UINT64_MAX);
    VkResult r2 = vkResetFences(vd->dev, 1, &vd->sfence[k]);
    if (r == VK_SUCCESS) r = r2;
    return r == VK_SUCCESS ? TD_OK : status_of(vd, r);
}

/* Bytes of chunk i of a staged transfer of nbytes. */
static size_t chunk_len(const vk_device *vd, size_t nbytes, size_t i)
{
    const size_t done = i * (size_t)vd->ssize;
    return nbytes - done < vd->ssize ? nbytes - done : (size_t)vd->ssize;
}

/* Where a write's bytes come from: fill(arg, off, to, len) copies source bytes
 * [off, off + len) to `to` (backend.h, buffer_write_fill); from_host is plain memory's. */
typedef td_status (*vk_fill_fn)(void *arg, size_t off, void *to, size_t len);

static td_status from_host(void *arg, size_t off, void *to, size_t len)
{
    memcpy(to, (const char *)arg + off, len);
    return TD_OK;
}

/* A transfer through the two staging slots in chunks of ssize bytes, double-buffered: a
 * write fills slot i % 2 (from fill, arg) while the other slot's copy runs; a read submits
 * chunk i + 1's copy before it copies chunk i out to host. Both slots are idle when it
 * returns. */
static td_status staged_transfer(vk_device *vd, vk_block *b, uint64_t off, char *host,
                                 size_t nbytes, bool to_device, vk_fill_fn fill, void *arg)
{
    const size_t cs = (size_t)vd->ssize, nchunks = (nbytes + cs - 1) / cs;
    td_status s = TD_OK;
    if (to_device) {
        for (size_t i = 0; i < nchunks && s == TD_OK; i++) {
            const int k = (int)(i & 1);
            s = stage_wait(vd, k);
            if (s == TD_OK) s = fill(arg, i * cs, vd->smap[k], chunk_len(vd, nbytes, i));
            if (s != TD_OK) break;
            s = stage_submit(vd, k, b, off + i * cs, chunk_len(vd, nbytes, i), true);
        }
    } else {
        s = stage_submit(vd, 0, b, off, chunk_len(vd, nbytes, 0), false);
        for (size_t i = 0; i < nchunks && s == TD_OK; i++) {
            const int k = (int)(i & 1);
            if (i + 1 < nchunks)
                s = stage_submit(vd, k ^ 1, b, off + (i + 1) * cs, chunk_len(vd, nbytes, i + 1),
                                 false);
            if (s == TD_OK) s = stage_wait(vd, k);
            if (s == TD_OK) memcpy(host + i * cs, vd->smap[k], chunk_len(vd, nbytes, i));
        }
    }
    const td_status s0 = stage_wait(vd, 0), s1 = stage_wait(vd, 1);
    return s != TD_OK ? s : s0 != TD_OK ? s0 : s1;
}

/* A read into host (fill NULL), or a write whose bytes fill produces (host unused). */
static td_status transfer(vk_device *vd, uint64_t ptr, void *host, size_t nbytes, bool to_device,
                          vk_fill_fn fill, void *arg)
{
    if (nbytes == 0) return TD_OK;
    char err[128];
    td_status s = td__vk_flush(vd, err, sizeof err); /* recorded work first, in order */
    if (s != TD_OK) return s;
    uint64_t off;
    vk_block *b = block_of(vd, ptr, &off);
    if (b == NULL || off + nbytes > b->size) return TD_EINTERNAL;
    if (vd->mapped) {
        if (to_device) return fill(arg, 0, (char *)b->map + off, nbytes);
        memcpy(host, (char *)b->map + off, nbytes);
        return TD_OK;
    }
    return staged_transfer(vd, b, off, host, nbytes, to_device, fill, arg);
}

td_status td__vk_read_locked(vk_device *vd, const void *src, void *dst, size_t nbytes)
{
    return transfer(vd, (uint64_t)(uintptr_t)src, dst, nbytes, false, NULL, NULL);
}

static td_status vk_buffer_write(td__device *dev, void *stream, void *dst, size_t offset,
                                 const void *src, size_t nbytes)
{
    vk_device *vd = dev->impl;
    (void)stream;
    pthread_mutex_lock(&vd->mu);
    td_status s = transfer(vd, (uint64_t)(uintptr_t)dst + offset, NULL, nbytes, true, from_host,
                           (void *)(uintptr_t)src);
    pthread_mutex_unlock(&vd->mu);
    return s;
}

/* buffer_write_fill: the pieces go straight into the mapped tensor or the staging slots,
 * one host copy for a payload received in slices. */
static td_status vk_buffer_write_fill(td__device *dev, void *stream, void *dst, size_t offset,
                                      size_t nbytes, vk_fill_fn fill, void *arg)
{
    vk_device *vd = dev->impl;
    (void)stream;
    pthread_mutex_lock(&vd->mu);
    td_status s = transfer(vd, (uint64_t)(uintptr_t)dst + offset, NULL, nbytes, true, fill, arg);
    pthread_mutex_unlock(&vd->mu);
    return s;
}

static td_status vk_buffer_read(td__device *dev, void *stream, const void *src, size_t offset,
                                void *dst, size_t nbytes)
{
    vk_device *vd = dev->impl;
    (void)stream;
    pthread_mutex_lock(&vd->mu);
    td_status s = transfer(vd, (uint64_t)(uintptr_t)src + offset, dst, nbytes, false, NULL, NULL);
    pthread_mutex_unlock(&vd->mu);
    return s;
}

static td_status vk_buffer_copy(td__device *dev, void *stream, void *dst, const void *src,
                                size_t nbytes)
{
    vk_device *vd = dev->impl;
    (void)stream;
    pthread_mutex_lock(&vd->mu);
    char err[128];
    uint64_t so = 0, dof = 0;
    vk_block *sb = block_of(vd, (uint64_t)(uintptr_t)src, &so);
    vk_block *db = block_of(vd, (uint64_t)(uintptr_t)dst, &dof);
    td_status s = sb == NULL || db == NULL ? TD_EINTERNAL : begin_recording(vd, err, sizeof err);
    if (s == TD_OK && nbytes > 0) {
        VkBufferCopy c = {.srcOffset = so, .dstOffset = dof, .size = nbytes};
        vkCmdCopyBuffer(vd->cb, sb->buf, db->buf, 1, &c);
        VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                              .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                              .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT};
        vkCmdPipelineBarrier(vd->cb, VK_PIPELINE_STAGE_TRANSFER_BIT,
                             VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
    }
    pthread_mutex_unlock(&vd->mu);
    return s;
}

/* ---- streams: tokens; all of a device's work is ordered in its one command buffer ---- */

static td_status vk_stream_create(td__device *dev, void **out)
{
    (void)dev;
    void *t = td__vk_calloc(1, 1);
    if (t == NULL) return TD_ENOMEM;
    *out = t;
    return TD_OK;
}

static void vk_stream_destroy(td__device *dev, void *stream)
{
    (void)dev;
    td__vk_free(stream);
}

static td_status vk_stream_sync(td__device *dev, void *stream)
{
    vk_device *vd = dev->impl;
    (void)stream;
    char err[128];
    pthread_mutex_lock(&vd->mu);
    td_status s = td__vk_flush(vd, err, sizeof err);
    pthread_mutex_unlock(&vd->mu);
    return s;
}

/* ---- TENSORD_VULKAN_PROFILE=1: where a Vulkan run's time goes, per op (a development aid) --
 * Each op is submitted and waited for on its own (what was recorded before it is flushed
 * first), so its device time is the wall time of its recording plus its submission: nothing
 * is batched any more and the run gets slower. At the module's unload or the process's
 * exit, one table on stderr: per opcode the count, total and mean milliseconds, sorted by
 * total. Off (one branch per op) otherwise. */
typedef struct prof_row {
    uint64_t n;
    double ms;
} prof_row;
static pthread_mutex_t g_prof_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_prof = -1; /* -1 unread, 0 off, 1 on */
static prof_row g_prof_op[TD_OPCODE_LIMIT];

static double prof_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int prof_cmp(const void *a, const void *b)
{
    const double x = g_prof_op[*(const int *)a].ms, y = g_prof_op[*(const int *)b].ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void prof_report(void)
{
    pthread_mutex_lock(&g_prof_mu);
    int idx[TD_OPCODE_LIMIT], k = 0;
    double total = 0;
    for (int i = 0; i < TD_OPCODE_LIMIT; i++)
        if (g_prof_op[i].n > 0) {
            idx[k++] = i;
            total += g_prof_op[i].ms;
        }
    qsort(idx, (size_t)k, sizeof idx[0], prof_cmp);
    fprintf(stderr, "tensord vulkan profile: %.1f ms in ops, %llu tensor vkAllocateMemory "
            "calls\n", total, (unsigned long long)__atomic_load_n(&g_nallocs, __ATOMIC_RELAXED));
    fprintf(stderr, "  %-26s %9s %11s %7s %10s\n", "op", "count", "ms", "%", "us/op");
    for (int j = 0; j < k; j++) {
        const prof_row *r = &g_prof_op[idx[j]];
        fprintf(stderr, "  %-26s %9llu %11.2f %6.1f%% %10.1f\n", td__op_name((uint32_t)idx[j]),
                (unsigned long long)r->n, r->ms, total > 0 ? 100 * r->ms / total : 0,
                1e3 * r->ms / (double)r->n);
    }
    pthread_mutex_unlock(&g_prof_mu);
}

static bool prof_on(void)
{
    if (__atomic_load_n(&g_prof, __ATOMIC_ACQUIRE) >= 0) return g_prof == 1;
    pthread_mutex_lock(&g_prof_mu);
    if (g_prof < 0) {
        const char *e = getenv("TENSORD_VULKAN_PROFILE");
        const int on = e != NULL && e[0] != '\0' && strcmp(e, "0") != 0;
        if (on) atexit(prof_report); /* in a module: at its dlclose, or at exit */
        __atomic_store_n(&g_prof, on, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g_prof_mu);
    return g_prof == 1;
}

static td_status vk_exec_entry(td__device *dev, void *stream, const td__op *op, const td__view *in,
                               const td__view *out, char *err, size_t errlen)
{
    vk_device *vd = dev->impl;
    (void)stream;
    pthread_mutex_lock(&vd->mu);
    td_status s;
    if (!prof_on() || op->opcode >= TD_OPCODE_LIMIT) {
        s = td__vk_exec(vd, op, in, out, err, errlen);
    } else if ((s = td__vk_flush(vd, err, errlen)) == TD_OK) {
        const double t0 = prof_now_ms();
        s = td__vk_exec(vd, op, in, out, err, errlen);
        if (s == TD_OK) s = td__vk_flush(vd, err, errlen);
        const double dt = prof_now_ms() - t0;
        pthread_mutex_lock(&g_prof_mu);
        g_prof_op[op->opcode].n++;
        g_prof_op[op->opcode].ms += dt;
        pthread_mutex_unlock(&g_prof_mu);
    }
    pthread_mutex_unlock(&vd->mu);
    return s;
}

static const td__backend vk_backend = {
    .kind = "vulkan",
    .host_memory = false,
    .device_count = vk_device_count,
    .device_open = vk_device_open,
    .device_close = vk_device_close,
    .memory_info = vk_memory_info,
    .buffer_alloc = vk_buffer_alloc,
    .buffer_free = vk_buffer_free,
    .buffer_write = vk_buffer_write,
    .buffer_write_fill = vk_buffer_write_fill,
    .buffer_read = vk_buffer_read,
    .buffer_copy = vk_buffer_copy,
    .stream_create = vk_stream_create,
    .stream_destroy = vk_stream_destroy,
    .stream_sync = vk_stream_sync,
    .supports_op = td__vk_supports_op,
    .exec = vk_exec_entry,
    .set_host_alloc = vk_set_host_alloc,
    .set_log = vk_set_log,
};

TD_BACKEND_MODULE(vk_backend)
