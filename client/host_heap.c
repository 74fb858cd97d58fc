/* host_heap.c — see host_heap.h. */
#include "client/host_heap.h"

#include "common/alloc.h"

#include <string.h>

bool td__host_heap_init(td__host_heap *h, uint64_t base, uint64_t size, uint64_t align)
{
    memset(h, 0, sizeof *h);
    if (align == 0 || (align & (align - 1)) != 0) return false;
    h->align = align;
    uint64_t start = (base + align - 1) & ~(align - 1);
    if (start < base || start - base >= size) return true; /* empty */
    uint64_t len = (size - (start - base)) & ~(align - 1);
    if (len == 0) return true;
    h->b = td__malloc(8 * sizeof *h->b);
    if (h->b == NULL) return false;
    h->cap = 8;
    h->b[0] = (td__heap_block){.off = start, .len = len, .used = false};
    h->n = 1;
    return true;
}

void td__host_heap_fini(td__host_heap *h)
{
    td__free(h->b);
    memset(h, 0, sizeof *h);
}

bool td__host_heap_alloc(td__host_heap *h, uint64_t nbytes, uint64_t *off)
{
    if (nbytes == 0 || h->align == 0 || nbytes > UINT64_MAX - (h->align - 1)) return false;
    uint64_t want = (nbytes + h->align - 1) & ~(h->align - 1);
    for (size_t i = 0; i < h->n; i++) {
        td__heap_block *b = &h->b[i];
        if (b->used || b->len < want) continue;
        if (b->len > want) { /* split: the rest stays free right after */
            if (h->n == h->cap) {
                size_t cap = h->cap * 2;
                td__heap_block *nb = td__realloc(h->b, cap * sizeof *nb);
                if (nb == NULL) return false;
                h->b = nb;
                h->cap = cap;
                b = &h->b[i];
            }
            memmove(&h->b[i + 2], &h->b[i + 1], (h->n - i - 1) * sizeof *h->b);
            h->b[i + 1] = (td__heap_block){.off = b->off + want, .len = b->len - want};
            h->n++;
            b->len = want;
        }
        b->used = true;
        h->used_bytes += b->len;
        *off = b->off;
        return true;
    }
    return false;
}

/* Index of the block starting at off, or h->n. */
static size_t find_start(const td__host_heap *h, uint64_t off)
{
    size_t lo = 0, hi = h->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (h->b[mid].off < off) lo = mid + 1;
        else hi = mid;
    }
    return lo < h->n && h->b[lo].off == off ? lo : h->n;
}

bool td__host_heap_free(td__host_heap *h, uint64_t off, uint64_t *len)
{
    size_t i = find_start(h, off);
    if (i == h->n || !h->b[i].used) return false;
    if (len != NULL) *len = h->b[i].len;
    h->used_bytes -= h->b[i].len;
    h->b[i].used = false;
    if (i + 1 < h->n && !h->b[i + 1].used) { /* merge the next one in */
        h->b[i].len += h->b[i + 1].len;
        memmove(&h->b[i + 1], &h->b[i + 2], (h->n - i - 2) * sizeof *h->b);
        h->n--;
    }
    if (i > 0 && !h->b[i - 1].used) { /* merge into the previous one */
        h->b[i - 1].len += h->b[i].len;
        memmove(&h->b[i], &h->b[i + 1], (h->n - i - 1) * sizeof *h->b);
        h->n--;
    }
    return true;
}

const td__heap_block *td__host_heap_find(const td__host_heap *h, uint64_t off, uint64_t nbytes)
{
    if (nbytes == 0 || h->n == 0) return NULL;
    /* Last block starting at or before off. */
    size_t lo = 0, hi = h->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (h->b[mid].off <= off) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return NULL;
    const td__heap_block *b = &h->b[lo - 1];
    uint64_t in = off - b->off;
    if (!b->used || in >= b->len || nbytes > b->len - in) return NULL;
    return b;
}

uint64_t td__host_heap_largest_free(const td__host_heap *h)
{
    uint64_t best = 0;
    for (size_t i = 0; i < h->n; i++)
        if (!h->b[i].used && h->b[i].len > best) best = h->b[i].len;
    return best;
}
