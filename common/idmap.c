/* idmap.c — see idmap.h. */
#include "idmap.h"
#include "alloc.h"

static char g_tomb;
#define TOMB ((void *)&g_tomb)

static size_t hash_u64(uint64_t k)
{
    /* splitmix64 finaliser: spreads sequential ids over the table */
    k ^= k >> 30;
    k *= 0xbf58476d1ce4e5b9ULL;
    k ^= k >> 27;
    k *= 0x94d049bb133111ebULL;
    k ^= k >> 31;
    return (size_t)k;
}

void td__idmap_init(td__idmap *m) { *m = (td__idmap){0}; }

void td__idmap_fini(td__idmap *m)
{
    td__free(m->keys);
    td__free(m->vals);
    *m = (td__idmap){0};
}

static size_t find_slot(const td__idmap *m, uint64_t key, bool *found)
{
    size_t mask = m->cap - 1, i = hash_u64(key) & mask, first_tomb = SIZE_MAX;
    for (;;) {
        void *v = m->vals[i];
        if (v == NULL) {
            *found = false;
            return first_tomb != SIZE_MAX ? first_tomb : i;
        }
        if (v == TOMB) {
            if (first_tomb == SIZE_MAX) first_tomb = i;
        } else if (m->keys[i] == key) {
            *found = true;
            return i;
        }
        i = (i + 1) & mask;
    }
}

void *td__idmap_get(const td__idmap *m, uint64_t key)
{
    if (m->cap == 0) return NULL;
    bool found;
    size_t i = find_slot(m, key, &found);
    return found ? m->vals[i] : NULL;
}

static bool grow(td__idmap *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 16;
    if (m->len * 4 < m->cap) ncap = m->cap; /* mostly tombstones: rehash in place size */
    uint64_t *keys = td__calloc(ncap, sizeof *keys);
    void **vals = td__calloc(ncap, sizeof *vals);
    if (keys == NULL || vals == NULL) {
        td__free(keys);
        td__free(vals);
        return false;
    }
    td__idmap old = *m;
    m->keys = keys;
    m->vals = vals;
    m->cap = ncap;
    m->len = m->used = 0;
    for (size_t i = 0; i < old.cap; i++) {
        if (old.vals[i] != NULL && old.vals[i] != TOMB) {
            bool found;
            size_t j = find_slot(m, old.keys[i], &found);
            m->keys[j] = old.keys[i];
            m->vals[j] = old.vals[i];
            m->len++;
            m->used++;
        }
    }
    td__free(old.keys);
    td__free(old.vals);
    return true;
}

bool td__idmap_put(td__idmap *m, uint64_t key, void *val)
{
    if ((m->used + 1) * 2 > m->cap && !grow(m)) return false;
    bool found;
    size_t i = find_slot(m, key, &found);
    if (!found) {
        if (m->vals[i] == NULL) m->used++;
        m->len++;
        m->keys[i] = key;
    }
    m->vals[i] = val;
    return true;
}

void *td__idmap_del(td__idmap *m, uint64_t key)
{
    if (m->cap == 0) return NULL;
    bool found;
    size_t i = find_slot(m, key, &found);
    if (!found) return NULL;
    void *v = m->vals[i];
    m->vals[i] = TOMB;
    m->len--;
    return v;
}

bool td__idmap_next(const td__idmap *m, size_t *pos, uint64_t *key, void **val)
{
    for (size_t i = *pos; i < m->cap; i++) {
        if (m->vals[i] != NULL && m->vals[i] != TOMB) {
            *key = m->keys[i];
            *val = m->vals[i];
            *pos = i + 1;
            return true;
        }
    }
    *pos = m->cap;
    return false;
}
