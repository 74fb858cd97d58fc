/* idmap.h — open-addressing hash map from uint64 ids to pointers.
 * Sessions look up tensors by client-chosen ids from the wire on every op, so lookups must
 * be O(1) and ids are untrusted: any 64-bit value is a valid key (0 included), the map
 * never trusts it as an index. Linear probing with tombstones; grows at 50% load.
 * Thread-safety: none; the owner serialises access. */
#ifndef TD_COMMON_IDMAP_H
#define TD_COMMON_IDMAP_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct td__idmap {
    uint64_t *keys;
    void **vals; /* NULL = empty slot, TD__IDMAP_TOMB = deleted */
    size_t cap;  /* power of two or 0 */
    size_t len;
    size_t used; /* len + tombstones */
} td__idmap;

void td__idmap_init(td__idmap *m);
void td__idmap_fini(td__idmap *m);
/* Value for key or NULL. */
void *td__idmap_get(const td__idmap *m, uint64_t key);
/* Insert or replace; val must not be NULL. Returns false on allocation failure. */
bool td__idmap_put(td__idmap *m, uint64_t key, void *val);
/* Remove and return the value (NULL if absent). */
void *td__idmap_del(td__idmap *m, uint64_t key);
/* Iterate: start with *pos = 0; returns false at the end. */
bool td__idmap_next(const td__idmap *m, size_t *pos, uint64_t *key, void **val);
#endif
