/* gpu_backend.c — the GPU backends' vtable and the module's exported symbols,
 * td_backend_abi() and td_backend_entry() (backends/backend.h). Built twice from this one
 * file: as tensord-backend-cuda.so (devices
 * "cuda:0", ...) and, with TD_GPU_HIP, as tensord-backend-hip.so ("hip:0", ...); the
 * runtime calls below are gpu_compat.h names. Devices are every GPU the runtime
 * enumerates; buffers are device memory (host_memory = false); each session gets its own
 * stream, created non-blocking, so the streams of sessions served by different worker
 * threads (tensord --device-workers) run their kernels and copies concurrently: nothing
 * orders two sessions' streams except the memory pool's own dependencies (below).
 *
 * Ordering: every buffer entry gets the stream of the session the buffer belongs to
 * (backend.h, "Streams and memory ordering"), and the engine uses a buffer only on that
 * stream, so each entry orders its work on that stream alone: allocations
 * (cudaMallocFromPoolAsync), frees (cudaFreeAsync), transfers and kernels of a session
 * follow one another in the session's order and wait for no other session. A call without a
 * stream (none comes from the engine for this backend; tests, or a future caller outside
 * a session) is made safe against every stream: an allocation waits until it has completed,
 * a free and a transfer first wait for the whole device (cudaDeviceSynchronize).
 *
 * Memory: every buffer comes from a per-device stream-ordered pool (cudaMallocFromPoolAsync)
 * whose release threshold is unlimited, so memory freed by one step is reused by the next
 * and steady-state training steps make no cudaMalloc calls. The pool keeps CUDA's default
 * reuse policies (cudaMemPoolReuseFollowEventDependencies, ...AllowOpportunistic and
 * ...AllowInternalDependencies, all enabled): memory freed on session A's stream is handed
 * to an allocation on session B's stream only when B already depends on the free, when the
 * free has completed on the device, or after the runtime has made B's stream wait for the
 * free; in every case B's use of the memory comes after the free, and the free after A's
 * last use of it (A's stream order). That is what this backend relies on from CUDA (and
 * HIP, whose pools have the same attributes and defaults). The price is that such an
 * inserted dependency may make B wait for A's progress up to the free; it never changes a
 * value. An allocation that fails is retried once after synchronising the device and
 * trimming the pool; then it is TD_ENOMEM (RESOURCE_EXHAUSTED on the wire) and the session
 * goes on.
 *
 * Transfers: from or into a range pinned by host_pin (td_host_alloc buffers of a local
 * context, a same-host session's shared-memory region), one cudaMemcpyAsync straight
 * between it and the device, waited for. Otherwise, for a read below TD_GPU_STAGE_MIN
 * bytes, a write of that size with no session stream, or when no staging pair is free, a
 * cudaMemcpyAsync from or to the caller's (pageable) memory on the session's stream,
 * followed by a wait for that stream (the runtime stages pageable memory itself, at about a
 * sixth of the pinned rate on the H200 host, and the caller's memory is only known to be
 * free after the wait; it waits for the session's own earlier work, never another's).
 * Otherwise through one of the device's pinned staging pairs (gpu_internal.h), chunk by
 * chunk on the session's stream: a write copies chunk i into one buffer of the pair while
 * the DMA engine moves chunk i - 1 out of the other (cudaMemcpyAsync, an event recorded
 * after it); before the CPU refills a buffer it waits for that buffer's event. A write
 * returns once its last chunk is queued: the session's later kernels follow its copies in
 * stream order, the caller's memory is no longer needed, and the next user of the pair
 * waits on the events before it overwrites a buffer, so a pair can be handed on with a copy
 * in flight: a reader's stream first waits for both of the pair's events
 * (cudaStreamWaitEvent in stage_acquire), so its DMA into a buffer comes after the
 * previous user's DMA out of it, whichever stream that was on, and a writer's CPU waits on
 * the events before refilling a buffer. Pairs are taken in turn, and a write of several
 * chunks takes a pair per two, so back-to-back writes (a batch's wire chunks) queue up to
 * 2 * stage_sets chunks behind the session's kernels before the CPU waits. A read queues
 * chunk i + 1 into one buffer and copies chunk i out of the other once its event has
 * completed; it returns when the last chunk is in the caller's memory. A transfer of
 * TD_GPU_STAGE_SPLIT_MIN bytes or more takes
 * up to stage_sets pairs and splits into contiguous parts copied by as many threads
 * (made for the call and joined before it returns), because one core's memcpy is the bound
 * (staged_copy below); all parts queue on the transfer's one stream.
 * A pair is held by one transfer at a time (busy, under stage_mu), so concurrent sessions
 * never share buffers; the bytes a device pins are bounded by stage_sets pairs,
 * whatever the number of sessions. An error of a queued copy is reported by the event wait
 * that follows it (a later transfer's, when it was a write's last chunk) like any
 * asynchronous kernel fault.
 *
 * Errors: every runtime/cuBLAS error becomes a td_status with a message naming the step;
 * nothing aborts. A kernel fault poisons the CUDA context (later calls keep failing with
 * TD_EDEVICE); that is the runtime's rule, not ours.
 *
 * Thread-safety: every entry takes the device as current on the calling thread and uses
 * only thread-safe runtime calls; several worker threads call in at once, each for its own
 * sessions' streams, and the entries for one stream come from one thread at a time. The
 * staging pairs are shared under stage_mu; each stream's cuBLAS handle is its own.
 */
#include "backends/gpu/gpu_internal.h"
#include "common/errbuf.h"
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* In gpu_create.cu: whether this module's kernels can run on the current device. */
gpuError_t td__gpu_probe(void);

/* ---- host memory: the engine's allocation hooks, handed over at load (backend.h) ---- */

static td__alloc_hooks g_host = {malloc, calloc, realloc, free}; /* until set_host_alloc */

static void gpu_set_host_alloc(const td__alloc_hooks *hooks)
{
    if (hooks != NULL && hooks->malloc_fn != NULL && hooks->calloc_fn != NULL &&
        hooks->realloc_fn != NULL && hooks->free_fn != NULL)
        g_host = *hooks;
}

void *td__gpu_host_calloc(size_t count, size_t size) { return g_host.calloc_fn(count, size); }
void td__gpu_host_free(void *p)
{
    if (p != NULL) g_host.free_fn(p);
}

td_status td__gpu_fail(const td__gpu_exec *x, td_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    td__verrf(x->err, x->errlen, fmt, ap);
    va_end(ap);
    return s;
}

static td_status status_of(gpuError_t e)
{
    return e == gpuErrorMemoryAllocation ? TD_ENOMEM : TD_EDEVICE;
}

td_status td__gpu_check(const td__gpu_exec *x, gpuError_t e, const char *what)
{
    if (e == gpuSuccess) return TD_OK;
    gpuGetLastError();
    return td__gpu_fail(x, status_of(e), TD_GPU_KIND ": %s: %s: %s", what, gpuGetErrorName(e),
                         gpuGetErrorString(e));
}

td_status td__gpu_launched(const td__gpu_exec *x, const char *what)
{
    return td__gpu_check(x, gpuGetLastError(), what);
}

td_status td__gpu_temp_alloc(const td__gpu_exec *x, size_t nbytes, void **out)
{
    void *p = NULL;
    gpuError_t e = gpuMallocFromPoolAsync(&p, nbytes, x->cd->pool, x->st->s);
    if (e != gpuSuccess) {
        gpuGetLastError();
        return td__gpu_fail(x, status_of(e),
                            TD_GPU_KIND ": cannot allocate %zu bytes of scratch: %s", nbytes,
                            gpuGetErrorString(e));
    }
    *out = p;
    return TD_OK;
}

