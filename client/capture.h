/* capture.h — the hooks client/context.c gives client/graph.c for graph capture.
 *
 * While a context captures (td_graph_begin .. td_graph_end), op calls still validate and
 * return handles at once, but their ops stay in the context's batch instead of going to
 * the executor, and the handles are placeholders that exist only inside the graph.
 * Thread-safety: the context's rule (one thread at a time).
 */
#ifndef TD_CLIENT_CAPTURE_H
#define TD_CLIENT_CAPTURE_H

#include "client/transport.h"

struct td__capture; /* owned by client/graph.c */
/* Flush pending work, then start capturing with state `cap` (kept by the context until
 * td__ctx_capture_take; td_close frees it with td__capture_free). TD_EINVAL if already
 * capturing. */
td_status td__ctx_capture_begin(td_context *ctx, struct td__capture *cap);
/* The capture state (NULL when not capturing) and the first id made while capturing. */
struct td__capture *td__ctx_capture(const td_context *ctx, uint64_t *first_id);
void td__capture_free(struct td__capture *cap); /* graph.c; NULL is a no-op */
/* The live handle with this id, or NULL. */
td_tensor *td__ctx_lookup(td_context *ctx, uint64_t id);
/* Stop capturing (the state is handed back to the caller); returns the captured ops (caller frees with td__free) and their count. */
td__op *td__ctx_capture_take(td_context *ctx, size_t *n);
bool td__ctx_capturing(const td_context *ctx);
/* A new handle with a fresh id (a placeholder, or a live tensor the executor will create).
 * NULL with the context's error set on allocation failure. */
td_tensor *td__ctx_new_tensor(td_context *ctx, const td__desc *d, bool placeholder);
/* Index of t's device among its session's devices (0: the first; td_to_device moves). */
uint32_t td__ctx_tensor_device(const td_tensor *t);
/* Hand pending ops and releases to the transport; a failure becomes the context's last
 * error, "API: transport message". */
td_status td__ctx_flush(td_context *ctx, const char *api);
td__transport *td__ctx_transport(td_context *ctx);
/* The context's autodiff state (client/autodiff.c; NULL until first used) and a tensor's
 * context. */
typedef struct td__autodiff td__autodiff;
td__autodiff **td__ctx_autodiff(td_context *ctx);
td_context *td__tensor_ctx(const td_tensor *t);
/* autodiff.c's hooks: an op was recorded (out its new handle); a handle is being released;
 * the context is closing (every handle is freed by td_close itself). */
void td__ad_recorded(td__autodiff *ad, const td__op *op, td_tensor *const *in, td_tensor *out);
void td__ad_forget(td__autodiff *ad, uint64_t id);
/* td_to_device copied `in` to `out`: taped like an op when `in` requires a gradient. */
void td__ad_moved(td__autodiff *ad, td_tensor *in, td_tensor *out);
void td__ad_free(td__autodiff *ad);
/* Attention's weights softmax(q k^T scale (+ mask, causal)) as the ops the lowering of
 * SCALED_DOT_PRODUCT_ATTENTION runs (engine/lower.c), recorded on q's context: for sessions
 * whose server predates the op, and for its gradient rule (client/autodiff.c). scale as
 * given (not 0). When `visible` is not NULL it receives the bool tensor of the keys each
 * query may see (the causal rule and a bool mask together; NULL when neither applies),
 * owned by the caller. The caller owns the result; NULL on failure (td_last_error). */
td_tensor *td__attention_weights(td_tensor *q, td_tensor *k, td_tensor *mask, bool causal,
                                 double scale, td_tensor **visible);
/* t's accumulated gradient (borrowed, as td_grad's) or NULL, without touching the error. */
td_tensor *td__ad_grad_peek(const td_tensor *t);
struct td__graph;
/* Tell the executor one prepare of g is no longer needed (vt->graph_release), under the
 * flusher lock and after the pending ops and releases, so it cannot interleave with the
 * flusher thread's sends. */
void td__ctx_graph_release(td_context *ctx, const struct td__graph *g);
/* Record a failure on ctx (td_last_error); ctx NULL: the calling thread's context-free
 * failure, as for an op call given a NULL context (td_last_error(NULL)). */
void td__ctx_set_error(td_context *ctx, td_status st, const char *msg);
uint64_t td__tensor_id(const td_tensor *t);
const td__desc *td__tensor_desc(const td_tensor *t);
bool td__tensor_placeholder(const td_tensor *t);
#endif
