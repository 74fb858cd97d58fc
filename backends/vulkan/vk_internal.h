/* vk_internal.h — what the Vulkan backend's files share: the device record, the device
 * "pointers" the engine sees, the recording of dispatches, and the parameter block layout
 * its shaders read (shaders/common.glsl mirrors the VK_P_* word indexes).
 *
 * Device pointers: the engine treats buffer pointers as opaque but offsets them by bytes
 * (it runs long ops in slices, engine/session.c), so a pointer here is a number, not an
 * address: (block id << VK_PTR_SHIFT) + byte offset inside that block's VkBuffer. Adding a
 * byte offset stays inside the block, and vk_resolve() turns any such value back into a
 * (VkBuffer, offset) pair.
 *
 * Thread-safety: every entry takes the device's mutex (mu) for its whole body, so recording,
 * submission, the allocator and the pipeline table are used by one thread at a time; the
 * engine's streams share the device's one recording command buffer (vk_device.c says why).
 */
#ifndef TD_BACKENDS_VULKAN_VK_INTERNAL_H
#define TD_BACKENDS_VULKAN_VK_INTERNAL_H

#include "backends/backend.h"
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <vulkan/vulkan.h>

#define VK_PTR_SHIFT 40
#define VK_ALIGN 256u              /* every sub-allocation starts on this many bytes */
#define VK_MAX_BINDINGS 7          /* params + output + five inputs (BATCH_NORM's) */
#define VK_PARAM_WORDS 128         /* uint32 words of one dispatch's parameter block */
#define VK_PARAM_RING (4u << 20)   /* bytes of parameter blocks per submission */
#define VK_PIPE_SLOTS 4096         /* pipeline table (open addressing) */

/* Parameter words (shaders/common.glsl). */
enum {
    VK_P_N = 0,
    VK_P_RANK = 1,
    VK_P_DIMS = 2,
    VK_P_STR_O = 10,
    VK_P_STR_A = 18,
    VK_P_STR_B = 26,
    VK_P_STR_C = 34,
    VK_P_BASE = 42, /* one element offset per argument: output + five inputs */
    VK_P_F = 48,    /* TD_OP_MAX_FATTRS doubles */
    VK_P_SEED = 56,
    VK_P_I = 58,    /* the shader's own words from here */
    VK_P_SKEW_A = 127, /* ew.comp: element offset added to input a's start (a walk with
                        * negative strides binds a from the lowest element it reads) */
};

typedef struct vk_range {
    uint64_t off, len;
} vk_range;

/* One VkDeviceMemory with its VkBuffer: a sub-allocated block, or a dedicated one for a
 * single large buffer. */
typedef struct vk_block {
    VkDeviceMemory mem;
    VkBuffer buf;
    void *map; /* host address when the memory is host-visible, else NULL */
    uint64_t size;
    bool dedicated;
    vk_range *free; /* sorted by offset, coalesced */
    uint32_t nfree, capfree;
} vk_block;

typedef struct vk_pipe {
    uint32_t shader, op; /* key; shader == UINT32_MAX: empty slot */
    VkPipeline pipe;
} vk_pipe;

