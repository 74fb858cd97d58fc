/* Unit tests of common/malloc_tune.c: when the policy is applied, and what it does to a freed
 * block (criterion runs each test in its own process, so each starts with glibc's defaults
 * and the once-per-process flag clear).
 *
 * Expected behaviour from mallopt(3) and glibc's malloc.c: with the defaults an 8 MiB
 * request is above the 128 KiB mmap threshold and gets its own mapping (above the heap's
 * break); with M_MMAP_THRESHOLD 16 MiB it comes from the main arena's heap (below the
 * break), and with M_TRIM_THRESHOLD 32 MiB freeing it leaves the break where it was (the
 * free top of the heap stays under the threshold). */
#include "common/malloc_tune.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* Under AddressSanitizer malloc is the sanitizer's and mallopt does nothing (returns 0):
 * there is no glibc policy to test. */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_GLIBC_MALLOC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_GLIBC_MALLOC 0
#endif
#endif
#if !defined(TEST_GLIBC_MALLOC) && defined(__GLIBC__)
#define TEST_GLIBC_MALLOC 1
#endif

#define TEST_TRIM ((size_t)32 << 20)
#define TEST_BLOCK ((size_t)8 << 20)

#if TEST_GLIBC_MALLOC
static void clear_malloc_env(void)
{
    unsetenv("MALLOC_MMAP_THRESHOLD_");
    unsetenv("MALLOC_TRIM_THRESHOLD_");
    unsetenv("MALLOC_TOP_PAD_");
    unsetenv("MALLOC_MMAP_MAX_");
    unsetenv("MALLOC_ARENA_MAX");
    unsetenv("MALLOC_ARENA_TEST");
    unsetenv("GLIBC_TUNABLES");
    unsetenv("TD_TEST_NO_TUNE");
}

Test(malloc_tune, applies_once)
{
    clear_malloc_env();
    cr_assert(td__malloc_keep_heap(TEST_TRIM, "TD_TEST_NO_TUNE"));
    cr_assert_not(td__malloc_keep_heap(TEST_TRIM, "TD_TEST_NO_TUNE"), "a second call acts again");
}

Test(malloc_tune, freed_block_stays_in_the_heap)
{
    clear_malloc_env();
    cr_assert(td__malloc_keep_heap(TEST_TRIM, NULL));
    char *p = malloc(TEST_BLOCK);
    cr_assert_not_null(p);
    p[0] = 1;
    p[TEST_BLOCK - 1] = 1;
    char *brk_before = sbrk(0);
    cr_assert(p < brk_before, "an 8 MiB block was not taken from the heap");
    free(p);
    cr_assert_eq((char *)sbrk(0), brk_before, "freeing 8 MiB trimmed the heap");
}

Test(malloc_tune, opt_out_variable)
{
    clear_malloc_env();
    setenv("TD_TEST_NO_TUNE", "1", 1);
    cr_assert_not(td__malloc_keep_heap(TEST_TRIM, "TD_TEST_NO_TUNE"));
    /* glibc's defaults stand: the block is mapped on its own, above the break. */
    char *p = malloc(TEST_BLOCK);
    cr_assert_not_null(p);
    cr_assert(p > (char *)sbrk(0), "the policy was applied despite the opt-out");
    free(p);
    /* The first call decided for the process. */
    unsetenv("TD_TEST_NO_TUNE");
    cr_assert_not(td__malloc_keep_heap(TEST_TRIM, "TD_TEST_NO_TUNE"));
}

Test(malloc_tune, opt_out_zero_and_empty_do_not_count)
{
    clear_malloc_env();
    setenv("TD_TEST_NO_TUNE", "0", 1);
    cr_assert(td__malloc_keep_heap(TEST_TRIM, "TD_TEST_NO_TUNE"));
}

Test(malloc_tune, opt_out_empty_does_not_count)
{
    clear_malloc_env();
    setenv("TD_TEST_NO_TUNE", "", 1);
    cr_assert(td__malloc_keep_heap(TEST_TRIM, "TD_TEST_NO_TUNE"));
}

Test(malloc_tune, user_policy_wins)
{
    clear_malloc_env();
    /* Setting a variable now does not change this process's malloc (glibc reads them at
     * start); the helper only sees that the user chose a policy. */
    setenv("MALLOC_MMAP_THRESHOLD_", "1048576", 1);
    cr_assert_not(td__malloc_keep_heap(TEST_TRIM, NULL));
}

Test(malloc_tune, each_user_variable_counts)
{
    static const char *const vars[] = {"MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                                       "MALLOC_MMAP_MAX_",       "MALLOC_ARENA_MAX",
                                       "MALLOC_ARENA_TEST",      "GLIBC_TUNABLES"};
    /* One process per variable would need one test each; the once-flag makes the first
     * call final, so check them by forking. */
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
            clear_malloc_env();
            setenv(vars[i], "glibc.malloc.trim_threshold=1", 1);
            _exit(td__malloc_keep_heap(TEST_TRIM, NULL) ? 1 : 0);
        }
        int status = 0;
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(WIFEXITED(status));
        cr_assert_eq(WEXITSTATUS(status), 0, "%s did not stop the policy", vars[i]);
    }
}
#else
Test(malloc_tune, not_glibc_malloc)
{
    cr_skip_test("malloc is not glibc's (a sanitizer build): mallopt has no effect here");
}
#endif