void td__gpu_temp_free(const td__gpu_exec *x, void *p)
{
    if (p != NULL && gpuFreeAsync(p, x->st->s) != gpuSuccess) gpuGetLastError();
}

td_status td__gpu_read_flag(const td__gpu_exec *x, uint64_t *out)
{
    td__gpu_stream *st = x->st;
    td_status s = td__gpu_check(x, gpuMemcpyAsync(st->host_word, st->flag, sizeof(uint64_t),
                                                   gpuMemcpyDeviceToHost, st->s),
                                 "flag read");
    if (s == TD_OK) s = td__gpu_check(x, gpuStreamSynchronize(st->s), "flag read");
    if (s == TD_OK) *out = *st->host_word;
    return s;
}

/* ---- devices ---- */

/* What the runtime said when it found no device: written once by gpu_device_count (the
 * engine counts each backend's devices once, under its init lock), read by
 * gpu_no_device_reason right after. */
static char g_no_device[160];

static td_status gpu_device_count(int *out)
{
    int n = 0;
    gpuError_t e = gpuGetDeviceCount(&n);
    g_no_device[0] = '\0';
    if (e != gpuSuccess) {
        /* no driver (cudaErrorInsufficientDriver), no device (hipErrorNoDevice): zero devices,
         * and the runtime's words for the log line */
        snprintf(g_no_device, sizeof g_no_device, "%s: %s (%d)", TD_GPU_COUNT_CALL,
                 gpuGetErrorString(e), (int)e);
        gpuGetLastError();
        n = 0;
    } else if (n == 0) {
        snprintf(g_no_device, sizeof g_no_device, "%s found none", TD_GPU_COUNT_CALL);
    }
    *out = n;
    return TD_OK;
}

static void gpu_no_device_reason(char *buf, size_t len)
{
    if (len > 0) snprintf(buf, len, "%s", g_no_device);
}

static td_status gpu_device_open(td__device *dev, int index, char *err, size_t errlen)
{
    gpuError_t e = gpuSetDevice(index);
    gpuDeviceProp prop;
    if (e == gpuSuccess) e = gpuGetDeviceProperties(&prop, index);
    if (e != gpuSuccess) {
        gpuGetLastError();
        td__errf(err, errlen, TD_GPU_KIND ":%d: %s", index, gpuGetErrorString(e));
        return TD_EDEVICE;
    }
    e = td__gpu_probe();
    if (e != gpuSuccess) {
        gpuGetLastError();
        td__errf(err, errlen,
                TD_GPU_KIND ":%d: %s (compute capability %d.%d) cannot run this module's kernels "
                "(%s); it is built for sm_90 and newer",
                index, prop.name, prop.major, prop.minor, gpuGetErrorString(e));
        return TD_EUNSUPPORTED;
    }
    td__gpu_device *cd = td__gpu_host_calloc(1, sizeof *cd);
    if (cd == NULL) {
        td__errf(err, errlen, TD_GPU_KIND ":%d: out of host memory", index);
        return TD_ENOMEM;
    }
    gpuMemPoolProps pp;
    memset(&pp, 0, sizeof pp);
    pp.allocType = gpuMemAllocationTypePinned;
    pp.handleTypes = gpuMemHandleTypeNone;
    pp.location.type = gpuMemLocationTypeDevice;
    pp.location.id = index;
    e = gpuMemPoolCreate(&cd->pool, &pp);
    if (e == gpuSuccess) {
        uint64_t keep = UINT64_MAX;
        e = gpuMemPoolSetAttribute(cd->pool, gpuMemPoolAttrReleaseThreshold, &keep);
        if (e != gpuSuccess) gpuMemPoolDestroy(cd->pool);
    }
    if (e != gpuSuccess) {
        gpuGetLastError();
        td__errf(err, errlen, TD_GPU_KIND ":%d: cannot create a memory pool: %s", index,
                gpuGetErrorString(e));
        td__gpu_host_free(cd);
        return TD_EDEVICE;
    }
    if (pthread_mutex_init(&cd->stage_mu, NULL) != 0) {
        gpuMemPoolDestroy(cd->pool);
        td__errf(err, errlen, TD_GPU_KIND ":%d: cannot create a mutex", index);
        td__gpu_host_free(cd);
        return TD_EDEVICE;
    }
    cd->ordinal = index;
    /* staging pairs (gpu_internal.h): TENSORD_GPU_STAGE_SETS, 1..TD_GPU_STAGE_SETS */
    const char *sets = getenv("TENSORD_GPU_STAGE_SETS");
    cd->stage_sets = sets != NULL ? atoi(sets) : TD_GPU_STAGE_SETS_DEFAULT;
    if (cd->stage_sets < 1 || cd->stage_sets > TD_GPU_STAGE_SETS)
        cd->stage_sets = TD_GPU_STAGE_SETS_DEFAULT;
    cd->sm_count = prop.multiProcessorCount;
    cd->total_bytes = prop.totalGlobalMem;
    dev->impl = cd;
#if defined(TD_GPU_HIP)
    snprintf(dev->description, sizeof dev->description, "%.32s, %llu GiB, %.16s, %d CUs",
             prop.name, (unsigned long long)(prop.totalGlobalMem >> 30), prop.gcnArchName,
             prop.multiProcessorCount);
#else
    snprintf(dev->description, sizeof dev->description, "%.60s, %.0f GiB, sm_%d%d, %d SMs",
             prop.name, (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), prop.major,
             prop.minor, prop.multiProcessorCount);
    /* the form nvidia-smi -L and NVIDIA's metrics exporter print, so series can be joined */
    const unsigned char *u = (const unsigned char *)prop.uuid.bytes;
    snprintf(dev->uuid, sizeof dev->uuid,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
             u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15]);
#endif
    return TD_OK;
}

static void stage_free_all(td__gpu_device *cd);

static void gpu_device_close(td__device *dev)
{
    td__gpu_device *cd = dev->impl;
    if (cd == NULL) return;
    if (gpuSetDevice(cd->ordinal) == gpuSuccess && gpuDeviceSynchronize() == gpuSuccess)
        gpuMemPoolDestroy(cd->pool);
    stage_free_all(cd);
    gpuGetLastError();
    pthread_mutex_destroy(&cd->stage_mu);
    td__gpu_host_free(cd);
    dev->impl = NULL;
}

static td_status gpu_memory_info(td__device *dev, uint64_t *total, uint64_t *free_bytes)
{
    td__gpu_device *cd = dev->impl;
    size_t f = 0, t = 0;
    if (gpuSetDevice(cd->ordinal) != gpuSuccess || gpuMemGetInfo(&f, &t) != gpuSuccess) {
        gpuGetLastError();
        return TD_EDEVICE;
    }
    /* memory the pool holds but no buffer uses is free for this process's buffers */
    uint64_t reserved = 0, used = 0;
    if (gpuMemPoolGetAttribute(cd->pool, gpuMemPoolAttrReservedMemCurrent, &reserved) ==
            gpuSuccess &&
        gpuMemPoolGetAttribute(cd->pool, gpuMemPoolAttrUsedMemCurrent, &used) == gpuSuccess &&
        reserved > used) {
        f += (size_t)(reserved - used);
    }
    gpuGetLastError();
    *total = t;
    *free_bytes = f < t ? f : t;
    return TD_OK;
}

/* The runtime stream a buffer entry orders its work on: the session's, else the legacy
 * stream (whose callers then synchronise as the header says). */
static gpuStream_t order_stream(void *stream)
{
    return stream != NULL ? ((td__gpu_stream *)stream)->s : gpuStreamLegacy;
}

