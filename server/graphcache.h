/* graphcache.h — validated graphs kept by the server: a process-wide LRU keyed by
 * (tenant, SHA-256 of the canonical encoding), and each session's set of graphs it may run.
 *
 * Why two levels: the LRU bounds what the server keeps for future sessions (count cap,
 * `--graph-cache N`), while a session pins the graphs it has defined or looked up, so a run
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
#define TD_SESSION_MAX_GRAPHS 256
/* Ops held, summed over graphs: bounds memory (about 300 bytes per op) whatever the count
 * cap, since one graph may hold up to TD_GRAPH_MAX_OPS ops. */
#define TD_GRAPHCACHE_MAX_OPS (UINT64_C(1) << 20)
#define TD_SESSION_MAX_GRAPH_OPS (UINT64_C(1) << 18)

/* Set the cache's count cap (0 disables caching across sessions). Call before serving. */
void td__graphcache_configure(size_t cap);
/* A new reference to the cached graph, or NULL. Marks it most recently used. */
td__graph *td__graphcache_get(const char *tenant, const uint8_t *hash);
/* Insert g (the cache takes its own reference), evicting least recently used entries
 * beyond the count cap or TD_GRAPHCACHE_MAX_OPS. Returns false only when out of memory (nothing cached). */
bool td__graphcache_put(const char *tenant, td__graph *g);
size_t td__graphcache_count(void);
/* Drop every entry (shutdown). */
void td__graphcache_clear(void);

typedef struct td__graph_set {
    td__graph **g;
    size_t n, cap;
    uint64_t ops; /* summed over the set */
} td__graph_set;

/* The session's graph with this hash (borrowed), or NULL. */
td__graph *td__graph_set_find(const td__graph_set *s, const uint8_t *hash);
/* Add g (takes its own reference). false when full (TD_SESSION_MAX_GRAPHS graphs or
 * TD_SESSION_MAX_GRAPH_OPS ops) or out of memory. */
bool td__graph_set_add(td__graph_set *s, td__graph *g);
void td__graph_set_fini(td__graph_set *s);
#endif
