/* malloc_tune.c — one malloc policy for the server and the client library (malloc_tune.h).
 *
 * Why mallopt and not a pool: the buffers are gRPC's own (its TCP reads), allocated with
 * plain malloc, and gRPC 1.51 offers no hook to supply them. Setting M_TRIM_THRESHOLD also
 * turns off glibc's adaptive mmap threshold, so the mmap threshold is set explicitly to a
 * value close to where the adaptive one ends up after a program frees a few large blocks.
 * See mallopt(3) for both parameters.
 */
#include "common/malloc_tune.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>

static bool env_set(const char *name)
{
    const char *v = name != NULL ? getenv(name) : NULL;
    return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}
#endif

bool td__malloc_keep_heap(size_t trim_bytes, const char *opt_out_env)
{
    static atomic_flag done = ATOMIC_FLAG_INIT;
    if (atomic_flag_test_and_set(&done)) return false;
#ifdef __GLIBC__
    /* glibc's malloc policy variables (mallopt(3) ENVIRONMENT); not the debugging ones
     * (MALLOC_CHECK_, MALLOC_PERTURB_, which meson test sets). */
    static const char *const policy[] = {"GLIBC_TUNABLES",        "MALLOC_ARENA_MAX",
                                         "MALLOC_ARENA_TEST",     "MALLOC_MMAP_MAX_",
                                         "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_",
                                         "MALLOC_TRIM_THRESHOLD_"};
    for (size_t i = 0; i < sizeof policy / sizeof policy[0]; i++)
        if (getenv(policy[i]) != NULL) return false;
    if (env_set(opt_out_env)) return false;
    if (trim_bytes > INT_MAX) trim_bytes = INT_MAX;
    bool ok = mallopt(M_MMAP_THRESHOLD, (int)TD_MALLOC_MMAP_MIN_BYTES) == 1;
    ok = mallopt(M_TRIM_THRESHOLD, (int)trim_bytes) == 1 && ok;
    return ok;
#else
    (void)trim_bytes;
    (void)opt_out_env;
    return false;
#endif
}
