/* cpu_test_util.h — helpers the CPU backend tests share: open a device through the vtable,
 * make tensors (td__view + buffer) from host arrays, run one op, compare results.
 * The tests call td__cpu_backend directly; output descs are written out by hand in each
 * test (not inferred), so a mistake in op.c cannot hide one here. */
#ifndef TD_TESTS_CPU_TEST_UTIL_H
#define TD_TESTS_CPU_TEST_UTIL_H

#include "backends/backend.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An int64 dims literal: DIMS(2, 3). */
#define DIMS(...) ((const int64_t[]){__VA_ARGS__})

/* Last exec message. */
extern char tu_err[256];

/* Open the CPU device with `threads` threads (0: the environment's default). */
td__device *tu_open(int threads);
void tu_close(td__device *dev);

/* A tensor: a view whose data was allocated on `dev` (NULL when it has zero bytes), filled
 * from `data` when it is not NULL. */
td__view tu_new(td__device *dev, uint32_t dtype, uint32_t rank, const int64_t *dims,
                const void *data);
/* A tensor of dtype filled from doubles (converted with C casts; values must fit). */
td__view tu_from_doubles(td__device *dev, uint32_t dtype, uint32_t rank, const int64_t *dims,
                         const double *vals);
void tu_free(td__device *dev, td__view *v);
size_t tu_nbytes(const td__view *v);
int64_t tu_nelem(const td__view *v);

/* An op with opcode and optional integer attributes. */
td__op tu_op(uint32_t opcode, uint32_t n_iattrs, const int64_t *iattrs);

/* Run op on inputs into out (allocated by the caller with tu_new). */
td_status tu_exec(td__device *dev, td__op op, const td__view *in, uint32_t n_in,
                  const td__view *out);

/* Element i of a tensor as double. */
double tu_get(const td__view *v, int64_t i);

/* |got - want| <= atol + rtol * |want| for every element (NaN matches NaN); on failure a
 * criterion assertion names the first bad index. */
void tu_expect_close(const td__view *got, const double *want, int64_t n, double rtol,
                     double atol, const char *what);
/* Exact element equality against doubles. */
void tu_expect_eq(const td__view *got, const double *want, int64_t n, const char *what);
#endif
