/* cpu_bufpool.c — the CPU backend's pool of pre-faulted buffers keeps the sizes in use now:
 * a pool full of buffers of old sizes makes room for a new size by unmapping the buffers
 * freed longest ago, never grows past its cap, and never keeps a buffer above half the cap.
 * Run with TENSORD_CPU_POOL_BYTES=67108864 (64 MiB, meson.build sets it). Criterion runs each
 * test in its own process, so each starts with an empty pool. */
#include "backends/cpu/cpu_bufpool.h"
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#define MIB ((size_t)1 << 20)
#define CAP (64 * MIB)

static size_t pooled(void)
{
    size_t b;
    td__cpu_pool_stats(&b, NULL);
    return b;
}

static uint64_t mapped(void)
{
    uint64_t m;
    td__cpu_pool_stats(NULL, &m);
    return m;
}

static void *alloc_touch(size_t n)
{
    unsigned char *p = td__cpu_pool_alloc(n);
    cr_assert_not_null(p, "alloc of %zu bytes failed", n);
    cr_assert_eq((uintptr_t)p % 4096, 0, "not page-aligned");
    memset(p, 0x5a, n);
    return p;
}

Test(cpu_bufpool, a_new_size_evicts_the_oldest_buffers_instead_of_mapping_every_time)
{
    void *a[8];
    for (int i = 0; i < 8; i++) a[i] = alloc_touch(8 * MIB);
    cr_assert_eq(mapped(), 8);
    for (int i = 0; i < 8; i++) td__cpu_pool_free(a[i], 8 * MIB);
    cr_assert_eq(pooled(), CAP, "8 x 8 MiB fill the 64 MiB cap");

    /* a new size while the pool is full: 12 MiB is its own class (1.5 x 8 MiB) */
    for (int step = 0; step < 5; step++) {
        void *b = alloc_touch(12 * MIB);
        td__cpu_pool_free(b, 12 * MIB);
        cr_assert_leq(pooled(), CAP);
    }
    cr_assert_eq(mapped(), 9, "the 12 MiB buffer was mapped %llu times, not once",
                 (unsigned long long)(mapped() - 8));
    /* made room by unmapping the two 8 MiB buffers freed first: 6 x 8 + 12 = 60 MiB */
    cr_assert_eq(pooled(), 60 * MIB);

    /* six 8 MiB buffers are left; the seventh is mapped afresh */
    for (int i = 0; i < 6; i++) a[i] = alloc_touch(8 * MIB);
    cr_assert_eq(mapped(), 9);
    a[6] = alloc_touch(8 * MIB);
    cr_assert_eq(mapped(), 10);
    cr_assert_eq(pooled(), 12 * MIB);
    for (int i = 0; i < 7; i++) td__cpu_pool_free(a[i], 8 * MIB);
    /* 12 + 56 > 64: the 12 MiB buffer, freed before any of these, goes first */
    cr_assert_eq(pooled(), 56 * MIB);
    void *b = alloc_touch(12 * MIB);
    cr_assert_eq(mapped(), 11, "the 12 MiB buffer should have been the one evicted");
    td__cpu_pool_free(b, 12 * MIB);
    cr_assert_leq(pooled(), CAP);
}

Test(cpu_bufpool, a_buffer_above_half_the_cap_is_never_kept)
{
    void *small = alloc_touch(4 * MIB);
    td__cpu_pool_free(small, 4 * MIB);
    cr_assert_eq(pooled(), 4 * MIB);
    void *big = alloc_touch(40 * MIB);
    td__cpu_pool_free(big, 40 * MIB);
    cr_assert_eq(pooled(), 4 * MIB, "a 40 MiB buffer (> 32 MiB, half the cap) was kept");
    void *again = alloc_touch(4 * MIB);
    cr_assert_eq(again, small, "the pooled 4 MiB buffer was not handed out again");
    td__cpu_pool_free(again, 4 * MIB);
}

Test(cpu_bufpool, near_equal_sizes_share_a_class_and_the_last_freed_goes_out_first)
{
    void *x = alloc_touch(5 * MIB);
    void *y = alloc_touch(5 * MIB);
    td__cpu_pool_free(x, 5 * MIB);
    td__cpu_pool_free(y, 5 * MIB);
    /* 5 MiB - 100 KiB rounds up to the same class (5 MiB is 10/8 of 4 MiB, steps of 512 KiB) */
    void *z = alloc_touch(5 * MIB - 100 * 1024);
    cr_assert_eq(z, y, "the buffer freed last should come out first");
    cr_assert_eq(mapped(), 2);
    td__cpu_pool_free(z, 5 * MIB - 100 * 1024);
}