static td_status gpu_buffer_alloc(td__device *dev, void *stream, size_t nbytes, void **out)
{
    td__gpu_device *cd = dev->impl;
    if (nbytes == 0 || nbytes > TD_MAX_TENSOR_BYTES) return TD_ENOMEM;
    if (gpuSetDevice(cd->ordinal) != gpuSuccess) {
        gpuGetLastError();
        return TD_EDEVICE;
    }
    const gpuStream_t s = order_stream(stream);
    void *p = NULL;
    gpuError_t e = gpuMallocFromPoolAsync(&p, nbytes, cd->pool, s);
    if (e == gpuErrorMemoryAllocation) {
        /* give back what the pool holds unused (after every stream's pending frees
         * complete) and retry */
        gpuGetLastError();
        if (nbytes < cd->total_bytes && gpuDeviceSynchronize() == gpuSuccess &&
            gpuMemPoolTrimTo(cd->pool, 0) == gpuSuccess)
            e = gpuMallocFromPoolAsync(&p, nbytes, cd->pool, s);
    }
    /* no session stream: wait until the allocation (and any dependency the pool gave it on
     * an earlier free) has completed, so work on any stream may use the memory */
    if (e == gpuSuccess && stream == NULL) e = gpuStreamSynchronize(s);
    if (e != gpuSuccess) {
        gpuGetLastError();
        return status_of(e);
    }
    *out = p;
    return TD_OK;
}

static void gpu_buffer_free(td__device *dev, void *stream, void *data, size_t nbytes)
{
    td__gpu_device *cd = dev->impl;
    (void)nbytes;
    if (gpuSetDevice(cd->ordinal) != gpuSuccess) {
        gpuGetLastError();
        return;
    }
    /* no session stream: any stream may still use it; wait for all of them */
    if (stream == NULL && gpuDeviceSynchronize() != gpuSuccess) gpuGetLastError();
    if (gpuFreeAsync(data, order_stream(stream)) != gpuSuccess) gpuGetLastError();
}

/* buffer_copy: one device-to-device copy queued on the session's stream (copy-on-write,
 * to_device on the same device, an upload candidate's copy); NULL stream: every stream's
 * work first, and the copy is finished when it returns. */
static td_status gpu_buffer_copy(td__device *dev, void *stream, void *dst, const void *src,
                                 size_t nbytes)
{
    td__gpu_device *cd = dev->impl;
    if (nbytes == 0) return TD_OK;
    gpuError_t e = gpuSetDevice(cd->ordinal);
    if (e == gpuSuccess && stream == NULL) e = gpuDeviceSynchronize();
    const gpuStream_t s = order_stream(stream);
    if (e == gpuSuccess) e = gpuMemcpyAsync(dst, src, nbytes, gpuMemcpyDeviceToDevice, s);
    if (e == gpuSuccess && stream == NULL) e = gpuStreamSynchronize(s);
    if (e != gpuSuccess) {
        gpuGetLastError();
        return TD_EDEVICE;
    }
    return TD_OK;
}

/* buffer_free_idle: nothing queued uses the buffer (the caller waited), so it goes back to
 * the pool on the legacy stream without waiting for the device. */
static void gpu_buffer_free_idle(td__device *dev, void *data, size_t nbytes)
{
    td__gpu_device *cd = dev->impl;
    (void)nbytes;
    if (gpuSetDevice(cd->ordinal) != gpuSuccess || gpuFreeAsync(data, gpuStreamLegacy) != gpuSuccess)
        gpuGetLastError();
}

/* fence_record (backend.h): an event recorded on the session's stream, created per fence
 * (~1 us; an upload candidate's device copy takes one). */
static td_status gpu_fence_record(td__device *dev, void *stream, void **out)
{
    td__gpu_device *cd = dev->impl;
    gpuEvent_t ev = NULL;
    gpuError_t e = gpuSetDevice(cd->ordinal);
    if (e == gpuSuccess) e = gpuEventCreateWithFlags(&ev, gpuEventDisableTiming);
    if (e == gpuSuccess) e = gpuEventRecord(ev, order_stream(stream));
    if (e != gpuSuccess) {
        gpuGetLastError();
        if (ev != NULL) gpuEventDestroy(ev);
        return TD_EDEVICE;
    }
    *out = (void *)ev;
    return TD_OK;
}

static td_status gpu_fence_finish(td__device *dev, void *fence)
{
    td__gpu_device *cd = dev->impl;
    gpuEvent_t ev = (gpuEvent_t)fence;
    gpuError_t e = gpuSetDevice(cd->ordinal);
    if (e == gpuSuccess) e = gpuEventSynchronize(ev);
    const gpuError_t d = gpuEventDestroy(ev);
    if (e == gpuSuccess) e = d;
    if (e != gpuSuccess) gpuGetLastError();
    return e == gpuSuccess ? TD_OK : TD_EDEVICE;
}

/* ---- transfers (the staging scheme: the header comment and gpu_internal.h) ---- */

static void stage_free_all(td__gpu_device *cd)
{
    for (int i = 0; i < cd->stage_sets; i++) {
        td__gpu_stage *g = &cd->stage[i];
        for (int k = 0; k < 2; k++) {
            if (g->done[k] != NULL) {
                gpuEventSynchronize(g->done[k]);
                gpuEventDestroy(g->done[k]);
            }
            if (g->buf[k] != NULL) gpuFreeHost(g->buf[k]);
            g->done[k] = NULL;
            g->buf[k] = NULL;
        }
    }
    gpuGetLastError();
}

static void stage_release(td__gpu_device *cd, td__gpu_stage *g)
{
    pthread_mutex_lock(&cd->stage_mu);
    g->busy = false;
    pthread_mutex_unlock(&cd->stage_mu);
}

/* Make every pair (under stage_mu, current device set); false: none (all freed again). */
static bool stage_make_all(td__gpu_device *cd)
{
    for (int i = 0; i < cd->stage_sets; i++) {
        td__gpu_stage *g = &cd->stage[i];
        for (int k = 0; k < 2; k++) {
            if (gpuMallocHost(&g->buf[k], TD_GPU_STAGE_BYTES) != gpuSuccess ||
                gpuEventCreateWithFlags(&g->done[k], gpuEventDisableTiming) != gpuSuccess) {
                stage_free_all(cd);
                return false;
            }
        }
    }
    return true;
}

/* A free pair, marked busy; NULL: take the pageable path (none free, or none could be
 * made). Pairs are taken in turn (stage_next), not the first free one: a write returns
 * with its DMA queued behind the session's earlier kernels, and the CPU refills a buffer
 * only once that DMA is done, so with one pair the third chunk of a run of writes (a
 * training batch arrives as 1 MiB wire chunks) waited for the whole stream to drain —
 * the worker stalled behind the previous step's kernels on every batch (BENCHMARKS.md,
 * H100 2026-12-06 20:05). In turn, 2 * stage_sets chunks are in flight before one waits.
 * For a read (`for_read`), stream s is made to wait for the last copies of the pair's
 * previous user (which may have been on another stream and still be in flight), so its
 * DMA into a buffer follows their DMA out of it. A write needs no such wait: its CPU
 * waits for a buffer's event before refilling it (staged_write), so it never makes one
 * session's stream wait for another's work. */
static td__gpu_stage *stage_acquire(td__gpu_device *cd, gpuStream_t s, bool for_read)
{
    td__gpu_stage *got = NULL;
    pthread_mutex_lock(&cd->stage_mu);
    if (cd->stage_ready == 0) cd->stage_ready = stage_make_all(cd) ? 1 : -1;
    for (int i = 0; cd->stage_ready == 1 && i < cd->stage_sets && got == NULL; i++) {
        const int k = (cd->stage_next + i) % cd->stage_sets;
        if (!cd->stage[k].busy) {
            got = &cd->stage[k];
            got->busy = true;
            cd->stage_next = (k + 1) % cd->stage_sets;
        }
    }
    pthread_mutex_unlock(&cd->stage_mu);
    /* an event never recorded counts as complete, so a fresh pair makes s wait for nothing */
    for (int k = 0; got != NULL && for_read && k < 2; k++) {
        if (gpuStreamWaitEvent(s, got->done[k], 0) != gpuSuccess) {
            gpuGetLastError();
            stage_release(cd, got);
            return NULL;
        }
    }
    return got;
}


