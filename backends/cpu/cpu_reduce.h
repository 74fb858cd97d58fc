/* cpu_reduce.h — what cpu_reduce.c shares with the rest of the CPU backend: the float sum of
 * one contiguous row (SOFTMAX uses it so that its row sum is SUM's, bit for bit) and, for
 * tests, a switch between the instruction-set variants of the reduction kernels.
 * The fold these functions follow is described at the top of cpu_reduce.c.
 */
#ifndef TD_BACKENDS_CPU_REDUCE_H
#define TD_BACKENDS_CPU_REDUCE_H

#include <stdbool.h>
#include <stdint.h>

/* The double sum of x[0..n) exactly as SUM over the last axis of a [..., n] tensor folds
 * each row (blocks of 4096, 32 interleaved lanes, pairwise combines); 0.0 when n == 0.
 * The caller rounds it (SUM rounds once to the element dtype).
 * Thread-safety: pure; runs on the calling thread. */
double td__cpu_sum_row_f32(const float *x, int64_t n);
double td__cpu_sum_row_f64(const double *x, int64_t n);

/* For tests: make every later reduction in this process use the kernel variant `name`
 * ("generic", "avx2", "avx512"); NULL goes back to the best one this CPU runs. Returns
 * false (and changes nothing) for a name this build lacks or this CPU cannot run.
 * Thread-safety: an atomic switch; reductions in flight may use either variant. */
bool td__cpu_reduce_force_isa(const char *name);

/* The name of the variant reductions use now. Thread-safety: any thread. */
const char *td__cpu_reduce_isa(void);
#endif
