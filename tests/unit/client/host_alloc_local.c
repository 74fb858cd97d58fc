/* host_alloc_local.c — td_host_alloc on local:cpu gives plain memory at once: no device of a
 * CPU session can pin, so it maps no pages to offer for pinning (it used to mmap whole pages,
 * ask the session to pin them and unmap them again on every call). Its own executable
 * because it wraps mmap: a definition in the executable comes first in symbol lookup, so
 * libtensord's calls reach it, and no other suite should run with the wrapper. */
#include "tensord.h"

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

static int n_maps;   /* mmap calls while counting */
static bool counting;

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    static void *(*real)(void *, size_t, int, int, int, off_t);
    if (real == NULL) {
        void *sym = dlsym(RTLD_NEXT, "mmap");
        memcpy(&real, &sym, sizeof real); /* POSIX: a function's address from dlsym */
    }
    if (counting) n_maps++;
    return real(addr, len, prot, flags, fd, off);
}

Test(host_alloc_local, cpu_maps_nothing)
{
    td_context *ctx = NULL;
    cr_assert_eq(td_connect("local:cpu", NULL, &ctx), TD_OK, "%s", td_connect_error());
    const size_t sizes[] = {1, 4096, (size_t)3 << 20};
    void *p[3];
    for (size_t i = 0; i < 3; i++) {
        counting = true;
        n_maps = 0;
        p[i] = td_host_alloc(ctx, sizes[i]);
        counting = false;
        cr_assert_not_null(p[i], "%s", td_last_error(ctx));
        cr_expect_eq(n_maps, 0, "td_host_alloc(%zu) on local:cpu called mmap %d times",
                     sizes[i], n_maps);
        cr_expect_eq((uintptr_t)p[i] % 64, 0, "not 64-byte aligned");
        memset(p[i], 0x5a, sizes[i]);
    }
    for (size_t i = 0; i < 3; i++) cr_expect_eq(td_host_free(ctx, p[i]), TD_OK);
    td_close(ctx);
}