/* Where a staged write's bytes come from (backend.h, buffer_write_fill): fill(arg, off,
 * to, len) copies source bytes [off, off + len) to `to`; from_host is plain memory's. */
typedef td_status (*stage_fill_fn)(void *arg, size_t off, void *to, size_t len);

static td_status from_host(void *arg, size_t off, void *to, size_t len)
{
    memcpy(to, (const char *)arg + off, len);
    return TD_OK;
}

/* nbytes to dst through pair g, chunk by chunk: fill a buffer once its last DMA is done,
 * queue its DMA. *fst: the first fill error (the write stops there; gpuSuccess returned). */
static gpuError_t staged_write(td__gpu_stage *g, gpuStream_t s, char *dst, size_t nbytes,
                               stage_fill_fn fill, void *arg, td_status *fst)
{
    gpuError_t e = gpuSuccess;
    *fst = TD_OK;
    for (size_t off = 0; off < nbytes && e == gpuSuccess;) {
        const size_t len = nbytes - off < TD_GPU_STAGE_BYTES ? nbytes - off : TD_GPU_STAGE_BYTES;
        const int b = g->next;
        e = gpuEventSynchronize(g->done[b]); /* the DMA that last read buf[b] is done */
        if (e != gpuSuccess) break;
        *fst = fill(arg, off, g->buf[b], len);
        if (*fst != TD_OK) break;
        e = gpuMemcpyAsync(dst + off, g->buf[b], len, gpuMemcpyHostToDevice, s);
        if (e == gpuSuccess) e = gpuEventRecord(g->done[b], s);
        g->next = 1 - b;
        off += len;
    }
    return e;
}

static gpuError_t staged_read(td__gpu_stage *g, gpuStream_t s, char *dst, const char *src,
                              size_t nbytes)
{
    /* chunk i goes to buffer (first + i) % 2; chunk i + 1 is queued before chunk i is
     * copied out. Each DMA into a buffer is ordered after the previous user's last copy out
     * of it by the stream's wait on the pair's events (stage_acquire), and after this
     * read's own earlier chunk in that buffer by the host, which copied it out first. */
    const int first = g->next;
    const size_t nchunks = (nbytes + TD_GPU_STAGE_BYTES - 1) / TD_GPU_STAGE_BYTES;
    gpuError_t e = gpuSuccess;
    for (size_t i = 0; i <= nchunks && e == gpuSuccess; i++) {
        if (i < nchunks) { /* queue chunk i */
            const size_t off = i * TD_GPU_STAGE_BYTES;
            const size_t len = nbytes - off < TD_GPU_STAGE_BYTES ? nbytes - off : TD_GPU_STAGE_BYTES;
            const int b = (int)((first + i) % 2);
            e = gpuMemcpyAsync(g->buf[b], src + off, len, gpuMemcpyDeviceToHost, s);
            if (e == gpuSuccess) e = gpuEventRecord(g->done[b], s);
        }
        if (i > 0 && e == gpuSuccess) { /* drain chunk i - 1 */
            const size_t off = (i - 1) * TD_GPU_STAGE_BYTES;
            const size_t len = nbytes - off < TD_GPU_STAGE_BYTES ? nbytes - off : TD_GPU_STAGE_BYTES;
            const int b = (int)((first + i - 1) % 2);
            e = gpuEventSynchronize(g->done[b]);
            if (e == gpuSuccess) memcpy(dst + off, g->buf[b], len);
        }
    }
    g->next = (int)((first + nchunks) % 2);
    return e;
}

/* A large transfer is split into contiguous parts, one per staging pair it could take (up
 * to the device's stage_sets), each run by its own thread: one CPU core copies into or out of
 * pinned memory at only 6-9 GB/s on the H200 host (BENCHMARKS.md), a sixth of the DMA rate,
 * so the host copies are spread over cores. The parts are disjoint and all queue their
 * copies on the one stream of the transfer (the runtime's stream calls are thread-safe),
 * so their order does not matter. */
#define TD_GPU_STAGE_SPLIT_MIN ((size_t)16 << 20)

typedef struct stage_part {
    td__gpu_device *cd;
    td__gpu_stage *g;
    gpuStream_t s;
    char *dst;
    const char *src;
    size_t nbytes;
    bool write;
    gpuError_t e;
} stage_part;

static void *stage_part_run(void *arg)
{
    stage_part *p = arg;
    p->e = gpuSetDevice(p->cd->ordinal); /* the current device is per thread */
    td_status fst; /* from_host cannot fail */
    if (p->e == gpuSuccess)
        p->e = p->write ? staged_write(p->g, p->s, p->dst, p->nbytes, from_host,
                                       (void *)(uintptr_t)p->src, &fst)
                        : staged_read(p->g, p->s, p->dst, p->src, p->nbytes);
    return NULL;
}

/* The copy through staging on stream s, split over threads when large; false: no pair was
 * free (the caller takes the pageable path). *e: the first error. */
static bool staged_copy(td__gpu_device *cd, gpuStream_t s, char *dst, const char *src,
                        size_t nbytes, bool write, gpuError_t *e)
{
    stage_part part[TD_GPU_STAGE_SETS];
    pthread_t th[TD_GPU_STAGE_SETS];
    bool started[TD_GPU_STAGE_SETS];
    /* a write below the split size still takes a pair per two chunks, its parts run in
     * turn on this thread, so its later chunks do not wait for its first ones' DMAs */
    const bool split = nbytes >= TD_GPU_STAGE_SPLIT_MIN;
    const size_t pairs_for = (nbytes + 2 * TD_GPU_STAGE_BYTES - 1) / (2 * TD_GPU_STAGE_BYTES);
    const size_t sets = (size_t)cd->stage_sets;
    int want = split ? cd->stage_sets : write ? (int)(pairs_for < sets ? pairs_for : sets) : 1;
    int got = 0;
    while (got < want && (part[got].g = stage_acquire(cd, s, !write)) != NULL) got++;
    if (got == 0) return false;
    /* parts of whole staging chunks, the last one takes the rest */
    size_t chunks = (nbytes + TD_GPU_STAGE_BYTES - 1) / TD_GPU_STAGE_BYTES;
    size_t per = (chunks + (size_t)got - 1) / (size_t)got * TD_GPU_STAGE_BYTES, off = 0;
    int n = 0;
    for (; n < got && off < nbytes; n++) {
        size_t len = nbytes - off < per ? nbytes - off : per;
        part[n].cd = cd;
        part[n].s = s;
        part[n].dst = dst + off;
        part[n].src = src + off;
        part[n].nbytes = len;
        part[n].write = write;
        part[n].e = gpuSuccess;
        started[n] = split && n > 0 &&
                     pthread_create(&th[n], NULL, stage_part_run, &part[n]) == 0;
        off += len;
    }
    for (int i = n; i < got; i++) stage_release(cd, part[i].g); /* more pairs than parts */
    stage_part_run(&part[0]);
    for (int i = 1; i < n; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        else if (part[i - 1].e == gpuSuccess) stage_part_run(&part[i]); /* no thread: here */
        else part[i].e = part[i - 1].e; /* after a failed part, queue no more */
    }
    gpuSetDevice(cd->ordinal);
    *e = gpuSuccess;
    for (int i = 0; i < n; i++) {
        if (*e == gpuSuccess) *e = part[i].e;
        stage_release(cd, part[i].g);
    }
    return true;
}