typedef struct vk_device {
    pthread_mutex_t mu;
    VkPhysicalDevice phys;
    VkDevice dev;
    VkQueue queue;
    uint32_t qfamily;
    /* limits and features */
    uint64_t max_range;     /* maxStorageBufferRange */
    uint64_t max_alloc;     /* maxMemoryAllocationSize */
    uint64_t block_size;    /* sub-allocated block size */
    uint64_t heap_size;
    bool f64, i64, i8, s8, s16, f16;
    bool cpu_impl;          /* VK_PHYSICAL_DEVICE_TYPE_CPU (lavapipe) */
    bool denorm_preserve;   /* shaderDenormPreserveFloat32: shaders keep their DenormPreserve */
    bool nan_preserve;      /* shaderSignedZeroInfNanPreserveFloat32: and their
                             * SignedZeroInfNanPreserve */
    const char *coop_shape; /* matmul_coop.comp's cooperative matrix shape on this device
                             * ("16x16x16", vk_device.c's coop_pick); NULL: none */
    /* memory */
    uint32_t mem_type;      /* for tensors */
    bool mapped;            /* tensor memory is host-visible and coherent: memcpy transfers */
    uint32_t host_type;     /* host-visible coherent type: the parameter ring */
    uint32_t stage_type;    /* host-visible coherent, cached where the device has it: staging */
    vk_block **blocks;      /* by id - 1 */
    uint32_t nblocks, capblocks;
    uint64_t bytes_used;    /* tensors' bytes (a dedicated block counts its whole size) */
    /* freed dedicated blocks kept for reuse by size class (vk_device.c, "large
     * allocations"): oldest first, cache_bytes in all, at most cache_cap */
    vk_block **cache;
    uint32_t ncache, capcache;
    uint64_t cache_bytes, cache_cap;
    uint64_t dev_bytes;     /* bytes of every tensor VkDeviceMemory held, cache included */
    uint64_t test_cap;      /* TENSORD_TEST_VULKAN_MEMORY_CAP: a tensor vkAllocateMemory
                             * past dev_bytes + size > test_cap fails as out of device
                             * memory (0: no cap) */
    uint64_t nallocs;       /* vkAllocateMemory calls for tensor blocks so far */
    /* deferred frees: buffers freed while recorded work may still read them */
    uint64_t *zombie;
    size_t *zombie_len;
    uint32_t nzombie, capzombie;
    /* recording */
    VkCommandPool pool;
    VkCommandBuffer cb;
    VkFence fence;
    bool recording;
    uint32_t recorded; /* dispatches in the open command buffer */
    bool lost;         /* the device reported VK_ERROR_DEVICE_LOST: every later call fails */
    /* parameter ring (host-visible, mapped) */
    VkBuffer pbuf;
    VkDeviceMemory pmem;
    uint32_t *pmap;
    uint32_t pused; /* bytes */
    /* staging for devices whose tensors are not mapped: two slots of ssize bytes, each with
     * its command buffer and fence, so one chunk's memcpy overlaps the other's copy */
    VkBuffer sbuf[2];
    VkDeviceMemory smem[2];
    void *smap[2];
    VkCommandBuffer scb[2];
    VkFence sfence[2];
    bool spending[2]; /* the slot's copy is submitted and not yet waited for */
    uint64_t ssize;
    /* pipelines */
    VkDescriptorSetLayout dsl;
    VkPipelineLayout layout;
    VkShaderModule *modules; /* by shader index, created on first use */
    vk_pipe pipes[VK_PIPE_SLOTS];
    VkPipelineCache pcache; /* vk_pcache.c; VK_NULL_HANDLE: none */
    bool pcache_dirty;      /* pipelines were created since it was loaded or saved */
    double pcache_saved_s;  /* CLOCK_MONOTONIC seconds of the last save */
    PFN_vkCmdPushDescriptorSetKHR push_descriptor;
    int index;
} vk_device;

/* A tensor as a dispatch argument: its view and its element size. */
typedef struct vk_arg {
    const void *data; /* device pointer (the encoding above) */
    size_t nbytes;
    size_t esize;
} vk_arg;

/* Element count and byte size of a validated desc (td__desc_nelem/nbytes are engine
 * symbols, which a module may not call). */
static inline int64_t td__vk_nelem(const td__desc *d)
{
    int64_t n = 1;
    for (uint32_t i = 0; i < d->rank; i++) n *= d->dims[i];
    return n;
}
static inline size_t td__vk_nbytes(const td__desc *d)
{
    return (size_t)td__vk_nelem(d) * td__dtype_size(d->dtype);
}

