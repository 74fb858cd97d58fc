/* fini_guard.c — linked into every criterion test program (the root meson.build adds it to
 * the `criterion` dependency), so that a failed assertion in a suite's teardown fails the
 * run.
 *
 * Criterion 2.4.1 reports a test as passed when only its .fini failed an assertion: it
 * prints the failure, counts the test in "Passing" and exits 0. The e2e and hostile suites
 * check in .fini (tests/e2e/suite_fixture.h, stop) that tensord exited with status 0 after
 * SIGTERM (no crash at shutdown, no sanitizer report); unguarded that check could never fail.
 *
 * How: criterion's report hooks run in the runner process and see every test's statistics
 * after its teardown (POST_FINI). A test whose status is "passed" but that counted a failed
 * assertion failed in .init or .fini; the hook names it, and the POST_ALL hook moves such
 * tests from passed to failed in the run's totals, which criterion's main turns into the
 * synthesis line and exit status 1. (An abort or exit inside .fini raises no hook; criterion
 * only warns "crashed during its setup or teardown". Our fixtures do neither.)
 * tests/criterion/fini_guard_check.c is the check that this works (it must fail).
 * Thread-safety: criterion calls the hooks from its runner's one reporting thread. */
#include <criterion/criterion.h>
#include <criterion/hooks.h>

#include <stdio.h>

static size_t g_teardown_failed;

ReportHook(POST_FINI)(struct criterion_test_stats *stats)
{
    if (stats->test_status != CR_STATUS_PASSED || stats->failed_asserts == 0) return;
    g_teardown_failed++;
    fprintf(stderr,
            "[FAIL] %s::%s: %d assertion(s) failed in its setup or teardown (.init/.fini; "
            "the lines above say which); counted as failing\n",
            stats->test->category, stats->test->name, stats->failed_asserts);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    if (g_teardown_failed == 0) return;
    stats->tests_failed += g_teardown_failed;
    stats->tests_passed -= g_teardown_failed <= stats->tests_passed ? g_teardown_failed
                                                                      : stats->tests_passed;
}
