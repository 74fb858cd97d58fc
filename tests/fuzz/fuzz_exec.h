/* fuzz_exec.h — what the fuzz targets share to EXECUTE what they validate: one CPU session
 * per process, input tensors made by ops (FULL, ARANGE + RESHAPE), and cost bounds that keep
 * each input cheap.
 *
 * Why execute: validation alone let a shape whose byte size wrapped reach the CPU kernels
 * (issue 10); running accepted ops under ASan/UBSan checks that what the validator accepts
 * is what the kernels can do, buffer sizes included.
 * Thread-safety: one thread (libFuzzer's). */
#ifndef TD_TESTS_FUZZ_EXEC_H
#define TD_TESTS_FUZZ_EXEC_H

#include "engine/op.h"
#include "engine/session.h"
#include <stdbool.h>
#include <stdint.h>

/* Largest input or output one fuzz input may execute, and the most multiply-adds of a
 * matmul (both keep one execution in the milliseconds under ASan). */
#define FUZZ_EXEC_MAX_BYTES ((size_t)1 << 20)
#define FUZZ_EXEC_MAX_MACS ((uint64_t)1 << 22)

/* The process's CPU session (created on first use; aborts if the CPU device is missing,
 * which is a broken build, not a finding). Limits: 64 MiB, 4096 tensors. */
td__session *fuzz_cpu_session(void);

/* Whether running `op` (already accepted by td__op_infer with these descs) is cheap:
 * every input and the output at most FUZZ_EXEC_MAX_BYTES, a matmul at most
 * FUZZ_EXEC_MAX_MACS. */
bool fuzz_exec_cheap(const td__op *op, const td__desc *const *in, const td__desc *out);

/* Create tensor `id` of desc `d` in s by executing ops: FULL(value) for bool tensors and
 * when `index` (gather indices: FULL(0) stays in range), else ARANGE(n, value, 0.25) into
 * `tmp_id`, RESHAPE into `id`, release of `tmp_id`. Returns false (and aborts on an
 * unexpected TD_EINVAL, which means the validator and the session disagree) when it fails. */
bool fuzz_make_tensor(td__session *s, uint64_t id, uint64_t tmp_id, const td__desc *d,
                      double value, bool index);

/* Read all of tensor `id` (desc d) back into a scratch buffer, so ASan checks the buffer
 * really is td__desc_nbytes(d) long. Returns the status of the read. */
td_status fuzz_read_all(td__session *s, uint64_t id, const td__desc *d);

/* With FUZZ_EXEC_TRACE=1 in the environment, print a line to stderr (to check that seeds
 * reach execution: FUZZ_EXEC_TRACE=1 fuzz-infer -runs=0 corpus/infer). */
void fuzz_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Abort when a failure reported by the session is one that an accepted op must never get:
 * TD_EINVAL (the validator accepted it) or TD_EINTERNAL. For td__failure_fn. */
void fuzz_on_failure(void *arg, uint32_t op_index, td_status status, const char *message);
#endif