/* ---- vk_device.c ---- */
/* Host memory through the engine's hooks (backend.h). */
void *td__vk_calloc(size_t count, size_t size);
void td__vk_free(void *p);
/* Format a message into err and return s. */
td_status td__vk_fail(char *err, size_t errlen, td_status s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Record one dispatch of shader `name` specialized to `op`: params (VK_PARAM_WORDS words,
 * VK_P_BASE.. filled here with each argument's element offset), args[0] the output, then the
 * inputs; groups x/y/z workgroups. Locked by the caller (exec holds mu). */
td_status td__vk_dispatch(vk_device *vd, const char *name, uint32_t op, uint32_t *params,
                          const vk_arg *args, int nargs, uint32_t gx, uint32_t gy, uint32_t gz,
                          char *err, size_t errlen);
/* Submit what is recorded and wait for it (locked). */
td_status td__vk_flush(vk_device *vd, char *err, size_t errlen);
/* Read nbytes at device pointer src into dst (locked; flushes first). */
td_status td__vk_read_locked(vk_device *vd, const void *src, void *dst, size_t nbytes);
/* Device memory for an op's scratch (locked; the caller holds mu): a device pointer of
 * nbytes, TD_ENOMEM or TD_EDEVICE. Release it with td__vk_release_locked, which defers the
 * free past the recorded work that may still use it. */
td_status td__vk_alloc_locked(vk_device *vd, size_t nbytes, void **out);
void td__vk_release_locked(vk_device *vd, void *data, size_t nbytes);
/* Whether a shader variant of this name is built into the module. */
bool td__vk_has_shader(const char *name);

/* One log line through the engine's logger (backend.h set_log; level 0 debug .. 3 error). */
void td__vk_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- vk_pcache.c ---- */
/* Create vd->pcache from the device's cache file (or empty); never fails the device. */
void td__vk_pcache_open(vk_device *vd);
/* Save the cache file now if pipelines were made since the last save. */
void td__vk_pcache_save(vk_device *vd);
/* After a completed submission: save if pipelines were made and the last save is old. */
void td__vk_pcache_flushed(vk_device *vd);
/* Save as td__vk_pcache_save, and destroy the cache. */
void td__vk_pcache_close(vk_device *vd);

/* ---- vk_ops.c ---- */
bool td__vk_supports_op(td__device *dev, const td__op *op, const td__desc *const *in,
                        const td__desc *out);
td_status td__vk_exec(vk_device *vd, const td__op *op, const td__view *in, const td__view *out,
                      char *err, size_t errlen);

/* What the op files share. */
/* The dtype's name in shader variant names ("f32", "bf16", ...); NULL for none. */
const char *td__vk_dtype_name(uint32_t dt);
/* The strided copy (ew.comp's m_<element size>) of `shape`: st[0] the output's strides, st[1]
 * the input's, in elements; o and a the bindings (locked). */
td_status td__vk_copy_walk(vk_device *vd, const td__desc *shape, int64_t (*st)[TD_MAX_RANK],
                           vk_arg o, vk_arg a, char *err, size_t errlen);

/* FULL's value v as the dtype's bits, by the cast rules (backends/cpu/cpu_internal.h). */
uint64_t td__vk_full_bits(uint32_t dt, double v);
/* Walk `shape` (rank <= 8; dims as given, not necessarily an op's output) with nstr stride
 * sets in elements (0 the output, then a, b, c), collapsed first; args[0] the output; op
 * (NULL: none) gives the float attributes and the seed; extra (NULL: zeros) the shader's
 * own words from VK_P_I on (ew.comp; locked). */
td_status td__vk_walk(vk_device *vd, const char *shader, uint32_t opcode, const td__desc *shape,
                      int nstr, int64_t (*str)[TD_MAX_RANK], const vk_arg *args, int nargs,
                      const td__op *op, const uint32_t *extra, char *err, size_t errlen);

/* Double attribute k into the parameter block's float words. */
static inline void td__vk_put_double(uint32_t *p, int k, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    p[VK_P_F + 2 * k] = (uint32_t)u;
    p[VK_P_F + 2 * k + 1] = (uint32_t)(u >> 32);
}

/* The arithmetic kind in variant names: the dtype's name, u8 for bool. */
static inline const char *td__vk_kind_sfx(uint32_t dt)
{
    return dt == TD_BOOL ? "u8" : td__vk_dtype_name(dt);
}

/* A tensor view as a dispatch argument. */
static inline vk_arg td__vk_arg_of(const td__view *v)
{
    return (vk_arg){v->data, td__vk_nbytes(&v->desc), td__dtype_size(v->desc.dtype)};
}

/* Workgroups for n invocations, `per` a workgroup: 1 to 65535 (the shaders grid-stride past
 * the dispatch limit). */
static inline uint32_t td__vk_groups_for(uint64_t n, uint32_t per)
{
    uint64_t g = (n + per - 1) / per;
    return g == 0 ? 1 : g > 65535 ? 65535 : (uint32_t)g;
}

/* lavapipe (gallivm) ends an invocation's loops after 65535 iterations in all: on a CPU
 * implementation an op whose invocations would loop longer is refused rather than left to
 * come out wrong (a reduction folds ceil(n / 256) elements per invocation and pass, a
 * matmul K, a normalisation up to four passes over its group). GPUs have no such cap. */
static inline bool td__vk_loops_ok(const vk_device *vd, int64_t iterations)
{
    return !vd->cpu_impl || iterations <= 60000;
}

/* lavapipe runs a workgroup in ~0.04-0.5 ms whatever it does (its 256 invocations and their
 * barriers): a shader with one workgroup per output (stats.comp, nn.comp, reduce.comp's
 * mode 0) over a million outputs ran for minutes, holding the device. A CPU implementation
 * refuses such a dispatch above VK_CPU_MAX_GROUPS workgroups (at most ~30 s); the work inside
 * the workgroups is bounded by the binding limit (maxStorageBufferRange) and loops_ok. */
#define VK_CPU_MAX_GROUPS 65536
static inline bool td__vk_groups_ok(const vk_device *vd, int64_t groups)
{
    return !vd->cpu_impl || groups <= VK_CPU_MAX_GROUPS;
}

/* Split reductions (reduce.comp's modes 1 and 2, vk_reduce.c): a reduction with at most
 * VK_RED_SPLIT_OUTS outputs, each folding more than VK_RED_CHUNK elements, cuts each
 * output's elements into this many chunks of consecutive elements, one workgroup each,
 * then folds the chunks' partials in order; 0: no split (one workgroup per output). A
 * function of the reduced length alone — never of the device — so the association, and so
 * the bits, depend on the shape only. */
#define VK_RED_CHUNK 65536
#define VK_RED_SPLIT_OUTS 256
#define VK_RED_MAX_CHUNKS 4096
static inline uint32_t td__vk_reduce_chunks(int64_t nout, int64_t rcount)
{
    if (nout > VK_RED_SPLIT_OUTS || rcount <= VK_RED_CHUNK) return 0;
    const int64_t g = (rcount + VK_RED_CHUNK - 1) / VK_RED_CHUNK;
    return g > VK_RED_MAX_CHUNKS ? VK_RED_MAX_CHUNKS : (uint32_t)g;
}

/* Reductions with many outputs and a short reduced extent run one invocation per output
 * (reduce.comp's mode 3, the same association as mode 0, so the same bits): rcount up to
 * VK_RED_FLAT, or on a CPU implementation (lavapipe, where a workgroup costs ~0.1-0.5 ms
 * whatever it does) up to VK_RED_FLAT_CPU when there are more outputs than one workgroup. */
#define VK_RED_FLAT 256
#define VK_RED_FLAT_CPU 8192
static inline bool td__vk_reduce_flat(const vk_device *vd, int64_t nout, int64_t rcount)
{
    if (td__vk_reduce_chunks(nout, rcount) != 0) return false;
    return rcount <= VK_RED_FLAT || (vd->cpu_impl && nout > 256 && rcount <= VK_RED_FLAT_CPU);
}

/* The longest loop of one reduce.comp invocation for these outputs (lavapipe's cap,
 * td__vk_loops_ok): mode 3 loops over its grid-strided outputs' elements. */
static inline int64_t td__vk_reduce_iters(const vk_device *vd, int64_t nout, int64_t rcount)
{
    if (td__vk_reduce_flat(vd, nout, rcount)) {
        const int64_t per = (nout + (int64_t)65535 * 256 - 1) / ((int64_t)65535 * 256);
        return per * (rcount > 0 ? rcount : 1);
    }
    const int64_t g = td__vk_reduce_chunks(nout, rcount);
    if (g == 0) return (rcount + 255) / 256;
    const int64_t l = (rcount + g - 1) / g, i1 = (l + 255) / 256, i2 = (g + 255) / 256;
    return i1 > i2 ? i1 : i2;
}

/* The matmul_coop.comp variant (f16 inputs on cooperative matrices, 128 x 128 blocks) with
 * f16 outputs, or f32 ones (f32_out: the convolutions' intermediates), into name; false
 * where the device has none (then matmul.comp). */
static inline bool td__vk_coop_name(const vk_device *vd, bool f32_out, char *name, size_t len)
{
    if (vd->coop_shape == NULL) return false;
    snprintf(name, len, "mx_f16_%s%s", f32_out ? "f32_" : "", vd->coop_shape);
    return true;
}

/* ---- vk_reduce.c: reductions and stats, scans, sorts (and RANDPERM) ---- */
td_status td__vk_exec_reduce(vk_device *vd, const td__op *op, const td__view *in,
                             const td__view *out, char *err, size_t errlen);
td_status td__vk_exec_scan(vk_device *vd, const td__op *op, const td__view *in,
                           const td__view *out, char *err, size_t errlen);
td_status td__vk_exec_sort(vk_device *vd, const td__op *op, const td__view *in,
                           const td__view *out, char *err, size_t errlen);

/* ---- vk_movement.c ---- */
td_status td__vk_exec_movement(vk_device *vd, const td__op *op, const td__view *in,
                               const td__view *out, char *err, size_t errlen);

/* ---- vk_window.c ---- */
/* The POOL and CONV families (window.comp; the convolutions as im2col + GEMM, conv.comp and
 * matmul.comp, where their scratch fits). */
td_status td__vk_exec_window(vk_device *vd, const td__op *op, const td__view *in,
                             const td__view *out, char *err, size_t errlen);
/* Whether every invocation of the shaders the op will run stays within lavapipe's loop cap
 * (always true on a GPU); *iters the direct shader's count when it does not (for the log). */
bool td__vk_window_loops_ok(const vk_device *vd, const td__op *op, const td__desc *const *in,
                            const td__desc *out, int64_t *iters);

/* ---- vk_shaders.c (generated from the variant list in meson.build) ---- */
typedef struct vk_shader {
    const char *name;
    const uint32_t *code;
    size_t nbytes;
} vk_shader;
extern const vk_shader td__vk_shaders[];
extern const size_t td__vk_nshaders;
#endif
