/* fini_guard_check.c — a test program that must fail (meson: should_fail): its only test
 * passes, and its teardown fails an assertion, as tests/e2e/suite_fixture.h's stop does when
 * tensord exits non-zero. Without fini_guard.c criterion 2.4.1 exits 0 here. */
#include <criterion/criterion.h>

static void teardown_fails(void) { cr_expect_eq(1, 0, "teardown's check failed (on purpose)"); }

Test(fini_guard, teardown_failure_fails_the_run, .fini = teardown_fails) { cr_expect(1); }
