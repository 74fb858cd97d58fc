/* conformance.h — the conformance harness (conformance.c) as a function, shared by the
 * `conformance` test program and `tensorctl verify` (tools/tensorctl_verify.c).
 *
 * td__conformance_main takes the test program's command line (argv[0] is ignored; see the
 * usage at the top of conformance.c) and returns its exit status: 0 every case passed, 1 a
 * case failed, 2 usage or setup error. `remote` supplies the options of remote targets
 * (token, TLS files, timeouts; NULL: defaults, no token); it is borrowed for the call.
 * The case list is built on the first call and kept. Not thread-safe: one call at a time
 * per process (the harness keeps its state in globals).
 */
#ifndef TD_TESTS_CONFORMANCE_H
#define TD_TESTS_CONFORMANCE_H

#include "tensord.h"
#include <stdio.h>

int td__conformance_main(int argc, char **argv, const td_options *remote);

/* JSON output shared with tensorctl verify: s as a JSON string (RFC 8259: quote, backslash
 * and control characters escaped), and a number (null when not finite: JSON has no inf or
 * NaN). */
void td__json_str(FILE *f, const char *s);
void td__json_num(FILE *f, double v);

#endif