/* A pageable copy queued on s and waited for: the runtime documents when a pageable
 * cudaMemcpyAsync returns only loosely ("might be synchronous"), so the caller's memory is
 * known to be done with only after the wait. It waits for the session's own earlier work,
 * never for another session's. */
static gpuError_t pageable_copy(gpuStream_t s, void *dst, const void *src, size_t nbytes,
                                bool write)
{
    gpuError_t e = gpuMemcpyAsync(dst, src, nbytes,
                                  write ? gpuMemcpyHostToDevice : gpuMemcpyDeviceToHost, s);
    return e == gpuSuccess ? gpuStreamSynchronize(s) : e;
}

/* ---- pinned host ranges (backend.h host_pin): the ranges this module registered with the
 * runtime (cudaHostRegister, portable: every device of the process may DMA to and from
 * them). A transfer whose host side lies wholly inside one is a single cudaMemcpyAsync
 * straight from or into it, waited for — no staging copy, so it moves at the DMA rate.
 * The registry is a fixed array under g_pin_mu, searched linearly: a handful of ranges
 * (a context's host buffers, one region a same-host session).
 * The runtime calls run outside g_pin_mu: registering (or unregistering) a 1 GiB region
 * takes long, and every transfer of every session looks the registry up. So a slot goes
 * RESERVED (taken under the lock, which keeps overlapping pins out) -> READY (published
 * under the lock once cudaHostRegister succeeded; dropped instead if it failed) ->
 * RETIRING (host_unpin, under the lock) -> dropped after cudaHostUnregister. Lookups see
 * READY slots only, so never a range the runtime has not pinned (or is unpinning), and
 * host_unpin acts on a READY slot only, so never on a registration still running. ---- */
#define TD_GPU_PIN_MAX 256

typedef enum pin_state { PIN_RESERVED, PIN_READY, PIN_RETIRING } pin_state;

typedef struct pin_range {
    uintptr_t lo, hi; /* [lo, hi) */
    pin_state state;
} pin_range;

static pthread_mutex_t g_pin_mu = PTHREAD_MUTEX_INITIALIZER;
static pin_range g_pin[TD_GPU_PIN_MAX];
static int g_pin_n;

/* Whether [p, p + n) lies inside one READY range. */
static bool pinned_range(const void *p, size_t n)
{
    const uintptr_t lo = (uintptr_t)p;
    bool in = false;
    pthread_mutex_lock(&g_pin_mu);
    for (int i = 0; i < g_pin_n && !in; i++)
        in = g_pin[i].state == PIN_READY && lo >= g_pin[i].lo && lo <= g_pin[i].hi &&
             n <= g_pin[i].hi - lo;
    pthread_mutex_unlock(&g_pin_mu);
    return in;
}

/* The slot whose range starts at lo, in `state`; -1 if none. Under g_pin_mu. */
static int pin_find(uintptr_t lo, pin_state state)
{
    for (int i = 0; i < g_pin_n; i++)
        if (g_pin[i].lo == lo && g_pin[i].state == state) return i;
    return -1;
}

/* Free slot i (the last one moves into it). Under g_pin_mu. */
static void pin_drop(int i) { g_pin[i] = g_pin[--g_pin_n]; }

static td_status gpu_host_pin(td__device *dev, void *p, size_t nbytes, char *err, size_t errlen)
{
    const td__gpu_device *cd = dev->impl;
    const uintptr_t lo = (uintptr_t)p;
    if (p == NULL || nbytes == 0 || nbytes > UINTPTR_MAX - lo) {
        td__errf(err, errlen, "host_pin: empty or wrapping range");
        return TD_EINVAL;
    }
    /* Reserve: a slot of any state overlapping the range keeps it out. */
    pthread_mutex_lock(&g_pin_mu);
    td_status st = g_pin_n < TD_GPU_PIN_MAX ? TD_OK : TD_ENOMEM;
    for (int i = 0; i < g_pin_n && st == TD_OK; i++)
        if (lo < g_pin[i].hi && g_pin[i].lo < lo + nbytes) st = TD_EINVAL;
    if (st == TD_OK) g_pin[g_pin_n++] = (pin_range){lo, lo + nbytes, PIN_RESERVED};
    pthread_mutex_unlock(&g_pin_mu);
    if (st == TD_EINVAL) {
        td__errf(err, errlen, "host_pin: the range overlaps one already pinned");
        return st;
    }
    if (st == TD_ENOMEM) {
        td__errf(err, errlen, "host_pin: %d ranges are pinned already", TD_GPU_PIN_MAX);
        return st;
    }
    gpuError_t e = gpuSetDevice(cd->ordinal);
    if (e == gpuSuccess) e = gpuHostRegister(p, nbytes, gpuHostRegisterPortable);
    if (e != gpuSuccess) {
        td__errf(err, errlen, "host_pin of %zu bytes: %s", nbytes, gpuGetErrorString(e));
        gpuGetLastError();
        st = TD_EDEVICE;
    }
    /* Publish, or give the slot back. Only this call moves a RESERVED slot, and the
     * reservation kept every other slot from starting at lo, so the slot is still there. */
    pthread_mutex_lock(&g_pin_mu);
    const int i = pin_find(lo, PIN_RESERVED);
    if (st == TD_OK) g_pin[i].state = PIN_READY;
    else pin_drop(i);
    pthread_mutex_unlock(&g_pin_mu);
    return st;
}

static void gpu_host_unpin(td__device *dev, void *p)
{
    const td__gpu_device *cd = dev->impl;
    const uintptr_t lo = (uintptr_t)p;
    pthread_mutex_lock(&g_pin_mu);
    const int i = pin_find(lo, PIN_READY);
    if (i >= 0) g_pin[i].state = PIN_RETIRING; /* lookups stop seeing it; pins still can't */
    pthread_mutex_unlock(&g_pin_mu);
    if (i < 0) return; /* not pinned (or its host_pin has not returned): ignored */
    if (gpuSetDevice(cd->ordinal) != gpuSuccess || gpuHostUnregister(p) != gpuSuccess)
        gpuGetLastError();
    pthread_mutex_lock(&g_pin_mu);
    pin_drop(pin_find(lo, PIN_RETIRING));
    pthread_mutex_unlock(&g_pin_mu);
}

/* A transfer on the session's stream (straight DMA from or into a pinned range, staged, or
 * pageable and waited for); with no session stream, every stream's work first (the buffer
 * may be in use on any of them), then the copy on the legacy stream, finished before it
 * returns. */
static gpuError_t transfer(td__gpu_device *cd, void *stream, void *dst, const void *src,
                           size_t nbytes, bool write)
{
    gpuError_t e = gpuSetDevice(cd->ordinal);
    if (e == gpuSuccess && stream == NULL) e = gpuDeviceSynchronize();
    const gpuStream_t s = order_stream(stream);
    /* a small write on a session stream is staged too: the pageable path waits for the
     * stream, so a training step's label upload drained it behind the previous step */
    const bool stage = nbytes >= TD_GPU_STAGE_MIN || (write && stream != NULL);
    if (e == gpuSuccess && nbytes >= TD_GPU_STAGE_MIN && pinned_range(write ? src : dst, nbytes))
        e = pageable_copy(s, dst, src, nbytes, write); /* a DMA, waited for alike */
    else if (e == gpuSuccess && (!stage || !staged_copy(cd, s, dst, src, nbytes, write, &e)))
        e = pageable_copy(s, dst, src, nbytes, write);
    else if (e == gpuSuccess && stream == NULL && write)
        e = gpuStreamSynchronize(s);
    if (e != gpuSuccess) gpuGetLastError();
    return e;
}

