/* cuda_emu.c — a CPU implementation of the CUDA runtime calls the CUDA backend makes, for
 * tests/gpu/emu/run.sh. Device memory is host memory; streams are synchronous; a pool
 * allocation beyond TD_EMU_MEM_BYTES (default 16 GiB) in total fails with
 * cudaErrorMemoryAllocation, which exercises the out-of-memory path. */
#include "cuda_runtime_api.h"
#include <stdlib.h>
#include <string.h>

#define HDR 256 /* keeps 256-byte alignment, as device allocations have */

static cudaError_t g_last;
static size_t g_used;

void td_emu_set_error(cudaError_t e) { g_last = e; }

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInsufficientDriver: return "insufficient driver";
    default: return "emulated error";
    }
}
const char *cudaGetErrorName(cudaError_t e)
{
    return e == cudaErrorMemoryAllocation ? "cudaErrorMemoryAllocation" : "cudaErrorEmu";
}
cudaError_t cudaGetLastError(void)
{
    cudaError_t e = g_last;
    g_last = cudaSuccess;
    return e;
}
cudaError_t cudaGetDeviceCount(int *n)
{
    const char *s = getenv("TD_EMU_DEVICES");
    *n = s ? atoi(s) : 1;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { (void)d; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d)
{
    (void)d;
    memset(p, 0, sizeof *p);
    strcpy(p->name, "CPU emulation of a CUDA device");
    p->totalGlobalMem = (size_t)16 << 30;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 132;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
static size_t limit(void)
{
    const char *s = getenv("TD_EMU_MEM_BYTES");
    return s ? (size_t)strtoull(s, NULL, 10) : (size_t)16 << 30;
}
cudaError_t cudaMemGetInfo(size_t *f, size_t *t)
{
    *t = limit();
    *f = *t - g_used;
    return cudaSuccess;
}
struct td_emu_pool { int dummy; };
cudaError_t cudaMemPoolCreate(cudaMemPool_t *pool, const struct cudaMemPoolProps *props)
{
    if (props->allocType != cudaMemAllocationTypePinned ||
        props->location.type != cudaMemLocationTypeDevice)
        return cudaErrorInvalidValue;
    *pool = calloc(1, sizeof **pool);
    return cudaSuccess;
}
cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) { free(pool); return cudaSuccess; }
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr a, void *v)
{
    (void)pool; (void)a; (void)v;
    return cudaSuccess;
}
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr a, void *v)
{
    (void)pool;
    *(unsigned long long *)v = a == cudaMemPoolAttrUsedMemCurrent ? g_used : g_used;
    return cudaSuccess;
}
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) { (void)pool; (void)keep; return cudaSuccess; }
cudaError_t cudaMallocFromPoolAsync(void **p, size_t n, cudaMemPool_t pool, cudaStream_t s)
{
    (void)pool; (void)s;
    if (n > limit() || g_used + n > limit()) return cudaErrorMemoryAllocation;
    void *b = NULL;
    if (posix_memalign(&b, HDR, n + HDR) != 0) return cudaErrorMemoryAllocation;
    memset(b, 0xa5, n + HDR); /* device memory is not zeroed: make reliance on it visible */
    *(size_t *)b = n;
    g_used += n;
    *p = (char *)b + HDR;
    return cudaSuccess;
}
cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
    (void)s;
    if (p == NULL) return cudaSuccess;
    char *b = (char *)p - HDR;
    g_used -= *(size_t *)b;
    free(b);
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void **p, size_t n) { *p = malloc(n); return *p ? cudaSuccess : cudaErrorMemoryAllocation; }
cudaError_t cudaFreeHost(void *p) { free(p); return cudaSuccess; }
/* Host memory is always "pinned" here: registering only checks its arguments. */
cudaError_t cudaHostRegister(void *p, size_t n, unsigned flags)
{
    (void)flags;
    return p != NULL && n > 0 ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaHostUnregister(void *p) { return p != NULL ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k)
{
    (void)k;
    memmove(d, s, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st)
{
    (void)st;
    return cudaMemcpy(d, s, n, k);
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    (void)s;
    memset(p, v, n);
    return cudaSuccess;
}
struct td_emu_stream { int dummy; };
cudaError_t cudaStreamCreate(cudaStream_t *s) { *s = calloc(1, sizeof **s); return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    (void)flags; /* every stream runs its work at once here: none waits for another */
    return cudaStreamCreate(s);
}
cudaError_t cudaStreamDestroy(cudaStream_t s) { free(s); return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) { (void)s; return cudaSuccess; }
cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *a, const void *fn)
{
    (void)fn;
    a->maxThreadsPerBlock = 1024;
    return cudaSuccess;
}

struct td_emu_event { int recorded; };
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    (void)flags;
    *e = calloc(1, sizeof **e);
    return *e ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { (void)s; e->recorded = 1; return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t e) { (void)e; return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t e) { free(e); return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    (void)s, (void)flags;
    return e != NULL ? cudaSuccess : cudaErrorInvalidValue;
}
/* Kernels run at launch here: no time passes between two events. */
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    (void)a, (void)b;
    *ms = 0;
    return cudaSuccess;
}
cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_dev, const void *src, int src_dev, size_t n,
                                cudaStream_t s)
{
    (void)dst_dev, (void)src_dev, (void)s;
    memmove(dst, src, n);
    return cudaSuccess;
}
