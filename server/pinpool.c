/* pinpool.c — see pinpool.h. */
#include "server/pinpool.h"

#include "common/alloc.h"
#include "common/log.h"
#include "wire_limits.h"

#include <pthread.h>
#include <stdint.h>

#define PAGE ((uintptr_t)4096)
#define POOLS_MAX 4 /* backends that can pin: CUDA, HIP and the tests' stand-in at most */

struct td__pin_buf {
    struct pool *pool;
    void *data;
    td__pin_buf *next; /* in the pool's free list */
};

typedef struct pool {
    const td__backend *backend;
    td__device *pinned_by; /* the device whose host_pin pinned `base` (NULL: pinning failed) */
    void *block;           /* the allocation (td__free), and its page-aligned part: */
    void *base;
    td__pin_buf bufs[TD_PINPOOL_BUFS];
    td__pin_buf *free_list;
    int out; /* buffers taken and not given back */
} pool;

bool td__pin_uploads = true;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pool g_pools[POOLS_MAX];
static int g_npools;

bool td__pinpool_usable(const td__device *dev)
{
    const td__backend *be = dev != NULL ? dev->backend : NULL;
    return td__pin_uploads && be != NULL && !be->host_memory && be->host_pin != NULL &&
           be->host_unpin != NULL && be->buffer_write_queued != NULL &&
           be->fence_record != NULL && be->fence_finish != NULL;
}

/* Under g_mu: dev's backend's pool, made (allocated and pinned) at the first call; NULL when
 * there is no room for another pool. A pool whose pinning failed stays, empty. */
static pool *pool_for(td__device *dev)
{
    for (int i = 0; i < g_npools; i++)
        if (g_pools[i].backend == dev->backend) return &g_pools[i];
    if (g_npools == POOLS_MAX) return NULL;
    pool *p = &g_pools[g_npools++];
    *p = (pool){.backend = dev->backend};
    const size_t bytes = (size_t)TD_PINPOOL_BUFS * TD_CHUNK_BYTES;
    p->block = td__malloc(bytes + PAGE);
    if (p->block == NULL) {
        td__log(TD_LOG_WARN, "no memory for the %zu MiB upload pool of %s; uploads are staged "
                "by the worker", bytes >> 20, dev->name);
        return p;
    }
    p->base = (void *)(((uintptr_t)p->block + PAGE - 1) & ~(PAGE - 1));
    char err[256];
    if (dev->backend->host_pin(dev, p->base, bytes, err, sizeof err) != TD_OK) {
        td__log(TD_LOG_WARN, "cannot pin the %zu MiB upload pool for %s (%s); uploads are "
                "staged by the worker", bytes >> 20, dev->name, err);
        td__free(p->block);
        p->block = p->base = NULL;
        return p;
    }
    p->pinned_by = dev;
    for (int i = TD_PINPOOL_BUFS - 1; i >= 0; i--) {
        p->bufs[i] = (td__pin_buf){.pool = p,
                                   .data = (char *)p->base + (size_t)i * TD_CHUNK_BYTES,
                                   .next = p->free_list};
        p->free_list = &p->bufs[i];
    }
    td__log(TD_LOG_DEBUG, "upload pool for %s: %d pinned buffers of %u bytes", dev->name,
            TD_PINPOOL_BUFS, (unsigned)TD_CHUNK_BYTES);
    return p;
}

td__pin_buf *td__pinpool_take(td__device *dev)
{
    if (!td__pinpool_usable(dev)) return NULL;
    pthread_mutex_lock(&g_mu);
    pool *p = pool_for(dev);
    td__pin_buf *b = p != NULL ? p->free_list : NULL;
    if (b != NULL) {
        p->free_list = b->next;
        p->out++;
    }
    pthread_mutex_unlock(&g_mu);
    return b;
}

void *td__pin_buf_data(td__pin_buf *b) { return b->data; }

void td__pinpool_give(td__pin_buf *b)
{
    if (b == NULL) return;
    pthread_mutex_lock(&g_mu);
    b->next = b->pool->free_list;
    b->pool->free_list = b;
    b->pool->out--;
    pthread_mutex_unlock(&g_mu);
}

void td__pinpool_shutdown(void)
{
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_npools; i++) {
        pool *p = &g_pools[i];
        if (p->out != 0) {
            td__log(TD_LOG_ERROR, "upload pool: %d buffers still out at shutdown; left pinned",
                    p->out);
            continue;
        }
        if (p->pinned_by != NULL) p->backend->host_unpin(p->pinned_by, p->base);
        td__free(p->block);
    }
    g_npools = 0;
    pthread_mutex_unlock(&g_mu);
}
