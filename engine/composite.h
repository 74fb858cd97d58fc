/* composite.h — ops defined once, from primitives, for every backend (tinygrad's rule).
 *
 * A composite does not execute anything: it emits primitive ops through an emitter, which
 * the client library implements by recording into its lazy op queue. Intermediates are
 * dropped through the emitter as soon as they are recorded (the executor keeps them alive
 * until the ops that read them have run). A backend may later offer a native version; the
 * conformance suite holds it to the composite's result.
 * Thread-safety: as the emitter.
 */
#ifndef TD_ENGINE_COMPOSITE_H
#define TD_ENGINE_COMPOSITE_H

#include "engine/op.h"

typedef struct td__emitter {
    void *ctx;
    /* Record `op` (inputs are ids known to the emitter); on success *out_id and *out_desc
     * describe the new tensor. */
    td_status (*emit)(void *ctx, td__op *op, uint64_t *out_id, td__desc *out_desc);
    /* Drop an intermediate id (its handle; the data lives while ops need it). */
    void (*drop)(void *ctx, uint64_t id);
} td__emitter;

/* softmax (log_softmax when `log`) of x along `axis` (0..rank-1), numerically stabilised by
 * subtracting the row maximum:
 *   softmax(x)_i     = exp(x_i - m) / sum_j exp(x_j - m),   m = max_j x_j
 *   log_softmax(x)_i = (x_i - m) - log(sum_j exp(x_j - m))
 * x must be f32 or f64. Returns TD_OK with *out_id, or TD_EINVAL. */
td_status td__composite_softmax(const td__emitter *e, uint64_t x, const td__desc *xd, int axis,
                                bool log, uint64_t *out_id, td__desc *out_desc);
#endif
