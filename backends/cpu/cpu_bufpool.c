/* cpu_bufpool.c — size-classed free lists of large, pre-faulted host buffers.
 *
 * Why: on these machines a fresh 64 MiB buffer costs ~40 ms of page faults, more than the
 * copy that fills it (shared/notes/platform-facts.md). Tensors of the same sizes come and
 * go every training step and every upload, so large buffers are kept and handed out again.
 *
 * Classes: sizes are rounded up to 1/8 of their power of two (at most 12.5% slack), so
 * near-equal sizes share buffers. New buffers are mmap'd with MAP_POPULATE (faulted in one
 * go by the kernel, much cheaper than one trap per page). Freed buffers stay in their
 * class's list up to a cap on the bytes held (TENSORD_CPU_POOL_BYTES, a byte count with an
 * optional K/M/G/T suffix, default 512 MiB; 0 disables pooling; junk keeps the default
 * with a warning); a buffer larger than half the cap is always unmapped. When a freed
 * buffer does not fit under the cap, the buffers freed longest ago (of any class) are
 * unmapped to make room: a server whose sessions move from one set of sizes to another
 * (batch 4096, then hidden 2048) keeps the sizes in use now, instead of a pool full of
 * sizes nobody asks for and a fresh mmap for every tensor of the new sizes (which made a
 * training epoch 2-5x slower after other sessions had filled the pool).
 *
 * The list links live in the first bytes of each free buffer: a class list (LIFO, so the
 * buffer freed last, warm in cache, is handed out first) and one list of all free buffers
 * in the order they were freed.
 */
#include "backends/cpu/cpu_bufpool.h"
#include "common/bytes.h"
#include "common/log.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define POOL_SUBSTEPS 8
#define POOL_CLASSES (64 * POOL_SUBSTEPS)
#define POOL_DEFAULT_CAP ((size_t)512 << 20)

typedef struct free_buf {
    struct free_buf *next, *prev;   /* class list, newest first */
    struct free_buf *newer, *older; /* all free buffers in the order they were freed */
    size_t idx, size;
} free_buf;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static free_buf *g_free[POOL_CLASSES];
static free_buf *g_newest, *g_oldest;
static size_t g_pooled;   /* bytes held in free lists */
static uint64_t g_mapped; /* buffers mmap'd so far (td__cpu_pool_stats) */
static size_t g_cap;

static void pool_init(void)
{
    g_cap = POOL_DEFAULT_CAP;
    const char *e = getenv("TENSORD_CPU_POOL_BYTES");
    uint64_t v;
    if (e == NULL || e[0] == '\0') return;
    if (td__parse_bytes(e, &v) == 0 && v <= SIZE_MAX)
        g_cap = (size_t)v;
    else
        td__log(TD_LOG_WARN,
                "TENSORD_CPU_POOL_BYTES='%s' is not a byte count (digits with an optional K, "
                "M, G or T: e.g. 268435456 or 256M); the CPU buffer pool keeps its default "
                "of %zu MiB",
                e, (size_t)POOL_DEFAULT_CAP >> 20);
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

/* Take b off both lists. Caller holds g_mu. */
static void unlink_buf(free_buf *b)
{
    if (b->prev != NULL)
        b->prev->next = b->next;
    else
        g_free[b->idx] = b->next;
    if (b->next != NULL) b->next->prev = b->prev;
    if (b->newer != NULL)
        b->newer->older = b->older;
    else
        g_newest = b->older;
    if (b->older != NULL)
        b->older->newer = b->newer;
    else
        g_oldest = b->newer;
    g_pooled -= b->size;
}

void *td__cpu_pool_alloc(size_t nbytes)
{
    pthread_once(&g_once, pool_init);
    size_t idx, size;
    if (!size_class(nbytes, &idx, &size)) return NULL;
    pthread_mutex_lock(&g_mu);
    free_buf *b = g_free[idx];
    if (b != NULL) unlink_buf(b);
    if (b == NULL) g_mapped++;
    pthread_mutex_unlock(&g_mu);
    if (b != NULL) return b;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                   -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void td__cpu_pool_free(void *p, size_t nbytes)
{
    if (p == NULL) return;
    pthread_once(&g_once, pool_init);
    size_t idx, size;
    if (!size_class(nbytes, &idx, &size)) return;
    free_buf *evicted = NULL; /* unmapped after the lock, chained through ->next */
    pthread_mutex_lock(&g_mu);
    bool keep = size <= g_cap / 2;
    if (keep) {
        while (g_pooled + size > g_cap && g_oldest != NULL) {
            free_buf *o = g_oldest;
            unlink_buf(o);
            o->next = evicted;
            evicted = o;
        }
        free_buf *b = p;
        *b = (free_buf){.next = g_free[idx], .older = g_newest, .idx = idx, .size = size};
        if (b->next != NULL) b->next->prev = b;
        g_free[idx] = b;
        if (g_newest != NULL) g_newest->newer = b;
        g_newest = b;
        if (g_oldest == NULL) g_oldest = b;
        g_pooled += size;
    }
    pthread_mutex_unlock(&g_mu);
    if (!keep) munmap(p, size);
    while (evicted != NULL) {
        free_buf *n = evicted->next;
        munmap(evicted, evicted->size);
        evicted = n;
    }
}

void td__cpu_pool_stats(size_t *pooled_bytes, uint64_t *mapped)
{
    pthread_mutex_lock(&g_mu);
    if (pooled_bytes != NULL) *pooled_bytes = g_pooled;
    if (mapped != NULL) *mapped = g_mapped;
    pthread_mutex_unlock(&g_mu);
}
