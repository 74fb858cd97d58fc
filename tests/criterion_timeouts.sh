#!/usr/bin/env bash
# Fails when a criterion test file under tests/ uses more than one .timeout value.
# Criterion's runner (BoxFort 0.1.2, statically in Debian's libcriterion 2.4.1) keeps the
# watchdogs of running tests in a list sorted by deadline, and its insertion drops the
# request it is inserted before: a test started while another with a later deadline runs
# (criterion runs 2 or more at a time) takes that test's watchdog away, which then never
# fires, and the dropped request is the 48-byte leak LSan reports from libcriterion.so.3 alone
# (tests/lsan.supp). One value per file keeps deadlines in start order. A test binary is
# one file here; a binary built from several test files would need them to agree too.
set -euo pipefail
cd "$(dirname "$0")"
status=0
while IFS= read -r f; do
    values=$( (grep -oE '\.timeout *= *[0-9.]+' "$f" || true) | tr -d ' ' | sort -u | tr '\n' ' ')
    if [ "$(wc -w <<<"$values")" -gt 1 ]; then
        echo "$f: more than one criterion .timeout value: $values" >&2
        status=1
    fi
done < <(grep -rlE --include='*.c' --include='*.h' '^(Test|TestSuite|ParameterizedTest|Theory)\(' .)
exit $status