static td_status gpu_buffer_write(td__device *dev, void *stream, void *dst, size_t offset,
                                   const void *src, size_t nbytes)
{
    if (nbytes == 0) return TD_OK;
    return transfer(dev->impl, stream, (char *)dst + offset, src, nbytes, true) == gpuSuccess
               ? TD_OK
               : TD_EDEVICE;
}

/* buffer_write_fill: the pieces are filled straight into one staging pair's buffers, a
 * chunk at a time, each chunk's DMA queued while the next is filled (staged_write with the
 * caller's fill), so a received payload is copied once on the host. A device error before
 * anything is queued returns TD_EDEVICE.
 * Below TD_GPU_STAGE_MIN with no session stream, or with no pair free: filled into host
 * memory, then transfer() (staged if a pair has come free, else the pageable path).
 * Writes are not split over threads (the server's payloads are at most one wire chunk). */
static td_status gpu_buffer_write_fill(td__device *dev, void *stream, void *dst, size_t offset,
                                       size_t nbytes,
                                       td_status (*fill)(void *arg, size_t off, void *to,
                                                         size_t len),
                                       void *arg)
{
    if (nbytes == 0) return TD_OK;
    td__gpu_device *cd = dev->impl;
    char *d = (char *)dst + offset;
    gpuError_t e = gpuSetDevice(cd->ordinal);
    if (e == gpuSuccess && stream == NULL) e = gpuDeviceSynchronize();
    const gpuStream_t s = order_stream(stream);
    if (e != gpuSuccess) {
        gpuGetLastError();
        return TD_EDEVICE;
    }
    td__gpu_stage *g =
        nbytes >= TD_GPU_STAGE_MIN || stream != NULL ? stage_acquire(cd, s, false) : NULL;
    if (g == NULL) {
        void *tmp = g_host.malloc_fn(nbytes);
        if (tmp == NULL) return TD_ENOMEM;
        td_status st = fill(arg, 0, tmp, nbytes);
        if (st == TD_OK && transfer(cd, stream, d, tmp, nbytes, true) != gpuSuccess)
            st = TD_EDEVICE;
        g_host.free_fn(tmp);
        return st;
    }
    td_status st;
    e = staged_write(g, s, d, nbytes, fill, arg, &st);
    if (e == gpuSuccess && stream == NULL) e = gpuStreamSynchronize(s);
    stage_release(cd, g);
    if (e != gpuSuccess) {
        gpuGetLastError();
        return TD_EDEVICE;
    }
    return st;
}

static td_status gpu_buffer_read(td__device *dev, void *stream, const void *src, size_t offset,
                                  void *dst, size_t nbytes)
{
    if (nbytes == 0) return TD_OK;
    return transfer(dev->impl, stream, dst, (const char *)src + offset, nbytes, false) ==
                   gpuSuccess
               ? TD_OK
               : TD_EDEVICE;
}

/* Device to device between two GPUs of this backend (sessions that span devices,
 * engine/session.h td__session_to_device). The runtime's peer copy uses NVLink/PCIe peer
 * access when the pair allows it and stages through host memory otherwise. The engine has
 * synchronised the session's streams on both devices (backend.h), so the legacy stream,
 * which the sessions' non-blocking streams do not wait for, may carry it; it is waited for,
 * so either buffer may be reused or released at once. */
static td_status gpu_buffer_copy_peer(td__device *dev, void *dst, td__device *from,
                                      const void *src, size_t nbytes)
{
    const td__gpu_device *cd = dev->impl, *fd = from->impl;
    if (nbytes == 0) return TD_OK;
    gpuError_t e = gpuSetDevice(cd->ordinal);
    if (e == gpuSuccess)
        e = gpuMemcpyPeerAsync(dst, cd->ordinal, src, fd->ordinal, nbytes, gpuStreamLegacy);
    if (e == gpuSuccess) e = gpuStreamSynchronize(gpuStreamLegacy);
    if (e != gpuSuccess) gpuGetLastError();
    return e == gpuSuccess ? TD_OK : TD_EDEVICE;
}

/* ---- streams ---- */

static void stream_free(td__gpu_device *cd, td__gpu_stream *st)
{
    if (st->s != NULL) gpuStreamSynchronize(st->s);
    td__gpu_matmul_release(st->blas);
    if (st->flag != NULL) gpuFreeAsync(st->flag, st->s);
    if (st->host_word != NULL) gpuFreeHost(st->host_word);
    if (st->s != NULL) gpuStreamDestroy(st->s);
    gpuGetLastError();
    (void)cd;
    td__gpu_host_free(st);
}

static td_status gpu_stream_create(td__device *dev, void **out)
{
    td__gpu_device *cd = dev->impl;
    td__gpu_stream *st = td__gpu_host_calloc(1, sizeof *st);
    if (st == NULL) return TD_ENOMEM;
    gpuError_t e = gpuSetDevice(cd->ordinal);
    /* non-blocking: unordered with the legacy stream, so that nothing on it (another
     * session's peer copy, a NULL-stream call) serialises the sessions' streams */
    if (e == gpuSuccess) e = gpuStreamCreateWithFlags(&st->s, gpuStreamNonBlocking);
    if (e == gpuSuccess)
        e = gpuMallocFromPoolAsync((void **)&st->flag, 256, cd->pool, st->s);
    if (e == gpuSuccess) e = gpuMallocHost((void **)&st->host_word, sizeof(uint64_t));
    if (e != gpuSuccess) {
        gpuGetLastError();
        stream_free(cd, st);
        return status_of(e);
    }
    *out = st;
    return TD_OK;
}

static void gpu_stream_destroy(td__device *dev, void *stream)
{
    td__gpu_device *cd = dev->impl;
    if (stream == NULL) return;
    if (gpuSetDevice(cd->ordinal) != gpuSuccess) gpuGetLastError();
    stream_free(cd, stream);
}

static td_status gpu_stream_sync(td__device *dev, void *stream)
{
    td__gpu_device *cd = dev->impl;
    td__gpu_stream *st = stream;
    gpuError_t e = gpuSetDevice(cd->ordinal);
    if (e == gpuSuccess) e = gpuStreamSynchronize(st->s);
    if (e != gpuSuccess) gpuGetLastError();
    return e == gpuSuccess ? TD_OK : status_of(e);
}

/* ---- ops ---- */

/* The dtypes f16, bf16, i8, i16 (TD_F16 and after) have GPU kernels in every primitive
 * family (f16/bf16 computed in f32 and rounded once, reductions and matmuls accumulated in
 * f32 or double and rounded once at the end, as on the CPU; RAND_UNIFORM/NORMAL on f16/bf16
 * round the f32 mapping's double value once, gpu_create.cu) except any float matmul dtype
 * that td__gpu_matmul_float_dtype does not list. That is refused here, so the engine answers
 * TD_EUNSUPPORTED naming the op and dtype instead of a kernel failing. */
static bool gpu_has_kernels_for(const td__op *op, const td__desc *const *in, const td__desc *out)
{
    bool old = out->dtype < TD_F16;
    for (uint32_t k = 0; k < op->n_inputs; k++) old = old && in[k]->dtype < TD_F16;
    if (old) return true;
    if (td__op_class(op->opcode) == TD_OPCLASS_MATMUL)
        return !td__dtype_is_float(out->dtype) || td__gpu_matmul_float_dtype(out->dtype);
    return true;
}

/* Native coverage: the op table's default (every primitive, no composite) plus the native
 * SOFTMAX/LOG_SOFTMAX kernels (f32, f64) and, on CUDA, SCALED_DOT_PRODUCT_ATTENTION in
 * f16/bf16/f32 without a mask at head dims 64 and 128 (gpu_attention.cu,
 * gpu_attention_f32.cu), narrowed to float matmuls whose M, N, K fit the
 * vendor GEMM's int dims. The dtype rules themselves td__op_infer has already checked. */
