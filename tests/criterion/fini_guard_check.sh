#!/usr/bin/env bash
# fini_guard_check.sh PROGRAM — PROGRAM (fini_guard_check.c) has one test that passes and a
# teardown that fails an assertion: with tests/criterion/fini_guard.c linked in, the run must
# exit 1, name the test as failing and count it in the synthesis line.
set -u
out=$("$1" 2>&1)
rc=$?
fail() { echo "fini guard check: $*"; echo "--- output:"; echo "$out"; exit 1; }
[ $rc -eq 1 ] || fail "exit status $rc, expected 1"
grep -q '^\[FAIL\] fini_guard::teardown_failure_fails_the_run: 1 assertion(s) failed in its setup or teardown' <<<"$out" ||
    fail "no [FAIL] line naming the test"
grep -q 'Synthesis: Tested: 1 | Passing: 0 | Failing: 1 | Crashing: 0' <<<"$out" ||
    fail "the synthesis line does not count the test as failing"
echo "ok: a teardown failure fails the run"
