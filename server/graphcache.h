/* graphcache.h — validated graphs kept by the server: a process-wide LRU keyed by
 * (tenant, SHA-256 of the canonical encoding), and each session's set of graphs it may run.
 *
 * Memory: a graph is charged once, when a session defines it, to that session's tenant
 * (td__graph_nbytes against its max_bytes quota; refused with TD_EQUOTA), and given back
 * when its last holder drops it (engine/graph.h). The cache is bounded by count and by
 * bytes (`--graph-cache N`, `--graph-cache-bytes`), least recently used first, and a
 * tenant whose quota would be passed gets its cached graphs that no session holds evicted
 * first (td__graphcache_reclaim, the quota's reclaim hook), so graphs kept for later
 * sessions never stand in the way of a tenant's own work.
 *
 * Why two levels: the LRU bounds what the server keeps for future sessions, while a session pins the graphs it has defined or looked up, so a run
 * (fire-and-forget) never finds its graph evicted half-way through a session; pinned
 * graphs are freed when the session ends. Keys carry the tenant so that graphs are never
 * shared across tenants (another tenant's graph is unknown, as if never defined).
 * Thread-safety: the cache functions lock internally (any thread); a td__graph_set belongs
 * to one session's worker side.
 */
#ifndef TD_SERVER_GRAPHCACHE_H
#define TD_SERVER_GRAPHCACHE_H

#include "engine/graph.h"

#define TD_DEFAULT_GRAPH_CACHE 256
#define TD_DEFAULT_GRAPH_CACHE_MAX_BYTES (UINT64_C(64) << 20)
#define TD_SESSION_MAX_GRAPHS 256
#define TD_SESSION_MAX_GRAPH_OPS (UINT64_C(1) << 18)
/* Largest single definition in memory (td__graph_nbytes): a graph op costs ~380 bytes
 * (td__op plus its value's td__desc), so this is ~44,000 ops. */
#define TD_GRAPH_DEF_MAX_BYTES (UINT64_C(16) << 20)

/* Set the cache's count cap (0 disables caching across sessions) and byte cap (0:
 * TD_DEFAULT_GRAPH_CACHE_MAX_BYTES), and install td__graphcache_reclaim as the quotas'
 * reclaim hook. Call before serving. */
void td__graphcache_configure(size_t cap, uint64_t max_bytes);
/* A new reference to the cached graph, or NULL. Marks it most recently used. */
td__graph *td__graphcache_get(const char *tenant, const uint8_t *hash);
/* Insert g (the cache takes its own reference), evicting least recently used entries
 * beyond the count or byte cap; a graph larger than the byte cap is not kept. Returns
 * false only when out of memory (nothing cached). */
bool td__graphcache_put(const char *tenant, td__graph *g);
size_t td__graphcache_count(void);
/* Bytes (td__graph_nbytes) of the cached graphs. */
uint64_t td__graphcache_bytes(void);
/* The quota reclaim hook (engine/quota.h): evict q's tenant's cached graphs that no
 * session holds, least recently used first, until `need` bytes went back to q or none is
 * left. Returns the bytes given back. Any thread; takes the cache's lock. */
uint64_t td__graphcache_reclaim(td__quota *q, uint64_t need);
/* Counts since start: lookups that found a graph (hits) or not (misses), entries dropped
 * for the count or byte cap or a tenant's quota (evictions), and what the cache holds now.
 * Any thread; takes the cache's lock. */
typedef struct td__graphcache_stats {
    uint64_t graphs, bytes, hits, misses, evictions;
} td__graphcache_stats;
void td__graphcache_stats_get(td__graphcache_stats *out);

/* Drop every entry (shutdown). */
void td__graphcache_clear(void);

typedef struct td__graph_set {
    td__graph **g;
    uint64_t *holds; /* per graph: GraphDefines not yet released (saturates) */
    size_t n, cap;
    uint64_t ops; /* summed over the set */
} td__graph_set;

/* The session's graph with this hash (borrowed), or NULL. */
td__graph *td__graph_set_find(const td__graph_set *s, const uint8_t *hash);
/* Add g (takes its own reference), or count one more hold when it is there already.
 * false when full (TD_SESSION_MAX_GRAPHS graphs or TD_SESSION_MAX_GRAPH_OPS ops) or out
 * of memory. */
bool td__graph_set_add(td__graph_set *s, td__graph *g);
/* Drop one hold of the graph with this hash; the last one removes it from the set (and
 * its reference: a run still executing keeps its own). false when the set lacks it. */
bool td__graph_set_release(td__graph_set *s, const uint8_t *hash);
void td__graph_set_fini(td__graph_set *s);
#endif
