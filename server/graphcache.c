/* graphcache.c — the server's graph cache and per-session graph sets (see graphcache.h).
 *
 * The LRU is a doubly linked list searched linearly: it is consulted only when a session
 * first uses a graph (runs go through the session's own set), and its cap is a few hundred
 * entries, so a hash table would buy nothing measurable.
 */
#include "server/graphcache.h"

#include "common/alloc.h"
#include "common/log.h"

#include <pthread.h>
#include <string.h>

typedef struct entry {
    struct entry *prev, *next; /* prev: more recently used */
    char *tenant;
    td__graph *g;
    uint64_t nbytes; /* td__graph_nbytes(g) */
} entry;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static entry *g_head, *g_tail; /* head: most recently used */
static size_t g_count;
static uint64_t g_bytes;
static size_t g_cap = TD_DEFAULT_GRAPH_CACHE;
static uint64_t g_max_bytes = TD_DEFAULT_GRAPH_CACHE_MAX_BYTES;
static uint64_t g_hits, g_misses, g_evictions; /* under g_mu; for td__graphcache_stats */

static void unlink_entry(entry *e)
{
    if (e->prev) e->prev->next = e->next; else g_head = e->next;
    if (e->next) e->next->prev = e->prev; else g_tail = e->prev;
    e->prev = e->next = NULL;
    g_count--;
    g_bytes -= e->nbytes;
}

static void push_front(entry *e)
{
    e->prev = NULL;
    e->next = g_head;
    if (g_head) g_head->prev = e; else g_tail = e;
    g_head = e;
    g_count++;
    g_bytes += e->nbytes;
}

static void entry_free(entry *e)
{
    td__graph_unref(e->g);
    td__free(e->tenant);
    td__free(e);
}

/* Caller holds g_mu; returns the evicted entries as a list (free after unlocking). */
static entry *trim_locked(void)
{
    entry *dropped = NULL;
    while ((g_count > g_cap || g_bytes > g_max_bytes) && g_tail != NULL) {
        entry *e = g_tail;
        unlink_entry(e);
        e->next = dropped;
        dropped = e;
        g_evictions++;
    }
    return dropped;
}

static void free_list(entry *e)
{
    while (e != NULL) {
        entry *next = e->next;
        char hex[17];
        td__graph_hash_hex(e->g->hash, 8, hex);
        td__log(TD_LOG_DEBUG, "graph cache: evicted graph %s", hex);
        entry_free(e);
        e = next;
    }
}

void td__graphcache_configure(size_t cap, uint64_t max_bytes)
{
    td__quota_set_reclaim(td__graphcache_reclaim);
    pthread_mutex_lock(&g_mu);
    g_cap = cap;
    g_max_bytes = max_bytes != 0 ? max_bytes : TD_DEFAULT_GRAPH_CACHE_MAX_BYTES;
    entry *dropped = trim_locked();
    pthread_mutex_unlock(&g_mu);
    free_list(dropped);
}

static entry *find_locked(const char *tenant, const uint8_t *hash)
{
    for (entry *e = g_head; e != NULL; e = e->next)
        if (memcmp(e->g->hash, hash, TD_GRAPH_HASH_BYTES) == 0 && strcmp(e->tenant, tenant) == 0)
            return e;
    return NULL;
}

td__graph *td__graphcache_get(const char *tenant, const uint8_t *hash)
{
    pthread_mutex_lock(&g_mu);
    entry *e = find_locked(tenant, hash);
    td__graph *g = NULL;
    if (e != NULL) {
        unlink_entry(e);
        push_front(e);
        g = e->g;
        td__graph_ref(g);
        g_hits++;
    } else {
        g_misses++;
    }
    pthread_mutex_unlock(&g_mu);
    return g;
}

bool td__graphcache_put(const char *tenant, td__graph *g)
{
    entry *e = td__calloc(1, sizeof *e);
    char *t = td__strdup(tenant);
    if (e == NULL || t == NULL) {
        td__free(e);
        td__free(t);
        return false;
    }
    e->tenant = t;
    e->g = g;
    e->nbytes = td__graph_nbytes(g);
    td__graph_ref(g);
    pthread_mutex_lock(&g_mu);
    entry *old = find_locked(tenant, g->hash);
    if (old != NULL) unlink_entry(old);
    push_front(e);
    entry *dropped = trim_locked();
    pthread_mutex_unlock(&g_mu);
    if (old != NULL) entry_free(old);
    free_list(dropped);
    return true;
}

