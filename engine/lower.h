/* lower.h — lowerings built per op: the composites whose primitive steps depend on the op's
 * ranks and attributes (the fixed step lists of engine/optable.h cannot say "permute the last
 * two of rank r" or "add the causal mask only when asked"). engine/session.c runs both kinds
 * the same way; this header only builds the step list. */
#ifndef TD_ENGINE_LOWER_H
#define TD_ENGINE_LOWER_H

#include "engine/op.h"
#include <stddef.h>

/* Steps a built lowering may have (SCALED_DOT_PRODUCT_ATTENTION with causal and a bool mask
 * takes 18). */
#define TD_LOWER_PROG_MAX 24

/* A composite as primitive ops with concrete ids: the composite's inputs by their ids, step
 * j's output TD_LOWER_TEMP_BASE + j, the last step's output the composite's. */
typedef struct td__lower_prog {
    uint32_t n;
    td__op steps[TD_LOWER_PROG_MAX];
} td__lower_prog;

/* Build the steps of composite `op` (validated by td__op_infer; in[] its inputs' descs) whose
 * row has a built lowering (TD_LOWER_ATTENTION). Returns TD_OK, or TD_EINTERNAL with a
 * message when the row has no builder (a table that lost its builder).
 * Thread-safety: pure function of its arguments. */
td_status td__lower_build(const td__op *op, const td__desc *const *in, uint64_t temp_base,
                          td__lower_prog *p, char *err, size_t errlen);

#endif