static bool gpu_supports_op(td__device *dev, const td__op *op, const td__desc *const *in,
                             const td__desc *out)
{
    (void)dev;
    uint32_t dt = op->n_inputs > 0 ? in[0]->dtype : out->dtype;
    if (dt >= TD_DTYPE_COUNT) return false;
    if (!gpu_has_kernels_for(op, in, out)) return false;
    switch (td__op_class(op->opcode)) {
    case TD_OPCLASS_SOFTMAX:
        return dt == TD_F32 || dt == TD_F64;
    case TD_OPCLASS_NN:
        if (op->opcode == TD_OP_SCALED_DOT_PRODUCT_ATTENTION)
            return td__gpu_attention_supports(op, in, out);
        return td__op_default_supports(op->opcode);
    case TD_OPCLASS_MATMUL: {
        if (!td__dtype_is_float(dt)) return true;
        int64_t m = out->dims[out->rank - 2], n = out->dims[out->rank - 1];
        int64_t k = in[0]->dims[in[0]->rank - 1];
        return m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX;
    }
    default:
        return td__op_default_supports(op->opcode);
    }
}

static td_status exec_matmul(const td__gpu_exec *x, const td__op *op, const td__view *in,
                             const td__view *out)
{
    const td__desc *a = &in[0].desc, *b = &in[1].desc, *o = &out->desc;
    if (a->rank < 2 || b->rank < 2 || o->rank < 2)
        return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": matmul operands below rank 2");
    const int64_t m = o->dims[o->rank - 2], n = o->dims[o->rank - 1], k = a->dims[a->rank - 1];
    td__desc bo = *o;
    bo.rank -= 2;
    const int64_t nbatch = td__gpu_nelem(&bo);
    if (nbatch == 0 || m == 0 || n == 0) return TD_OK;
    if (k == 0)
        return td__gpu_check(x, gpuMemsetAsync(out->data, 0, (size_t)(nbatch * m * n) *
                                                                  td__gpu_dtype_size(o->dtype),
                                                x->st->s),
                              "matmul zero fill");
    int64_t st[2][TD_MAX_RANK];
    td__matmul_batch_strides(a, o, st[0]);
    td__matmul_batch_strides(b, o, st[1]);
    td__gpu_iter batch;
    td__gpu_iter_init(&batch, &bo, 2, (const int64_t(*)[TD_MAX_RANK])st);
    if (td__dtype_is_float(o->dtype))
        return td__gpu_matmul_float(x, &batch, nbatch, m, n, k, in, out,
                                    o->dtype == TD_F32 && td__matmul_allows_tf32(op));
    return td__gpu_matmul_int(x, &batch, nbatch, m, n, k, in, out);
}

static td_status gpu_exec_op(td__device *dev, void *stream, const td__op *op,
                             const td__view *in, const td__view *out, char *err, size_t errlen)
{
    td__gpu_exec x;
    x.dev = dev;
    x.cd = dev->impl;
    x.st = stream;
    x.err = err;
    x.errlen = errlen;
    if (x.st == NULL) return td__gpu_fail(&x, TD_EINTERNAL, TD_GPU_KIND ": exec without a stream");
    td_status s = td__gpu_check(&x, gpuSetDevice(x.cd->ordinal), "set device");
    if (s != TD_OK) return s;
    const td__op_row *row = td__op_row_of(op->opcode);
    if (row != NULL && (row->flags & TD_OPF_ENGINE))
        return td__gpu_fail(&x, TD_EINTERNAL,
                             TD_GPU_KIND ": %s is handled by the engine, not the backend",
                             row->name);
    switch (td__op_class(op->opcode)) {
    case TD_OPCLASS_CREATE:
        return td__gpu_exec_create(&x, op, in, out);
    case TD_OPCLASS_UNARY:
        return td__gpu_exec_unary(&x, op, in, out);
    case TD_OPCLASS_BINARY:
    case TD_OPCLASS_COMPARE:
        return td__gpu_exec_binary(&x, op, in, out);
    case TD_OPCLASS_WHERE:
        return td__gpu_exec_where(&x, in, out);
    case TD_OPCLASS_CAST:
        return td__gpu_exec_cast(&x, in, out);
    case TD_OPCLASS_REDUCE:
        if (td__gpu_stats_op(op, &in[0].desc)) return td__gpu_exec_stats(&x, op, in, out);
        return td__gpu_exec_reduce(&x, op, in, out);
    case TD_OPCLASS_SCAN:
        return td__gpu_exec_scan(&x, op, in, out);
    case TD_OPCLASS_SORT:
        return td__gpu_exec_sort(&x, op, in, out);
    case TD_OPCLASS_MATMUL:
        return exec_matmul(&x, op, in, out);
    case TD_OPCLASS_MOVEMENT:
        return td__gpu_exec_movement(&x, op, in, out);
    case TD_OPCLASS_SOFTMAX:
        return td__gpu_exec_softmax(&x, op, in, out);
    case TD_OPCLASS_NN:
        if (op->opcode == TD_OP_SCALED_DOT_PRODUCT_ATTENTION)
            return td__gpu_exec_attention(&x, op, in, out);
        return td__gpu_exec_nn(&x, op, in, out);
    case TD_OPCLASS_CONV:
    case TD_OPCLASS_POOL:
        return td__gpu_exec_window(&x, op, in, out);
    case TD_OPCLASS_NONE:
        break;
    }
    return td__gpu_fail(&x, TD_EINTERNAL, TD_GPU_KIND ": unknown opcode %u", op->opcode);
}

/* ---- TENSORD_GPU_PROFILE=1: where a GPU run's time goes, per op (a development aid) ----
 * Each op is bracketed by two timing events on its stream and waited for, so the GPU time
 * of every op is exact but nothing overlaps any more (the run gets slower; the host column
 * shows what launching cost before the wait). At the module's unload or the process's
 * exit, one table on stderr: per opcode the count, total and mean GPU time and mean host
 * time inside the backend, sorted by total GPU time, and the host-to-device and
 * device-to-host copies' count, bytes and wall time. Off (one branch per op) otherwise. */
typedef struct prof_row {
    uint64_t n;
    double gpu_ms, host_ms;
} prof_row;
static pthread_mutex_t g_prof_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_prof = -1; /* -1 unread, 0 off, 1 on */
static prof_row g_prof_op[TD_OPCODE_LIMIT];
static prof_row g_prof_copy[2]; /* writes (host to device), reads; gpu_ms holds bytes/1e6 */
static double g_prof_start_ms;