size_t td__graphcache_count(void)
{
    pthread_mutex_lock(&g_mu);
    size_t n = g_count;
    pthread_mutex_unlock(&g_mu);
    return n;
}

uint64_t td__graphcache_bytes(void)
{
    pthread_mutex_lock(&g_mu);
    uint64_t n = g_bytes;
    pthread_mutex_unlock(&g_mu);
    return n;
}

uint64_t td__graphcache_reclaim(td__quota *q, uint64_t need)
{
    entry *dropped = NULL;
    uint64_t freed = 0;
    pthread_mutex_lock(&g_mu);
    /* Only entries whose graph nothing else holds give memory back when dropped; the
     * count cannot grow meanwhile, since new references are taken under g_mu. */
    for (entry *e = g_tail, *prev; e != NULL && freed < need; e = prev) {
        prev = e->prev;
        if (e->g->quota != q || atomic_load(&e->g->refs) != 1) continue;
        freed += e->g->charged;
        unlink_entry(e);
        e->next = dropped;
        dropped = e;
        g_evictions++;
    }
    pthread_mutex_unlock(&g_mu);
    if (dropped != NULL)
        td__log(TD_LOG_DEBUG, "graph cache: evicting %llu bytes of tenant '%s' graphs for its quota",
                (unsigned long long)freed, q->name);
    free_list(dropped);
    return freed;
}

void td__graphcache_stats_get(td__graphcache_stats *out)
{
    pthread_mutex_lock(&g_mu);
    out->graphs = g_count;
    out->bytes = g_bytes;
    out->hits = g_hits;
    out->misses = g_misses;
    out->evictions = g_evictions;
    pthread_mutex_unlock(&g_mu);
}

void td__graphcache_clear(void)
{
    pthread_mutex_lock(&g_mu);
    entry *list = g_head;
    g_head = g_tail = NULL;
    g_count = 0;
    g_bytes = 0;
    pthread_mutex_unlock(&g_mu);
    while (list != NULL) {
        entry *next = list->next;
        entry_free(list);
        list = next;
    }
}

static size_t graph_set_index(const td__graph_set *s, const uint8_t *hash)
{
    for (size_t i = 0; i < s->n; i++)
        if (memcmp(s->g[i]->hash, hash, TD_GRAPH_HASH_BYTES) == 0) return i;
    return SIZE_MAX;
}

td__graph *td__graph_set_find(const td__graph_set *s, const uint8_t *hash)
{
    size_t at = graph_set_index(s, hash);
    return at != SIZE_MAX ? s->g[at] : NULL;
}

bool td__graph_set_add(td__graph_set *s, td__graph *g)
{
    size_t at = graph_set_index(s, g->hash);
    if (at != SIZE_MAX) {
        if (s->holds[at] < UINT64_MAX) s->holds[at]++;
        return true;
    }
    if (s->n >= TD_SESSION_MAX_GRAPHS || s->ops + g->n_ops > TD_SESSION_MAX_GRAPH_OPS)
        return false;
    if (s->n == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 8;
        td__graph **p = td__realloc(s->g, ncap * sizeof *p);
        if (p == NULL) return false;
        s->g = p;
        uint64_t *h = td__realloc(s->holds, ncap * sizeof *h);
        if (h == NULL) return false;
        s->holds = h;
        s->cap = ncap;
    }
    td__graph_ref(g);
    s->holds[s->n] = 1;
    s->g[s->n++] = g;
    s->ops += g->n_ops;
    return true;
}

bool td__graph_set_release(td__graph_set *s, const uint8_t *hash)
{
    size_t at = graph_set_index(s, hash);
    if (at == SIZE_MAX) return false;
    if (--s->holds[at] > 0) return true;
    td__graph *g = s->g[at];
    s->ops -= g->n_ops;
    s->n--;
    s->g[at] = s->g[s->n]; /* order does not matter: lookups are by hash */
    s->holds[at] = s->holds[s->n];
    td__graph_unref(g);
    return true;
}

void td__graph_set_fini(td__graph_set *s)
{
    for (size_t i = 0; i < s->n; i++) td__graph_unref(s->g[i]);
    td__free(s->g);
    td__free(s->holds);
    s->g = NULL;
    s->holds = NULL;
    s->n = s->cap = 0;
    s->ops = 0;
}
