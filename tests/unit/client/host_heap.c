/* unit/client/host_heap.c — the first-fit allocator behind td_host_alloc's shared-memory
 * buffers (client/host_heap.c, compiled in). Expected offsets are worked out by hand from
 * the rules in host_heap.h: blocks start at multiples of the alignment, take a multiple of
 * it, the first free block that fits is split, and a free merges with free neighbours. */
#include "client/host_heap.h"

#include <criterion/criterion.h>
#include <stdint.h>

#define K 4096u

/* The heap's blocks as (off, len, used) triples must be exactly `want`. */
static void expect_blocks(const td__host_heap *h, const td__heap_block *want, size_t n)
{
    cr_assert_eq(h->n, n, "%zu blocks, expected %zu", h->n, n);
    for (size_t i = 0; i < n; i++) {
        cr_expect_eq(h->b[i].off, want[i].off, "block %zu off %llu, expected %llu", i,
                     (unsigned long long)h->b[i].off, (unsigned long long)want[i].off);
        cr_expect_eq(h->b[i].len, want[i].len, "block %zu len %llu, expected %llu", i,
                     (unsigned long long)h->b[i].len, (unsigned long long)want[i].len);
        cr_expect_eq(h->b[i].used, want[i].used, "block %zu used", i);
    }
}

Test(host_heap, init_rounds_base_and_size_to_the_alignment)
{
    td__host_heap h;
    /* [100, 100 + 10*K): the first multiple of K is K, leaving 10K - (K - 100) bytes,
     * cut down to 9K. */
    cr_assert(td__host_heap_init(&h, 100, 10 * K, K));
    td__heap_block want[] = {{K, 9 * K, false}};
    expect_blocks(&h, want, 1);
    cr_expect_eq(td__host_heap_largest_free(&h), 9 * K);
    td__host_heap_fini(&h);
    /* Too small to hold one aligned block: empty, and every alloc fails. */
    cr_assert(td__host_heap_init(&h, 1, K, K));
    cr_expect_eq(h.n, 0u);
    uint64_t off;
    cr_expect_not(td__host_heap_alloc(&h, 1, &off));
    cr_expect_eq(td__host_heap_largest_free(&h), 0u);
    td__host_heap_fini(&h);
    cr_assert(td__host_heap_init(&h, 0, 0, K));
    cr_expect_eq(h.n, 0u);
    td__host_heap_fini(&h);
    /* An alignment that is not a power of two is refused. */
    cr_expect_not(td__host_heap_init(&h, 0, 10 * K, 3000));
    cr_expect_not(td__host_heap_init(&h, 0, 10 * K, 0));
}

Test(host_heap, first_fit_splits_and_rounds_up)
{
    td__host_heap h;
    cr_assert(td__host_heap_init(&h, 0, 16 * K, K));
    uint64_t a, b, c;
    cr_assert(td__host_heap_alloc(&h, 1, &a));         /* 1 byte takes a whole K */
    cr_assert(td__host_heap_alloc(&h, K + 1, &b));     /* K+1 takes 2K */
    cr_assert(td__host_heap_alloc(&h, 3 * K, &c));     /* exactly 3K */
    cr_expect_eq(a, 0u);
    cr_expect_eq(b, K);
    cr_expect_eq(c, 3 * K);
    td__heap_block want[] = {{0, K, true}, {K, 2 * K, true}, {3 * K, 3 * K, true},
                             {6 * K, 10 * K, false}};
    expect_blocks(&h, want, 4);
    cr_expect_eq(h.used_bytes, 6 * K);
    cr_expect_eq(td__host_heap_largest_free(&h), 10 * K);
    /* Exactly the rest: no split, the heap is full. */
    uint64_t d, e;
    cr_assert(td__host_heap_alloc(&h, 10 * K, &d));
    cr_expect_eq(d, 6 * K);
    cr_expect_eq(h.n, 4u);
    cr_expect_not(td__host_heap_alloc(&h, 1, &e));
    cr_expect_eq(td__host_heap_largest_free(&h), 0u);
    cr_expect_eq(h.used_bytes, 16 * K);
    /* Zero bytes and sizes that overflow when rounded are refused. */
    cr_assert(td__host_heap_free(&h, d, NULL));
    cr_expect_not(td__host_heap_alloc(&h, 0, &e));
    cr_expect_not(td__host_heap_alloc(&h, UINT64_MAX, &e));
    cr_expect_not(td__host_heap_alloc(&h, UINT64_MAX - K + 2, &e));
    td__host_heap_fini(&h);
}