static double prof_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int prof_cmp(const void *a, const void *b)
{
    const double x = g_prof_op[*(const int *)a].gpu_ms, y = g_prof_op[*(const int *)b].gpu_ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void prof_report(void)
{
    pthread_mutex_lock(&g_prof_mu);
    int idx[TD_OPCODE_LIMIT], k = 0;
    double total = 0, host = 0;
    uint64_t n = 0;
    for (int i = 0; i < TD_OPCODE_LIMIT; i++)
        if (g_prof_op[i].n > 0) {
            idx[k++] = i;
            total += g_prof_op[i].gpu_ms;
            host += g_prof_op[i].host_ms;
            n += g_prof_op[i].n;
        }
    qsort(idx, (size_t)k, sizeof idx[0], prof_cmp);
    fprintf(stderr, "tensord " TD_GPU_KIND " profile: %llu ops, %.1f ms GPU, %.1f ms host in the "
            "backend, %.1f ms since the first op\n", (unsigned long long)n, total, host,
            prof_now_ms() - g_prof_start_ms);
    fprintf(stderr, "  %-26s %9s %11s %7s %10s %10s\n", "op", "count", "GPU ms", "GPU %",
            "GPU us/op", "host us/op");
    for (int j = 0; j < k; j++) {
        const prof_row *r = &g_prof_op[idx[j]];
        fprintf(stderr, "  %-26s %9llu %11.2f %6.1f%% %10.1f %10.1f\n",
                td__op_name((uint32_t)idx[j]), (unsigned long long)r->n, r->gpu_ms,
                total > 0 ? 100 * r->gpu_ms / total : 0, 1e3 * r->gpu_ms / (double)r->n,
                1e3 * r->host_ms / (double)r->n);
    }
    for (int c = 0; c < 2; c++)
        if (g_prof_copy[c].n > 0)
            fprintf(stderr, "  %-26s %9llu %9.1f MB %10.1f ms wall\n",
                    c == 0 ? "buffer_write (to device)" : "buffer_read (to host)",
                    (unsigned long long)g_prof_copy[c].n, g_prof_copy[c].gpu_ms,
                    g_prof_copy[c].host_ms);
    pthread_mutex_unlock(&g_prof_mu);
}

static bool prof_on(void)
{
    if (__atomic_load_n(&g_prof, __ATOMIC_ACQUIRE) >= 0) return g_prof == 1;
    pthread_mutex_lock(&g_prof_mu);
    if (g_prof < 0) {
        const char *e = getenv("TENSORD_GPU_PROFILE");
        const int on = e != NULL && e[0] != '\0' && strcmp(e, "0") != 0;
        if (on) {
            g_prof_start_ms = prof_now_ms();
            atexit(prof_report); /* in a module: at its dlclose, or at exit */
        }
        __atomic_store_n(&g_prof, on, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g_prof_mu);
    return g_prof == 1;
}

static void prof_copy(int c, size_t nbytes, double t0)
{
    const double dt = prof_now_ms() - t0;
    pthread_mutex_lock(&g_prof_mu);
    g_prof_copy[c].n++;
    g_prof_copy[c].gpu_ms += (double)nbytes / 1e6;
    g_prof_copy[c].host_ms += dt;
    pthread_mutex_unlock(&g_prof_mu);
}

static td_status gpu_buffer_write_prof(td__device *dev, void *stream, void *dst, size_t offset,
                                       const void *src, size_t nbytes)
{
    if (!prof_on()) return gpu_buffer_write(dev, stream, dst, offset, src, nbytes);
    const double t0 = prof_now_ms();
    td_status st = gpu_buffer_write(dev, stream, dst, offset, src, nbytes);
    prof_copy(0, nbytes, t0);
    return st;
}

/* buffer_write_queued (backend.h): a write from a pinned range on a session stream is one
 * DMA queued behind the stream's earlier work and not waited for (transfer() waits for it,
 * and with it for every kernel queued before it); the caller keeps the range and records a
 * fence. Anything else is buffer_write, and so is every write while TENSORD_GPU_PROFILE
 * times each copy. */
static td_status gpu_buffer_write_queued(td__device *dev, void *stream, void *dst,
                                         size_t offset, const void *src, size_t nbytes,
                                         bool *queued)
{
    *queued = false;
    if (nbytes == 0) return TD_OK;
    td__gpu_device *cd = dev->impl;
    if (stream == NULL || prof_on() || !pinned_range(src, nbytes))
        return gpu_buffer_write_prof(dev, stream, dst, offset, src, nbytes);
    gpuError_t e = gpuSetDevice(cd->ordinal);
    if (e == gpuSuccess)
        e = gpuMemcpyAsync((char *)dst + offset, src, nbytes, gpuMemcpyHostToDevice,
                           order_stream(stream));
    if (e != gpuSuccess) {
        gpuGetLastError();
        return TD_EDEVICE;
    }
    *queued = true;
    return TD_OK;
}

static td_status gpu_buffer_write_fill_prof(td__device *dev, void *stream, void *dst,
                                            size_t offset, size_t nbytes,
                                            td_status (*fill)(void *arg, size_t off, void *to,
                                                              size_t len),
                                            void *arg)
{
    if (!prof_on()) return gpu_buffer_write_fill(dev, stream, dst, offset, nbytes, fill, arg);
    const double t0 = prof_now_ms();
    td_status st = gpu_buffer_write_fill(dev, stream, dst, offset, nbytes, fill, arg);
    prof_copy(0, nbytes, t0);
    return st;
}

static td_status gpu_buffer_read_prof(td__device *dev, void *stream, const void *src,
                                      size_t offset, void *dst, size_t nbytes)
{
    if (!prof_on()) return gpu_buffer_read(dev, stream, src, offset, dst, nbytes);
    const double t0 = prof_now_ms();
    td_status st = gpu_buffer_read(dev, stream, src, offset, dst, nbytes);
    prof_copy(1, nbytes, t0);
    return st;
}

static td_status gpu_exec(td__device *dev, void *stream, const td__op *op, const td__view *in,
                          const td__view *out, char *err, size_t errlen)
{
    if (!prof_on() || stream == NULL || op->opcode >= TD_OPCODE_LIMIT)
        return gpu_exec_op(dev, stream, op, in, out, err, errlen);
    td__gpu_device *cd = dev->impl;
    gpuStream_t s = ((td__gpu_stream *)stream)->s;
    gpuEvent_t a = NULL, b = NULL;
    if (gpuSetDevice(cd->ordinal) != gpuSuccess ||
        gpuEventCreateWithFlags(&a, gpuEventDefault) != gpuSuccess ||
        gpuEventCreateWithFlags(&b, gpuEventDefault) != gpuSuccess) {
        gpuGetLastError();
        if (a != NULL) gpuEventDestroy(a);
        return gpu_exec_op(dev, stream, op, in, out, err, errlen);
    }
    const double t0 = prof_now_ms();
    gpuEventRecord(a, s);
    td_status st = gpu_exec_op(dev, stream, op, in, out, err, errlen);
    gpuEventRecord(b, s);
    const double t1 = prof_now_ms();
    float ms = 0;
    if (gpuEventSynchronize(b) != gpuSuccess || gpuEventElapsedTime(&ms, a, b) != gpuSuccess)
        gpuGetLastError();
    gpuEventDestroy(a);
    gpuEventDestroy(b);
    pthread_mutex_lock(&g_prof_mu);
    prof_row *r = &g_prof_op[op->opcode];
    r->n++;
    r->gpu_ms += ms;
    r->host_ms += t1 - t0;
    pthread_mutex_unlock(&g_prof_mu);
    return st;
}

static const td__backend gpu_backend = {
    .kind = TD_GPU_KIND,
    .host_memory = false,
    .device_count = gpu_device_count,
    .device_open = gpu_device_open,
    .device_close = gpu_device_close,
    .memory_info = gpu_memory_info,
    .buffer_alloc = gpu_buffer_alloc,
    .buffer_free = gpu_buffer_free,
    .buffer_write = gpu_buffer_write_prof,
    .buffer_read = gpu_buffer_read_prof,
    .stream_create = gpu_stream_create,
    .stream_destroy = gpu_stream_destroy,
    .stream_sync = gpu_stream_sync,
    .supports_op = gpu_supports_op,
    .exec = gpu_exec,
    .set_host_alloc = gpu_set_host_alloc,
    .buffer_copy = gpu_buffer_copy,
    .buffer_copy_peer = gpu_buffer_copy_peer,
    .no_device_reason = gpu_no_device_reason,
    .buffer_write_fill = gpu_buffer_write_fill_prof,
    .host_pin = gpu_host_pin,
    .host_unpin = gpu_host_unpin,
    .buffer_free_idle = gpu_buffer_free_idle,
    .fence_record = gpu_fence_record,
    .fence_finish = gpu_fence_finish,
    .buffer_write_queued = gpu_buffer_write_queued,
};

/* The module's entry points (engine/device.c looks them up with dlsym). */
TD_BACKEND_MODULE(gpu_backend)
