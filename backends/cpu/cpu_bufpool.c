/* cpu_bufpool.c — size-classed free lists of large, pre-faulted host buffers.
 *
 * Why: on these machines a fresh 64 MiB buffer costs ~40 ms of page faults, more than the
 * copy that fills it (shared/notes/platform-facts.md). Tensors of the same sizes come and
 * go every training step and every upload, so large buffers are kept and handed out again.
 *
 * Classes: sizes are rounded up to 1/8 of their power of two (at most 12.5% slack), so
 * near-equal sizes share buffers. New buffers are mmap'd with MAP_POPULATE (faulted in one
 * go by the kernel, much cheaper than one trap per page). Freed buffers stay in their
 * class's list while the pool holds less than its cap (TENSORD_CPU_POOL_BYTES, default
 * 512 MiB; 0 disables pooling); a buffer larger than half the cap is always unmapped. The
 * list links live in the first bytes of each free buffer.
 */
#include "backends/cpu/cpu_bufpool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define POOL_SUBSTEPS 8
#define POOL_CLASSES (64 * POOL_SUBSTEPS)
#define POOL_DEFAULT_CAP ((size_t)512 << 20)

typedef struct free_buf {
    struct free_buf *next;
} free_buf;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static free_buf *g_free[POOL_CLASSES];
static size_t g_pooled; /* bytes held in free lists */
static size_t g_cap;

static void pool_init(void)
{
    g_cap = POOL_DEFAULT_CAP;
    const char *e = getenv("TENSORD_CPU_POOL_BYTES");
    if (e != NULL && e[0] != '\0') {
        char *end;
        unsigned long long v = strtoull(e, &end, 10);
        if (*end == '\0') g_cap = (size_t)v;
    }
}

/* Class index and rounded size of nbytes (>= TD_CPU_POOL_MIN_BYTES). */
static bool size_class(size_t nbytes, size_t *idx, size_t *rounded)
{
    unsigned k = 63u - (unsigned)__builtin_clzll((unsigned long long)nbytes);
    size_t step = ((size_t)1 << k) / POOL_SUBSTEPS;
    size_t m = (nbytes + step - 1) / step; /* 8..16 */
    if (m == 2 * POOL_SUBSTEPS) {
        k++;
        step *= 2;
        m = POOL_SUBSTEPS;
    }
    if (k >= 63) return false;
    *idx = (size_t)k * POOL_SUBSTEPS + (m - POOL_SUBSTEPS);
    *rounded = m * step;
    return true;
}

void *td__cpu_pool_alloc(size_t nbytes)
{
    pthread_once(&g_once, pool_init);
    size_t idx, size;
    if (!size_class(nbytes, &idx, &size)) return NULL;
    pthread_mutex_lock(&g_mu);
    free_buf *b = g_free[idx];
    if (b != NULL) {
        g_free[idx] = b->next;
        g_pooled -= size;
    }
    pthread_mutex_unlock(&g_mu);
    if (b != NULL) return b;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                   -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void td__cpu_pool_free(void *p, size_t nbytes)
{
    if (p == NULL) return;
    size_t idx, size;
    if (!size_class(nbytes, &idx, &size)) return;
    pthread_mutex_lock(&g_mu);
    bool keep = size <= g_cap / 2 && g_pooled + size <= g_cap;
    if (keep) {
        free_buf *b = p;
        b->next = g_free[idx];
        g_free[idx] = b;
        g_pooled += size;
    }
    pthread_mutex_unlock(&g_mu);
    if (!keep) munmap(p, size);
}