Test(host_heap, free_coalesces_with_both_neighbours)
{
    td__host_heap h;
    cr_assert(td__host_heap_init(&h, 0, 8 * K, K));
    uint64_t o[4];
    for (int i = 0; i < 4; i++) cr_assert(td__host_heap_alloc(&h, 2 * K, &o[i]));
    cr_expect_eq(o[3], 6 * K);
    uint64_t len = 0;
    cr_assert(td__host_heap_free(&h, o[1], &len));
    cr_expect_eq(len, 2 * K);
    cr_assert(td__host_heap_free(&h, o[3], NULL));
    td__heap_block w1[] = {{0, 2 * K, true}, {2 * K, 2 * K, false}, {4 * K, 2 * K, true},
                           {6 * K, 2 * K, false}};
    expect_blocks(&h, w1, 4);
    /* 3K fits nowhere (two separate 2K holes), though 4K are free. */
    uint64_t x;
    cr_expect_not(td__host_heap_alloc(&h, 3 * K, &x));
    /* Freeing the block between two holes merges all three into one 6K block. */
    cr_assert(td__host_heap_free(&h, o[2], NULL));
    td__heap_block w2[] = {{0, 2 * K, true}, {2 * K, 6 * K, false}};
    expect_blocks(&h, w2, 2);
    cr_expect_eq(h.used_bytes, 2 * K);
    /* Now 3K fits, first-fit at 2K. */
    cr_assert(td__host_heap_alloc(&h, 3 * K, &x));
    cr_expect_eq(x, 2 * K);
    cr_assert(td__host_heap_free(&h, x, NULL));
    cr_assert(td__host_heap_free(&h, o[0], NULL));
    td__heap_block w3[] = {{0, 8 * K, false}};
    expect_blocks(&h, w3, 1);
    cr_expect_eq(h.used_bytes, 0u);
    td__host_heap_fini(&h);
}

Test(host_heap, bad_frees_change_nothing)
{
    td__host_heap h;
    cr_assert(td__host_heap_init(&h, 0, 8 * K, K));
    uint64_t a, b;
    cr_assert(td__host_heap_alloc(&h, 2 * K, &a));
    cr_assert(td__host_heap_alloc(&h, 2 * K, &b));
    cr_expect_not(td__host_heap_free(&h, a + 1, NULL), "inside a block, not its start");
    cr_expect_not(td__host_heap_free(&h, 4 * K, NULL), "the free tail's start");
    cr_expect_not(td__host_heap_free(&h, 100 * K, NULL), "past the heap");
    cr_assert(td__host_heap_free(&h, a, NULL));
    cr_expect_not(td__host_heap_free(&h, a, NULL), "a second free of the same block");
    td__heap_block want[] = {{0, 2 * K, false}, {2 * K, 2 * K, true}, {4 * K, 4 * K, false}};
    expect_blocks(&h, want, 3);
    cr_expect_eq(h.used_bytes, 2 * K);
    td__host_heap_fini(&h);
}

Test(host_heap, find_needs_the_whole_range_inside_one_used_block)
{
    td__host_heap h;
    cr_assert(td__host_heap_init(&h, 0, 8 * K, K));
    uint64_t a, b;
    cr_assert(td__host_heap_alloc(&h, 2 * K, &a)); /* [0, 2K) */
    cr_assert(td__host_heap_alloc(&h, K, &b));     /* [2K, 3K) */
    const td__heap_block *f = td__host_heap_find(&h, 100, 2 * K - 100);
    cr_assert_not_null(f);
    cr_expect_eq(f->off, 0u);
    cr_expect_null(td__host_heap_find(&h, 100, 2 * K - 99), "one byte past block a");
    cr_expect_null(td__host_heap_find(&h, K, 2 * K), "spans a and b");
    f = td__host_heap_find(&h, 2 * K, K);
    cr_assert_not_null(f);
    cr_expect_eq(f->off, 2 * K);
    cr_expect_null(td__host_heap_find(&h, 3 * K, 1), "in the free tail");
    cr_expect_null(td__host_heap_find(&h, 0, 0), "zero bytes");
    cr_expect_null(td__host_heap_find(&h, UINT64_MAX, 1), "past everything");
    cr_expect_null(td__host_heap_find(&h, 2 * K + 10, UINT64_MAX), "overflowing length");
    cr_assert(td__host_heap_free(&h, a, NULL));
    cr_expect_null(td__host_heap_find(&h, 0, 1), "a freed block");
    td__host_heap_fini(&h);
}

/* Many blocks: the bookkeeping grows past its first 8 entries; alternate frees leave
 * holes that a later free joins back into one block. */
Test(host_heap, grows_and_returns_to_one_block)
{
    td__host_heap h;
    cr_assert(td__host_heap_init(&h, 0, 64 * K, K));
    uint64_t o[64];
    for (int i = 0; i < 64; i++) {
        cr_assert(td__host_heap_alloc(&h, K, &o[i]));
        cr_expect_eq(o[i], (uint64_t)i * K);
    }
    cr_expect_eq(h.n, 64u);
    for (int i = 0; i < 64; i += 2) cr_assert(td__host_heap_free(&h, o[i], NULL));
    cr_expect_eq(h.n, 64u);
    cr_expect_eq(td__host_heap_largest_free(&h), K);
    for (int i = 1; i < 64; i += 2) cr_assert(td__host_heap_free(&h, o[i], NULL));
    td__heap_block want[] = {{0, 64 * K, false}};
    expect_blocks(&h, want, 1);
    td__host_heap_fini(&h);
}
