/* session.c — one client's in-order execution stream (see session.h).
 *
 * Why poisoning instead of aborting the batch: ops are fire-and-forget, so the client may
 * already have recorded work that does not depend on a failed op. Marking only the failed
 * op's output (and, transitively, whatever reads it) keeps the rest of the batch and the
 * session useful, and a later read of an affected tensor still reports the root cause.
 */
#include "engine/session.h"
#include "engine/lower.h"
#include "common/alloc.h"
#include "common/checked.h"
#include "common/idmap.h"
#include "common/log.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A CPU matmul run in pieces (split_plan below): piece j covers indexes
 * [j*step, min((j+1)*step, total)) of the output's axis_out, and the same range of an
 * operand's axis_in_* (or the whole operand when that is -1); strides are bytes per index. */
typedef struct td__split {
    td__op op;
    td__view in[2], out;
    int axis_in_a, axis_in_b, axis_out;
    int64_t total, step, next;
    int64_t stride_a, stride_b, stride_out;
    /* Matrix mode (by_matrix): piece q is row block q % row_blocks of output matrix
     * q / row_blocks, run as rank-2 views; the operands' matrices are found through their
     * broadcast batch strides (elements) over the output's batch dims. */
    bool by_matrix;
    int64_t m, n, k, row_blocks;
    td__desc batch; /* the output's batch dims */
    int64_t st_a[TD_MAX_RANK], st_b[TD_MAX_RANK];
} td__split;

struct td__session {
    /* The device (and its stream) the op being executed runs on: devs[0] outside ops.
     * Everything below the op level (supports_op, lowering, splitting, exec) uses these. */
    td__device *dev;
    void *stream;
    /* Every device of the session (td__session_add_device), devs[0] the one it was created
     * on, and each one's stream. */
    td__device *devs[TD_SESSION_DEVICES_MAX];
    void *streams[TD_SESSION_DEVICES_MAX];
    uint32_t ndevs;
    td__idmap tensors; /* id -> td__tensor* */
    td__session_limits limits;
    uint64_t bytes;
    uint64_t record_bytes; /* host memory of the tensor records (TD_TENSOR_RECORD_BYTES each) */
    bool force_lowering; /* lower composites even where the device has a native kernel */
    uint32_t perturb_opcode; /* test hook TENSORD_TEST_PERTURB_OP; UINT32_MAX: off */
    bool defer_ok;       /* exec_one may leave a split op pending (td__session_exec_slice) */
    struct pending {     /* a split op between slices; its tensor is not in the table yet */
        bool active;
        const td__op *ops; /* the batch and the index it belongs to */
        size_t index;
        td__op op;
        td__tensor *t;
        td__quota *q;
        td__split sp;
        uint32_t dev; /* index in devs[] of the device it runs on */
    } pend;
};

td_status td__session_create(td__device *dev, const td__session_limits *limits,
                             td__session **out)
{
    td__session *s = td__calloc(1, sizeof *s);
    if (s == NULL) return TD_ENOMEM;
    s->dev = dev;
    if (limits != NULL) s->limits = *limits;
    const char *force = getenv("TENSORD_FORCE_LOWERING");
    s->force_lowering = force != NULL && strcmp(force, "1") == 0;
    s->perturb_opcode = UINT32_MAX;
    const char *perturb = getenv("TENSORD_TEST_PERTURB_OP");
    for (size_t r = 0; perturb != NULL && r < TD_OP_COUNT; r++)
        if (strcmp(td__op_rows[r].name, perturb) == 0) s->perturb_opcode = td__op_rows[r].opcode;
    td__idmap_init(&s->tensors);
    if (dev->backend->stream_create != NULL) {
        td_status st = dev->backend->stream_create(dev, &s->stream);
        if (st != TD_OK) {
            td__free(s);
            return st;
        }
    }
    s->devs[0] = dev;
    s->streams[0] = s->stream;
    s->ndevs = 1;
    *out = s;
    return TD_OK;
}

td_status td__session_add_device(td__session *s, td__device *dev, uint32_t *index, char *err,
                                 size_t errlen)
{
    for (uint32_t i = 0; i < s->ndevs; i++) {
        if (s->devs[i] == dev) {
            snprintf(err, errlen, "device %s is already device %u of the session", dev->name, i);
            return TD_EINVAL;
        }
    }
    if (s->ndevs == TD_SESSION_DEVICES_MAX) {
        snprintf(err, errlen, "a session spans at most %d devices; %s would be one more",
                 TD_SESSION_DEVICES_MAX, dev->name);
        return TD_EINVAL;
    }
    void *stream = NULL;
    if (dev->backend->stream_create != NULL) {
        td_status st = dev->backend->stream_create(dev, &stream);
        if (st != TD_OK) {
            snprintf(err, errlen, "cannot create a stream on device %s", dev->name);
            return st;
        }
    }
    s->devs[s->ndevs] = dev;
    s->streams[s->ndevs] = stream;
    *index = s->ndevs++;
    return TD_OK;
}

uint32_t td__session_device_count(const td__session *s) { return s->ndevs; }

td__device *td__session_device(const td__session *s, uint32_t index)
{
    return index < s->ndevs ? s->devs[index] : NULL;
}

static bool backend_can_pin(const td__backend *be)
{
    return be->host_pin != NULL && be->host_unpin != NULL;
}

bool td__session_can_pin(const td__session *s)
{
    for (uint32_t i = 0; i < s->ndevs; i++)
        if (backend_can_pin(s->devs[i]->backend)) return true;
    return false;
}

uint32_t td__session_host_pin(td__session *s, void *p, size_t nbytes)
{
    uint32_t pinned = 0;
    for (uint32_t i = 0; i < s->ndevs; i++) {
        const td__backend *be = s->devs[i]->backend;
        bool done = !backend_can_pin(be);
        for (uint32_t j = 0; j < i && !done; j++)
            done = s->devs[j]->backend == be; /* pinned for the whole backend once */
        if (done) continue;
        char err[256] = "";
        td_status st = be->host_pin(s->devs[i], p, nbytes, err, sizeof err);
        if (st == TD_OK) pinned |= 1u << i;
        else
            td__log(TD_LOG_DEBUG, "%s: %zu bytes of host memory stay unpinned: %s",
                    s->devs[i]->name, nbytes, err);
    }
    return pinned;
}

void td__session_host_unpin(td__session *s, uint32_t pinned, void *p)
{
    for (uint32_t i = 0; i < s->ndevs; i++)
        if (pinned & (1u << i)) s->devs[i]->backend->host_unpin(s->devs[i], p);
}

/* Make device `i` of the session current (the one the next op runs on). */
static void use_device(td__session *s, uint32_t i)
{
    s->dev = s->devs[i];
    s->stream = s->streams[i];
}

/* The index of `dev` in the session's devices, or UINT32_MAX. */
static uint32_t device_index(const td__session *s, const td__device *dev)
{
    for (uint32_t i = 0; i < s->ndevs; i++)
        if (s->devs[i] == dev) return i;
    return UINT32_MAX;
}

/* Host memory one tensor record costs the server besides its buffer: the record, its table
 * slot and allocator overhead. Measured (tests/hostile/memory.c, tensor_records_are_charged):
 * 262,144 records of EMPTY [0] grew a server by 91 MiB, about 360 bytes each with the
 * allocator's slack; 104,857 poison records by 47 MiB, about 470 bytes each. A poison
 * record also holds its message (TD_POISON_RECORD_BYTES). Charged to the session's
 * byte limit and the tenant's max_bytes like device bytes, so that a flood of tiny or
 * failed ops is refused like a flood of large ones (issue 10). Not part of
 * td__session_bytes(), which stays device bytes. */
#define TD_TENSOR_RECORD_BYTES 384u
/* A poison record: a record plus its message, kept to TD_POISON_MSG_MAX - 1 characters. */
#define TD_POISON_MSG_MAX 384u
#define TD_POISON_RECORD_BYTES (TD_TENSOR_RECORD_BYTES + TD_POISON_MSG_MAX)

/* Charge `cost` host bytes to the session and its tenant for `what` ("recording a tensor",
 * "f32 scratch of a matmul"). TD_OK, or TD_EQUOTA with a message in why. */
static td_status host_charge(td__session *s, uint64_t cost, const char *what, char *why,
                             size_t whylen)
{
    uint64_t total;
    if (s->limits.max_bytes != 0 &&
        (!td__add_u64(s->bytes + s->record_bytes, cost, &total) || total > s->limits.max_bytes)) {
        snprintf(why, whylen,
                 "%s (%llu bytes of host memory) would exceed the session "
                 "memory quota (%llu of %llu bytes in use, tensor records included)",
                 what, (unsigned long long)cost, (unsigned long long)(s->bytes + s->record_bytes),
                 (unsigned long long)s->limits.max_bytes);
        return TD_EQUOTA;
    }
    if (s->limits.quota != NULL) {
        char phrase[96];
        snprintf(phrase, sizeof phrase, "%s of", what);
        td_status st = td__quota_bytes_charge(s->limits.quota, cost, phrase, why, whylen);
        if (st != TD_OK) return st;
    }
    s->record_bytes += cost;
    return TD_OK;
}

/* A tensor record's host bytes (host_charge). */
static td_status record_charge(td__session *s, uint64_t cost, char *why, size_t whylen)
{
    return host_charge(s, cost, "recording a tensor", why, whylen);
}

static void record_uncharge(td__session *s, uint64_t cost)
{
    s->record_bytes -= cost;
    if (s->limits.quota != NULL) td__quota_bytes_uncharge(s->limits.quota, cost);
}

/* Host scratch a backend allocates for one op beyond its output: today the f32 copies that
 * a host-memory device makes of f16/bf16 matmul operands and its result (backends/cpu
 * widens both operands and computes the result in f32, 4 bytes an element). 0 for
 * everything else; saturates instead of overflowing. */
static uint64_t op_host_scratch(const td__session *s, const td__op *op, const td__view *in,
                                const td__view *out)
{
    if (op->opcode != TD_OP_MATMUL || !s->dev->backend->host_memory ||
        !td__dtype_is_half(out->desc.dtype))
        return 0;
    uint64_t n = 0;
    if (!td__add_u64((uint64_t)td__desc_nelem(&in[0].desc), (uint64_t)td__desc_nelem(&in[1].desc),
                     &n) ||
        !td__add_u64(n, (uint64_t)td__desc_nelem(&out->desc), &n) || !td__mul_u64(n, 4, &n))
        return UINT64_MAX;
    return n;
}

/* The test hook behind TENSORD_TEST_PERTURB_OP=NAME (engine/session.h): flip bit 6 of the
 * most significant byte of the op's first output element (for a float the exponent's top
 * bit: a wrong value far outside any tolerance; for an integer a large change), through the
 * backend's own read and write, so a device returns a wrong value `tensorctl verify` must
 * catch. */
static td_status perturb_output(td__session *s, const td__view *out, char *why, size_t whylen)
{
    if (td__desc_nbytes(&out->desc) == 0) return TD_OK;
    const td__backend *be = s->dev->backend;
    const size_t at = td_dtype_size((td_dtype)out->desc.dtype) - 1; /* little-endian top byte */
    unsigned char b = 0;
    td_status st = be->stream_sync != NULL ? be->stream_sync(s->dev, s->stream) : TD_OK;
    if (st == TD_OK) st = be->buffer_read(s->dev, s->stream, out->data, at, &b, 1);
    b ^= 0x40u;
    if (st == TD_OK) st = be->buffer_write(s->dev, s->stream, out->data, at, &b, 1);
    if (st != TD_OK) snprintf(why, whylen, "test hook TENSORD_TEST_PERTURB_OP failed");
    return st;
}

/* be->exec with the op's host scratch (op_host_scratch) charged to the session and its
 * tenant while it runs, so a few small f16 tensors cannot make the server allocate
 * gigabytes nobody is charged for. */
static td_status exec_charged(td__session *s, const td__op *op, const td__view *in,
                              const td__view *out, char *why, size_t whylen)
{
    const uint64_t scratch = op_host_scratch(s, op, in, out);
    if (scratch != 0) {
        td_status st = host_charge(s, scratch, "the f32 scratch of an f16/bf16 matmul", why,
                                   whylen);
        if (st != TD_OK) return st;
    }
    td_status st = s->dev->backend->exec(s->dev, s->stream, op, in, out, why, whylen);
    if (scratch != 0) record_uncharge(s, scratch);
    if (st == TD_OK && op->opcode == s->perturb_opcode) st = perturb_output(s, out, why, whylen);
    return st;
}

/* ---- big ops in pieces ----
 *
 * Why: the device worker shares a device between sessions in time slices between ops
 * (engine/worker.h), but one op can be long: an f32 4096^3 matmul is about 0.4 s on two
 * cores, an i64 2048^3 one many seconds. A CPU matmul whose work passes TD_SPLIT_MACS is
 * therefore run as pieces of whole output rows (or whole leading-batch slices), each an
 * ordinary backend call on views of the operands, and the session can stop between pieces
 * when its slice is used up (the op stays pending, its output not yet visible) or when its
 * client has gone. The pieces are a function of the shapes alone, and local:cpu runs the
 * very same pieces, so local and remote still give the same bits. GPU devices queue their
 * kernels asynchronously and are not split. */
#define TD_SPLIT_MACS_FLOAT (UINT64_C(1) << 30) /* ~20 ms at 50 GMAC/s */
#define TD_SPLIT_MACS_INT (UINT64_C(1) << 23)   /* the integer kernel is a plain loop */
#define TD_SPLIT_MIN_ROWS_FLOAT 256             /* each piece re-packs B: keep panels tall */

/* Plan pieces for `op` (validated, with views vin/vout); false when it runs whole. */
static bool split_plan(const td__session *s, const td__op *op, const td__view *vin,
                       const td__view *vout, td__split *sp)
{
    if (op->opcode != TD_OP_MATMUL || !s->dev->backend->host_memory) return false;
    const td__desc *a = &vin[0].desc, *b = &vin[1].desc, *o = &vout->desc;
    uint32_t r = o->rank;
    int64_t m = o->dims[r - 2], n = o->dims[r - 1], k = a->dims[a->rank - 1];
    uint64_t batch = 1, macs;
    for (uint32_t i = 0; i + 2 < r; i++) batch *= (uint64_t)o->dims[i];
    if (batch == 0 || m == 0 || n == 0 || k == 0) return false;
    bool fl = td__dtype_is_float(o->dtype);
    uint64_t limit = fl ? TD_SPLIT_MACS_FLOAT : TD_SPLIT_MACS_INT;
    if (__builtin_mul_overflow(batch * (uint64_t)m, (uint64_t)n * (uint64_t)k, &macs))
        macs = UINT64_MAX;
    if (macs <= 2 * limit) return false;
    memset(sp, 0, sizeof *sp);
    sp->op = *op;
    sp->in[0] = vin[0];
    sp->in[1] = vin[1];
    sp->out = *vout;
    size_t es = td_dtype_size((td_dtype)o->dtype);
    /* Rows of one output matrix a piece (at least min_rows for float: each piece re-packs
     * the right operand). */
    uint64_t rows = limit / ((uint64_t)n * (uint64_t)k);
    uint64_t min_rows = fl ? TD_SPLIT_MIN_ROWS_FLOAT : 1;
    if (rows < min_rows) rows = min_rows;
    if (rows > (uint64_t)m) rows = (uint64_t)m;
    /* Whole slices of the leading batch dim when it has at least 2 and one slice fits a
     * piece: an operand of full rank whose dim 0 matches is sliced with the output; one
     * with a broadcast dim 0 (size 1, or missing) is read whole by every piece. Otherwise
     * the pieces are row blocks of single output matrices (by_matrix), which also covers
     * a single matrix (every leading dim 1). */
    uint64_t per = r >= 3 && o->dims[0] > 0 ? macs / (uint64_t)o->dims[0] : macs;
    if (r < 3 || o->dims[0] < 2 || per > limit) {
        if (batch == 1 && rows == (uint64_t)m) return false; /* one piece: run it whole */
        sp->by_matrix = true;
        sp->m = m;
        sp->n = n;
        sp->k = k;
        sp->step = (int64_t)rows;
        sp->row_blocks = (m + sp->step - 1) / sp->step;
        sp->total = (int64_t)batch * sp->row_blocks;
        sp->batch = *o;
        sp->batch.rank = r - 2;
        td__matmul_batch_strides(a, o, sp->st_a);
        td__matmul_batch_strides(b, o, sp->st_b);
        return true;
    }
    uint64_t slices = limit / per;
    if (slices >= (uint64_t)o->dims[0]) return false;
    sp->axis_out = 0;
    sp->total = o->dims[0];
    sp->step = (int64_t)slices;
    sp->stride_out = (int64_t)((uint64_t)td__desc_nelem(o) / (uint64_t)o->dims[0] * es);
    const td__desc *ops2[2] = {a, b};
    for (int j = 0; j < 2; j++) {
        const td__desc *d = ops2[j];
        bool sliced = d->rank == r && d->dims[0] == o->dims[0];
        int64_t stride = sliced ? (int64_t)((uint64_t)td__desc_nelem(d) / (uint64_t)d->dims[0] *
                                            es)
                                : 0;
        if (j == 0) {
            sp->axis_in_a = sliced ? 0 : -1;
            sp->stride_a = stride;
        } else {
            sp->axis_in_b = sliced ? 0 : -1;
            sp->stride_b = stride;
        }
    }
    return true;
}

/* Matrix mode: run piece sp->next (a row block of one output matrix) as rank-2 views. */
static td_status split_matrix_piece(td__session *s, const td__split *sp, char *why,
                                    size_t whylen)
{
    int64_t p = sp->next / sp->row_blocks, r0 = (sp->next % sp->row_blocks) * sp->step;
    int64_t len = sp->m - r0 < sp->step ? sp->m - r0 : sp->step;
    int64_t off_a = 0, off_b = 0, rest = p;
    for (int d = (int)sp->batch.rank - 1; d >= 0; d--) { /* p as an index of the batch dims */
        int64_t idx = rest % sp->batch.dims[d];
        rest /= sp->batch.dims[d];
        off_a += idx * sp->st_a[d];
        off_b += idx * sp->st_b[d];
    }
    size_t es = td_dtype_size((td_dtype)sp->out.desc.dtype);
    td__view in[2], out;
    in[0].desc = (td__desc){.dtype = sp->in[0].desc.dtype, .rank = 2, .dims = {len, sp->k}};
    in[0].data = (char *)sp->in[0].data + (size_t)(off_a + r0 * sp->k) * es;
    in[1].desc = (td__desc){.dtype = sp->in[1].desc.dtype, .rank = 2, .dims = {sp->k, sp->n}};
    in[1].data = (char *)sp->in[1].data + (size_t)off_b * es;
    out.desc = (td__desc){.dtype = sp->out.desc.dtype, .rank = 2, .dims = {len, sp->n}};
    out.data = (char *)sp->out.data + (size_t)((p * sp->m + r0) * sp->n) * es;
    why[0] = '\0';
    return exec_charged(s, &sp->op, in, &out, why, whylen);
}

/* Run pieces of sp until it is done or `deadline` (now_ns clock) has passed; at least one
 * piece runs. Returns the backend's status; *done tells whether every piece has run. */
static uint64_t now_ns(void);
static td_status split_run(td__session *s, td__split *sp, uint64_t deadline, bool *done,
                           char *why, size_t whylen)
{
    *done = false;
    for (;;) {
        if (sp->by_matrix) {
            td_status st = split_matrix_piece(s, sp, why, whylen);
            if (st != TD_OK) return st;
            if (++sp->next >= sp->total) {
                *done = true;
                return TD_OK;
            }
            if (deadline != UINT64_MAX && now_ns() >= deadline) return TD_OK;
            continue;
        }
        int64_t i0 = sp->next, len = sp->total - i0 < sp->step ? sp->total - i0 : sp->step;
        td__view in[2] = {sp->in[0], sp->in[1]}, out = sp->out;
        if (sp->axis_in_a >= 0) {
            in[0].desc.dims[sp->axis_in_a] = len;
            in[0].data = (char *)in[0].data + i0 * sp->stride_a;
        }
        if (sp->axis_in_b >= 0) {
            in[1].desc.dims[sp->axis_in_b] = len;
            in[1].data = (char *)in[1].data + i0 * sp->stride_b;
        }
        out.desc.dims[sp->axis_out] = len;
        out.data = (char *)out.data + i0 * sp->stride_out;
        why[0] = '\0';
        td_status st = exec_charged(s, &sp->op, in, &out, why, whylen);
        if (st != TD_OK) return st;
        sp->next = i0 + len;
        if (sp->next >= sp->total) {
            *done = true;
            return TD_OK;
        }
        if (deadline != UINT64_MAX && now_ns() >= deadline) return TD_OK;
    }
}

/* Drop a tensor record: the tenant's tensor count at once; the buffer's bytes leave the
 * session when no other tensor of the session refers to it, and the tenant quota with the
 * buffer's last reference (td__buffer_unref), which a read still being sent may hold. */
static void tensor_free(td__session *s, td__tensor *t)
{
    if (t->buf != NULL) {
        if (--t->buf->tensor_refs == 0) s->bytes -= t->buf->nbytes;
        if (s->limits.quota != NULL) td__quota_tensor_uncharge(s->limits.quota, 0);
    }
    record_uncharge(s, t->record_bytes);
    td__buffer_unref(t->buf);
    td__free(t->poison_msg);
    td__free(t);
}

static void pending_drop(td__session *s);

void td__session_destroy(td__session *s)
{
    if (s == NULL) return;
    size_t pos = 0;
    uint64_t id;
    void *v;
    for (uint32_t i = 0; i < s->ndevs; i++)
        if (s->streams[i] != NULL && s->devs[i]->backend->stream_sync != NULL)
            s->devs[i]->backend->stream_sync(s->devs[i], s->streams[i]);
    pending_drop(s);
    while (td__idmap_next(&s->tensors, &pos, &id, &v)) tensor_free(s, v);
    td__idmap_fini(&s->tensors);
    for (uint32_t i = 0; i < s->ndevs; i++)
        if (s->streams[i] != NULL && s->devs[i]->backend->stream_destroy != NULL)
            s->devs[i]->backend->stream_destroy(s->devs[i], s->streams[i]);
    td__free(s);
}

/* Insert a poison record for `id` carrying `msg` (best effort: on allocation failure the id
 * simply stays unknown, which a later read also reports). Never replaces a live tensor. */
static void poison(td__session *s, uint64_t id, td_status st, const char *msg)
{
    if (td__idmap_get(&s->tensors, id) != NULL) return;
    char why[256];
    const uint32_t cost = TD_POISON_RECORD_BYTES;
    if (record_charge(s, cost, why, sizeof why) != TD_OK) return; /* over quota: stays unknown */
    td__tensor *t = td__calloc(1, sizeof *t);
    if (t != NULL) {
        t->poison = st;
        size_t n = strnlen(msg, TD_POISON_MSG_MAX - 1);
        t->poison_msg = td__malloc(n + 1);
        if (t->poison_msg != NULL) {
            memcpy(t->poison_msg, msg, n);
            t->poison_msg[n] = '\0';
        }
        t->record_bytes = cost;
    }
    if (t == NULL || t->poison_msg == NULL || !td__idmap_put(&s->tensors, id, t)) {
        if (t != NULL) td__free(t->poison_msg);
        td__free(t);
        record_uncharge(s, cost);
    }
}

/* Where an op being executed sits: its index in the batch, and for a step of a lowering the
 * composite it belongs to and the step's number. */
typedef struct exec_at {
    size_t index;
    const td__op *parent; /* the composite (NULL: op is the batch's own op) */
    uint32_t step;
    uint32_t depth;       /* lowerings this op is inside: 0 (a batch op), 1, 2 */
    uint64_t temp_base;   /* where the enclosing lowering's temporaries start (depth > 0) */
} exec_at;

/* How deep lowerings nest: a built lowering may use a composite as a step (attention's
 * softmax), which runs natively where the device has it and is lowered again, one level
 * down, where it does not. */
#define TD_LOWER_MAX_DEPTH 2

/* Format "op <i> (<name>): <reason>" (a lowering's step: "op <i> (<composite>): lowered
 * step <j> (<name>): <reason>"), dropping a "<name>: " prefix already in reason. */
static void op_message(char *buf, size_t len, const exec_at *at, const td__op *op,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void op_message(char *buf, size_t len, const exec_at *at, const td__op *op,
                       const char *fmt, ...)
{
    char reason[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    const char *name = td__op_name(op->opcode);
    size_t nl = strlen(name);
    const char *r = reason;
    if (strncmp(r, name, nl) == 0 && r[nl] == ':' && r[nl + 1] == ' ') r += nl + 2;
    if (at->parent != NULL)
        snprintf(buf, len, "op %zu (%s): lowered step %u (%s): %s", at->index,
                 td__op_name(at->parent->opcode), at->step, name, r);
    else
        snprintf(buf, len, "op %zu (%s): %s", at->index, name, r);
}

static td_status exec_one(td__session *s, const exec_at *at, const td__op *op, bool engine_ids,
                          char *msg, size_t msglen, bool *poisoned);

/* Run composite `op` (validated; in_desc its inputs' descs) as its lowering's primitive
 * steps: the table's fixed list (optable.h), or the list engine/lower.c builds for this op.
 * Temporaries get ids from TD_LOWER_TEMP_BASE (engine/session.h), are charged like any
 * tensor while they live, and are released whether the steps succeed or not; the last step
 * writes op->output. Returns the first failing step's status with its message. */
static td_status exec_lowered(td__session *s, const exec_at *outer, const td__op *op,
                              const td__lowering *lw, const td__desc *const *in_desc,
                              char *msg, size_t msglen)
{
    /* this program's temporaries: past the enclosing program's (each has at most
     * TD_LOWER_PROG_MAX steps) */
    const uint64_t base = outer->depth == 0 ? TD_LOWER_TEMP_BASE
                                            : outer->temp_base + TD_LOWER_PROG_MAX;
    const size_t index = outer->index;
    td__lower_prog prog;
    td_status st = TD_OK;
    if (lw->n_steps == 0) {
        char why[256];
        if ((st = td__lower_build(op, in_desc, base, &prog, why, sizeof why)) != TD_OK) {
            snprintf(msg, msglen, "op %zu (%s): %s", index, td__op_name(op->opcode), why);
            return st;
        }
    } else {
        prog.n = lw->n_steps;
        for (uint32_t j = 0; j < lw->n_steps; j++) {
            const td__lower_step *ls = &lw->steps[j];
            td__op *step = &prog.steps[j];
            *step = (td__op){.opcode = ls->opcode, .n_inputs = ls->n_inputs};
            for (uint32_t k = 0; k < ls->n_inputs; k++) {
                uint8_t src = ls->in[k];
                step->inputs[k] = src >= TD_LSTEP(0) ? base + (src - TD_LSTEP(0)) : op->inputs[src];
            }
            if (ls->attrs == TD_LATTR_AXIS_KEEP) {
                step->n_iattrs = 2;
                step->iattrs[0] = (int64_t)1 << op->iattrs[0];
                step->iattrs[1] = 1;
            } else if (ls->attrs == TD_LATTR_SAME) {
                step->n_iattrs = op->n_iattrs;
                memcpy(step->iattrs, op->iattrs, sizeof step->iattrs);
            }
            step->output = j + 1 == lw->n_steps ? op->output : base + j;
        }
    }
    for (uint32_t j = 0; j < prog.n && st == TD_OK; j++) {
        exec_at at = {.index = index, .parent = op, .step = j, .depth = outer->depth + 1,
                      .temp_base = base};
        bool poisoned;
        st = exec_one(s, &at, &prog.steps[j], true, msg, msglen, &poisoned);
    }
    for (uint32_t j = 0; j + 1 < prog.n; j++) {
        td__tensor *t = td__idmap_del(&s->tensors, base + j);
        if (t != NULL) tensor_free(s, t);
    }
    return st;
}

/* Execute one op. Returns TD_OK, or the failure status with the message in msg; *poisoned
 * is set when an input was poisoned (then msg holds that input's root-cause message and the
 * failure is not reported again). */
static td_status exec_one(td__session *s, const exec_at *at, const td__op *op, bool engine_ids,
                          char *msg, size_t msglen, bool *poisoned)
{
    *poisoned = false;
    if (op->output == 0 || (!engine_ids && op->output > TD_SESSION_ID_MAX)) {
        op_message(msg, msglen, at, op, "output id %llu is outside 1..%llu",
                   (unsigned long long)op->output, (unsigned long long)TD_SESSION_ID_MAX);
        return TD_EINVAL;
    }
    if (op->n_inputs > TD_OP_MAX_INPUTS) {
        op_message(msg, msglen, at, op, "%u inputs, at most %d", op->n_inputs,
                   TD_OP_MAX_INPUTS);
        return TD_EINVAL;
    }
    td__tensor *in[TD_OP_MAX_INPUTS];
    const td__desc *in_desc[TD_OP_MAX_INPUTS];
    for (uint32_t k = 0; k < op->n_inputs; k++) {
        in[k] = td__idmap_get(&s->tensors, op->inputs[k]);
        if (in[k] == NULL) {
            op_message(msg, msglen, at, op, "input %u: unknown tensor id %llu (never created, "
                       "or released)", k, (unsigned long long)op->inputs[k]);
            return TD_ENOTFOUND;
        }
        if (in[k]->poison != TD_OK) {
            snprintf(msg, msglen, "%s", in[k]->poison_msg ? in[k]->poison_msg : "poisoned input");
            *poisoned = true;
            return TD_EPOISONED;
        }
        in_desc[k] = &in[k]->desc;
    }
    if (td__idmap_get(&s->tensors, op->output) != NULL) {
        op_message(msg, msglen, at, op, "output id %llu is already in use",
                   (unsigned long long)op->output);
        return TD_EINVAL;
    }
    if (at->parent == NULL && s->ndevs > 1) {
        /* The op runs where its inputs are; they must all be on one device (no silent
         * copies: the client moves tensors with ToDevice). */
        uint32_t d = op->n_inputs > 0 ? device_index(s, in[0]->buf->dev) : 0;
        for (uint32_t k = 1; k < op->n_inputs; k++) {
            if (in[k]->buf->dev != in[0]->buf->dev) {
                op_message(msg, msglen, at, op,
                           "input 0 is on device %s and input %u on device %s; an op's inputs "
                           "must be on one device (move one with td_to_device)",
                           in[0]->buf->dev->name, k, in[k]->buf->dev->name);
                return TD_EINVAL;
            }
        }
        if (d == UINT32_MAX) {
            op_message(msg, msglen, at, op, "input 0 is on device %s, not one of the session's",
                       in[0]->buf->dev->name);
            return TD_EINTERNAL;
        }
        use_device(s, d);
    }
    td__desc od;
    char why[512];
    td_status st = td__op_infer(op, in_desc, &od, why, sizeof why);
    if (st != TD_OK) {
        op_message(msg, msglen, at, op, "%s", why);
        return st;
    }
    const td__backend *be = s->dev->backend;
    const td__lowering *lw = td__op_lowering(td__op_row_of(op->opcode));
    bool native = be->supports_op != NULL ? be->supports_op(s->dev, op, in_desc, &od)
                                          : td__op_default_supports(op->opcode);
    if (lw != NULL && at->depth < TD_LOWER_MAX_DEPTH && (!native || s->force_lowering))
        return exec_lowered(s, at, op, lw, in_desc, msg, msglen);
    if (!native) {
        op_message(msg, msglen, at, op, "not supported on device %s for dtype %s", s->dev->name,
                   td__dtype_str(op->n_inputs > 0 ? in_desc[0]->dtype : od.dtype));
        return TD_EUNSUPPORTED;
    }
    size_t nbytes = td__desc_nbytes(&od);
    bool alias = op->opcode == TD_OP_RESHAPE;
    uint64_t charge = alias ? 0 : nbytes, total;
    if (s->limits.max_tensors != 0 && s->tensors.len >= s->limits.max_tensors) {
        op_message(msg, msglen, at, op, "session tensor quota of %llu reached",
                   (unsigned long long)s->limits.max_tensors);
        return TD_EQUOTA;
    }
    if (s->limits.max_bytes != 0 &&
        (!td__add_u64(s->bytes + s->record_bytes, charge, &total) ||
         total > s->limits.max_bytes)) {
        op_message(msg, msglen, at, op,
                   "allocating %llu bytes would exceed the session memory quota "
                   "(%llu of %llu bytes in use)",
                   (unsigned long long)charge, (unsigned long long)(s->bytes + s->record_bytes),
                   (unsigned long long)s->limits.max_bytes);
        return TD_EQUOTA;
    }
    td__quota *q = s->limits.quota;
    if (q != NULL && (st = td__quota_tensor_charge(q, charge, nbytes, why, sizeof why)) != TD_OK) {
        op_message(msg, msglen, at, op, "%s", why);
        return st;
    }
    if ((st = record_charge(s, TD_TENSOR_RECORD_BYTES, why, sizeof why)) != TD_OK) {
        if (q != NULL) td__quota_tensor_uncharge(q, charge);
        op_message(msg, msglen, at, op, "%s", why);
        return st;
    }
    td__tensor *t = td__calloc(1, sizeof *t);
    if (t == NULL) {
        record_uncharge(s, TD_TENSOR_RECORD_BYTES);
        if (q != NULL) td__quota_tensor_uncharge(q, charge);
        op_message(msg, msglen, at, op, "out of host memory for the tensor record");
        return TD_ENOMEM;
    }
    t->record_bytes = TD_TENSOR_RECORD_BYTES;
    t->desc = od;
    if (alias) {
        t->buf = in[0]->buf;
        td__buffer_ref(t->buf);
    } else {
        /* Charged above, before the allocation (the CPU pool pre-faults large buffers). */
        st = td__buffer_create(s->dev, s->stream, nbytes, &t->buf);
        if (st != TD_OK) {
            record_uncharge(s, t->record_bytes);
            td__free(t);
            if (q != NULL) td__quota_tensor_uncharge(q, charge);
            op_message(msg, msglen, at, op, "cannot allocate %zu bytes on %s", nbytes,
                       s->dev->name);
            return st;
        }
        /* From here the buffer holds the tenant's bytes: its last unref gives them back. */
        t->buf->quota = q;
        t->buf->quota_bytes = q != NULL ? charge : 0;
        {
            /* EMPTY is executed as FULL(0): device memory may be reused from another
             * session (allocator or pool), and must never show its old contents. */
            td__op zero_fill;
            const td__op *run = op;
            if (op->opcode == TD_OP_EMPTY) {
                zero_fill = *op;
                zero_fill.opcode = TD_OP_FULL;
                zero_fill.fattrs[0] = 0.0;
                run = &zero_fill;
            }
            td__view vin[TD_OP_MAX_INPUTS], vout = {.desc = od, .data = t->buf->data};
            for (uint32_t k = 0; k < op->n_inputs; k++)
                vin[k] = (td__view){.desc = in[k]->desc, .data = in[k]->buf->data};
            why[0] = '\0';
            td__split sp;
            if (split_plan(s, run, vin, &vout, &sp)) {
                if (s->defer_ok && at->parent == NULL) {
                    /* td__session_exec_slice runs the pieces and finishes the tensor. */
                    s->pend = (struct pending){.active = true, .index = at->index, .op = *op,
                                               .t = t, .q = q, .sp = sp,
                                               .dev = device_index(s, s->dev)};
                    return TD_OK;
                }
                bool done;
                st = split_run(s, &sp, UINT64_MAX, &done, why, sizeof why);
            } else {
                st = nbytes == 0 && op->opcode == TD_OP_EMPTY
                         ? TD_OK
                         : exec_charged(s, run, vin, &vout, why, sizeof why);
            }
            if (st != TD_OK) {
                record_uncharge(s, t->record_bytes);
                td__buffer_unref(t->buf);
                td__free(t);
                if (q != NULL) td__quota_tensor_uncharge(q, 0);
                op_message(msg, msglen, at, op, "%s", why[0] ? why : td_status_message(st));
                return st;
            }
        }
    }
    if (!td__idmap_put(&s->tensors, op->output, t)) {
        record_uncharge(s, t->record_bytes);
        td__buffer_unref(t->buf);
        td__free(t);
        if (q != NULL) td__quota_tensor_uncharge(q, 0);
        op_message(msg, msglen, at, op, "out of host memory for the tensor table");
        return TD_ENOMEM;
    }
    if (t->buf->tensor_refs++ == 0) s->bytes += t->buf->nbytes;
    return TD_OK;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Abandon a pending split op (its session is being destroyed, or a different batch came):
 * its tensor was never visible; give back what it holds. */
static void pending_drop(td__session *s)
{
    if (!s->pend.active) return;
    td__tensor *t = s->pend.t;
    record_uncharge(s, t->record_bytes);
    td__buffer_unref(t->buf);
    td__free(t);
    if (s->pend.q != NULL) td__quota_tensor_uncharge(s->pend.q, 0);
    s->pend.active = false;
}

/* Run the pending op's pieces until done or the deadline. Returns TD_OK with *done, or the
 * failure (the op then failed as a whole; msg says why). */
static td_status pending_step(td__session *s, uint64_t deadline, bool *done, char *msg,
                              size_t msglen)
{
    char why[512];
    exec_at at = {.index = s->pend.index, .parent = NULL, .step = 0};
    use_device(s, s->pend.dev);
    td_status st = split_run(s, &s->pend.sp, deadline, done, why, sizeof why);
    if (st != TD_OK) {
        op_message(msg, msglen, &at, &s->pend.op, "%s", why[0] ? why : td_status_message(st));
        pending_drop(s);
        return st;
    }
    if (!*done) return TD_OK;
    td__tensor *t = s->pend.t;
    s->pend.active = false;
    if (!td__idmap_put(&s->tensors, s->pend.op.output, t)) {
        record_uncharge(s, t->record_bytes);
        td__buffer_unref(t->buf);
        td__free(t);
        if (s->pend.q != NULL) td__quota_tensor_uncharge(s->pend.q, 0);
        op_message(msg, msglen, &at, &s->pend.op, "out of host memory for the tensor table");
        return TD_ENOMEM;
    }
    if (t->buf->tensor_refs++ == 0) s->bytes += t->buf->nbytes;
    return TD_OK;
}

size_t td__session_exec_slice(td__session *s, const td__op *ops, size_t first, size_t n,
                              uint64_t budget_ns, bool engine_ids, td__failure_fn on_failure,
                              void *arg, size_t *failures)
{
    uint64_t start = budget_ns == UINT64_MAX ? 0 : now_ns();
    uint64_t deadline = budget_ns == UINT64_MAX ? UINT64_MAX : start + budget_ns;
    size_t i = first;
    if (s->pend.active && (s->pend.ops != ops || s->pend.index != first)) pending_drop(s);
    while (i < n) {
        char msg[1024];
        bool poisoned = false;
        const td__op *op = &ops[i];
        td_status st;
        if (s->pend.active) { /* resume the split op at ops[i] */
            bool done;
            st = pending_step(s, deadline, &done, msg, sizeof msg);
            if (st == TD_OK && !done) return i;
        } else {
            exec_at at = {.index = i, .parent = NULL, .step = 0};
            s->defer_ok = true;
            st = exec_one(s, &at, op, engine_ids, msg, sizeof msg, &poisoned);
            s->defer_ok = false;
            if (st == TD_OK && s->pend.active) {
                s->pend.ops = ops;
                bool done;
                st = pending_step(s, deadline, &done, msg, sizeof msg);
                if (st == TD_OK && !done) return i;
            }
        }
        if (st != TD_OK) {
            /* A refused output id is never recorded: it may be a live tensor or an engine
             * temporary, neither of which this op may touch. */
            if (op->output != 0 && (engine_ids || op->output <= TD_SESSION_ID_MAX))
                poison(s, op->output, poisoned ? TD_EPOISONED : st, msg);
            if (!poisoned) {
                if (failures != NULL) (*failures)++;
                if (on_failure != NULL) on_failure(arg, (uint32_t)i, st, msg);
            }
        }
        i++;
        if (budget_ns != UINT64_MAX && i < n && now_ns() - start >= budget_ns) break;
    }
    use_device(s, 0);
    return i;
}

size_t td__session_exec(td__session *s, const td__op *ops, size_t n, td__failure_fn on_failure,
                        void *arg)
{
    size_t failures = 0;
    td__session_exec_slice(s, ops, 0, n, UINT64_MAX, false, on_failure, arg, &failures);
    return failures;
}

/* Find a live, unpoisoned tensor and check [offset, offset + nbytes) lies inside it. */
static td_status find_range(td__session *s, uint64_t id, uint64_t offset, size_t nbytes,
                            td__tensor **out, char *err, size_t errlen)
{
    td__tensor *t = td__idmap_get(&s->tensors, id);
    if (t == NULL) {
        snprintf(err, errlen, "unknown tensor id %llu (never created, or released)",
                 (unsigned long long)id);
        return TD_ENOTFOUND;
    }
    if (t->poison != TD_OK) {
        snprintf(err, errlen, "tensor %llu depends on a failed op: %s", (unsigned long long)id,
                 t->poison_msg ? t->poison_msg : "?");
        return TD_EPOISONED;
    }
    uint64_t end;
    if (!td__add_u64(offset, nbytes, &end) || end > t->buf->nbytes) {
        snprintf(err, errlen, "range [%llu, +%zu) is outside tensor %llu of %zu bytes",
                 (unsigned long long)offset, nbytes, (unsigned long long)id, t->buf->nbytes);
        return TD_ERANGE;
    }
    *out = t;
    return TD_OK;
}

/* Copy nbytes of device memory from src to dst on dev, ordered on `stream` (the session's
 * stream on dev that both buffers belong to). */
static td_status device_copy(td__device *dev, void *stream, void *dst, const void *src,
                             size_t nbytes)
{
    const td__backend *be = dev->backend;
    if (be->buffer_copy != NULL) return be->buffer_copy(dev, stream, dst, src, nbytes);
    if (be->host_memory) {
        memcpy(dst, src, nbytes);
        return TD_OK;
    }
    void *tmp = td__malloc(nbytes);
    if (tmp == NULL) return TD_ENOMEM;
    td_status st = be->buffer_read(dev, stream, src, 0, tmp, nbytes);
    if (st == TD_OK) st = be->buffer_write(dev, stream, dst, 0, tmp, nbytes);
    td__free(tmp);
    return st;
}

/* Give tensor `id` (t) a buffer of its own before it is written (copy-on-write). The
 * buffer may be shared by a RESHAPE alias recorded before the write, which must keep the
 * old contents, or by a read whose payload slices the network layer is still sending.
 * The copy is a new buffer and is charged like one, before it is allocated: to the session
 * (less the old buffer when t was the last of the session's tensors on it) and to the
 * tenant, which keeps paying for the old buffer until its last reference goes.
 * Returns TD_OK, TD_EQUOTA, or the allocation or copy failure, with a message in err. */
static td_status unshare(td__session *s, uint64_t id, td__tensor *t, bool whole, char *err,
                         size_t errlen)
{
    td__buffer *old = t->buf;
    if (atomic_load(&old->refs) == 1) return TD_OK;
    size_t nbytes = old->nbytes;
    uint64_t freed = old->tensor_refs == 1 ? old->nbytes : 0, total;
    if (s->limits.max_bytes != 0 &&
        (!td__add_u64(s->bytes - freed + s->record_bytes, nbytes, &total) ||
         total > s->limits.max_bytes)) {
        snprintf(err, errlen,
                 "copy-on-write of tensor %llu (shared with an alias or a read being sent): "
                 "%zu more bytes would exceed the session memory quota (%llu of %llu bytes in "
                 "use)",
                 (unsigned long long)id, nbytes,
                 (unsigned long long)(s->bytes + s->record_bytes),
                 (unsigned long long)s->limits.max_bytes);
        return TD_EQUOTA;
    }
    td__quota *q = s->limits.quota;
    char why[384];
    if (q != NULL && nbytes > 0 &&
        td__quota_bytes_charge(q, nbytes, "copying a shared tensor of", why, sizeof why) !=
            TD_OK) {
        snprintf(err, errlen, "copy-on-write of tensor %llu: %s", (unsigned long long)id, why);
        return TD_EQUOTA;
    }
    td__buffer *nb;
    td_status st = td__buffer_create(old->dev, old->stream, nbytes, &nb);
    if (st != TD_OK) {
        if (q != NULL && nbytes > 0) td__quota_bytes_uncharge(q, nbytes);
        snprintf(err, errlen, "cannot copy tensor %llu before writing it (%s)",
                 (unsigned long long)id, td_status_message(st));
        return st;
    }
    nb->quota = nbytes > 0 ? q : NULL;
    nb->quota_bytes = nb->quota != NULL ? nbytes : 0;
    if (!whole) {
        st = device_copy(old->dev, old->stream, nb->data, old->data, nbytes);
        if (st != TD_OK) {
            td__buffer_unref(nb);
            snprintf(err, errlen, "cannot copy tensor %llu before writing it (%s)",
                     (unsigned long long)id, td_status_message(st));
            return st;
        }
    }
    nb->tensor_refs = 1;
    old->tensor_refs--;
    s->bytes = s->bytes - freed + nbytes;
    td__buffer_unref(old);
    t->buf = nb;
    return TD_OK;
}

/* The tensor a write of [offset, +nbytes) goes to, its buffer made its own (copy-on-write);
 * *t NULL with TD_OK: nothing to write (nbytes 0). */
static td_status write_target(td__session *s, uint64_t id, uint64_t offset, size_t nbytes,
                              td__tensor **t, char *err, size_t errlen)
{
    td_status st = find_range(s, id, offset, nbytes, t, err, errlen);
    if (st != TD_OK || nbytes == 0) {
        *t = NULL;
        return st;
    }
    return unshare(s, id, *t, offset == 0 && nbytes == (*t)->buf->nbytes, err, errlen);
}

td_status td__session_write(td__session *s, uint64_t id, uint64_t offset, const void *src,
                            size_t nbytes, char *err, size_t errlen)
{
    td__tensor *t;
    td_status st = write_target(s, id, offset, nbytes, &t, err, errlen);
    if (st != TD_OK || t == NULL) return st;
    td__device *dev = t->buf->dev;
    st = dev->backend->buffer_write(dev, t->buf->stream, t->buf->data, (size_t)offset, src,
                                    nbytes);
    if (st != TD_OK) snprintf(err, errlen, "device write to tensor %llu failed",
                              (unsigned long long)id);
    return st;
}

td_status td__session_write_queued(td__session *s, uint64_t id, uint64_t offset,
                                   const void *src, size_t nbytes, td__fence *fence, char *err,
                                   size_t errlen)
{
    *fence = (td__fence){0};
    td__tensor *t;
    td_status st = write_target(s, id, offset, nbytes, &t, err, errlen);
    if (st != TD_OK || t == NULL) return st;
    td__device *dev = t->buf->dev;
    const td__backend *be = dev->backend;
    void *stream = t->buf->stream;
    bool queued = false;
    if (be->buffer_write_queued != NULL && be->fence_record != NULL &&
        be->fence_finish != NULL && stream != NULL)
        st = be->buffer_write_queued(dev, stream, t->buf->data, (size_t)offset, src, nbytes,
                                     &queued);
    else
        st = be->buffer_write(dev, stream, t->buf->data, (size_t)offset, src, nbytes);
    if (st == TD_OK && queued) {
        fence->dev = dev;
        if (be->fence_record(dev, stream, &fence->handle) != TD_OK) {
            fence->handle = NULL; /* no fence: the copy is waited for here */
            st = be->stream_sync(dev, stream);
        }
    }
    if (st != TD_OK) {
        *fence = (td__fence){0};
        snprintf(err, errlen, "device write to tensor %llu failed", (unsigned long long)id);
    }
    return st;
}

td_status td__fence_finish(td__fence *fence)
{
    if (fence->handle == NULL) return TD_OK;
    td_status st = fence->dev->backend->fence_finish(fence->dev, fence->handle);
    *fence = (td__fence){0};
    return st;
}

td_status td__session_write_fill(td__session *s, uint64_t id, uint64_t offset, size_t nbytes,
                                 td_status (*fill)(void *arg, size_t off, void *to, size_t len),
                                 void *arg, char *err, size_t errlen)
{
    td__tensor *t;
    td_status st = write_target(s, id, offset, nbytes, &t, err, errlen);
    if (st != TD_OK || t == NULL) return st;
    td__device *dev = t->buf->dev;
    if (dev->backend->buffer_write_fill != NULL) {
        st = dev->backend->buffer_write_fill(dev, t->buf->stream, t->buf->data, (size_t)offset,
                                             nbytes, fill, arg);
    } else {
        void *tmp = td__malloc(nbytes);
        st = tmp == NULL ? TD_ENOMEM : fill(arg, 0, tmp, nbytes);
        if (st == TD_OK)
            st = dev->backend->buffer_write(dev, t->buf->stream, t->buf->data, (size_t)offset,
                                            tmp, nbytes);
        td__free(tmp);
    }
    if (st == TD_ENOMEM)
        snprintf(err, errlen, "write to tensor %llu: out of host memory",
                 (unsigned long long)id);
    else if (st == TD_EPROTO || st == TD_ERANGE)
        snprintf(err, errlen, "write to tensor %llu: unreadable payload",
                 (unsigned long long)id);
    else if (st != TD_OK)
        snprintf(err, errlen, "device write to tensor %llu failed", (unsigned long long)id);
    return st;
}

td_status td__session_read(td__session *s, uint64_t id, uint64_t offset, void *dst,
                           size_t nbytes, char *err, size_t errlen)
{
    td__tensor *t;
    td_status st = find_range(s, id, offset, nbytes, &t, err, errlen);
    if (st != TD_OK || nbytes == 0) return st;
    td__device *dev = t->buf->dev;
    st = dev->backend->buffer_read(dev, t->buf->stream, t->buf->data, (size_t)offset, dst,
                                   nbytes);
    if (st != TD_OK) snprintf(err, errlen, "device read of tensor %llu failed",
                              (unsigned long long)id);
    return st;
}

td_status td__session_lookup(td__session *s, uint64_t id, td__desc *desc, td__buffer **buf,
                             char *err, size_t errlen)
{
    td__tensor *t;
    td_status st = find_range(s, id, 0, 0, &t, err, errlen);
    if (st != TD_OK) return st;
    *desc = t->desc;
    *buf = NULL;
    if (t->buf->dev->backend->host_memory) {
        td__buffer_ref(t->buf);
        *buf = t->buf;
    }
    return TD_OK;
}

td_status td__session_detach_copy(td__session *s, uint64_t id, td__buffer **out, char *err,
                                  size_t errlen)
{
    *out = NULL;
    td__tensor *t;
    td_status st = find_range(s, id, 0, 0, &t, err, errlen);
    if (st != TD_OK) return st;
    td__buffer *src = t->buf;
    td__device *dev = src->dev;
    const td__backend *be = dev->backend;
    const size_t nbytes = td__desc_nbytes(&t->desc);
    if (be->host_memory || be->buffer_copy == NULL || nbytes == 0 || nbytes > src->nbytes) {
        snprintf(err, errlen, "tensor %llu on %s: no device copy (host memory, no "
                 "device-to-device copy, or empty)", (unsigned long long)id, dev->name);
        return TD_EUNSUPPORTED;
    }
    td__buffer *nb = NULL;
    if ((st = td__buffer_create(dev, NULL, nbytes, &nb)) != TD_OK) {
        snprintf(err, errlen, "no room on %s for a copy of tensor %llu (%zu bytes)", dev->name,
                 (unsigned long long)id, nbytes);
        return st;
    }
    st = be->buffer_copy(dev, src->stream, nb->data, src->data, nbytes);
    /* The copy is queued behind the session's earlier kernels: a fence marks it rather
     * than a wait for the stream, which stalled this worker behind the previous training
     * step on every upload (BENCHMARKS.md, H100 2026-12-06 20:05). */
    const bool fenced = st == TD_OK && src->stream != NULL && be->fence_record != NULL &&
                        be->fence_finish != NULL &&
                        be->fence_record(dev, src->stream, &nb->fence) == TD_OK;
    if (!fenced) nb->fence = NULL; /* a failed record leaves nothing to finish */
    if (!fenced && st == TD_OK && src->stream != NULL && be->stream_sync != NULL)
        st = be->stream_sync(dev, src->stream);
    if (st != TD_OK) {
        /* not idle: the copy may still be queued, so the unref waits for the device */
        td__buffer_unref(nb);
        snprintf(err, errlen, "copying tensor %llu on %s failed (%s)", (unsigned long long)id,
                 dev->name, td_status_message(st));
        return st;
    }
    nb->idle = true;
    *out = nb;
    return TD_OK;
}

void td__session_release(td__session *s, const uint64_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        td__tensor *t = td__idmap_del(&s->tensors, ids[i]);
        if (t != NULL) tensor_free(s, t);
    }
}

void td__session_set_force_lowering(td__session *s, bool on) { s->force_lowering = on; }

void td__session_poison(td__session *s, uint64_t id, td_status status, const char *message)
{
    if (id == 0 || id > TD_SESSION_ID_MAX) return; /* the engine's range is never touched */
    poison(s, id, status, message);
}

td_status td__session_sync(td__session *s, char *err, size_t errlen)
{
    for (uint32_t i = 0; i < s->ndevs; i++) {
        td__device *d = s->devs[i];
        if (s->streams[i] == NULL || d->backend->stream_sync == NULL) continue;
        td_status st = d->backend->stream_sync(d, s->streams[i]);
        if (st != TD_OK) {
            snprintf(err, errlen, "device %s failed while synchronising", d->name);
            return st;
        }
    }
    return TD_OK;
}

/* Copy nbytes from src on device `from` to dst on device `to` (different devices; each
 * buffer ordered on its stream, fs and ts): memcpy between host-memory devices, one backend
 * transfer when one side is host memory, the backend's buffer_copy_peer between two devices
 * of one backend (peer to peer), else through a bounce buffer in host memory,
 * TD_TO_DEVICE_BOUNCE bytes at a time. The caller has synchronised both streams. */
#define TD_TO_DEVICE_BOUNCE ((size_t)4 << 20)
static td_status cross_copy(td__device *from, void *fs, const void *src, td__device *to,
                            void *ts, void *dst, size_t nbytes)
{
    const td__backend *fb = from->backend, *tb = to->backend;
    if (nbytes == 0) return TD_OK;
    if (fb->host_memory && tb->host_memory) {
        memcpy(dst, src, nbytes);
        return TD_OK;
    }
    if (fb->host_memory) return tb->buffer_write(to, ts, dst, 0, src, nbytes);
    if (tb->host_memory) return fb->buffer_read(from, fs, src, 0, dst, nbytes);
    if (fb == tb && tb->buffer_copy_peer != NULL) {
        td_status st = tb->buffer_copy_peer(to, dst, from, src, nbytes);
        if (st != TD_EUNSUPPORTED) return st;
    }
    size_t chunk = nbytes < TD_TO_DEVICE_BOUNCE ? nbytes : TD_TO_DEVICE_BOUNCE;
    void *tmp = td__malloc(chunk);
    if (tmp == NULL) return TD_ENOMEM;
    td_status st = TD_OK;
    for (size_t off = 0; off < nbytes && st == TD_OK; off += chunk) {
        size_t n = nbytes - off < chunk ? nbytes - off : chunk;
        st = fb->buffer_read(from, fs, src, off, tmp, n);
        if (st == TD_OK) st = tb->buffer_write(to, ts, (char *)dst + off, 0, tmp, n);
    }
    td__free(tmp);
    return st;
}

td_status td__session_to_device(td__session *s, uint64_t src_id, uint64_t out_id,
                                uint32_t device, char *err, size_t errlen)
{
    if (out_id == 0 || out_id > TD_SESSION_ID_MAX) {
        snprintf(err, errlen, "to_device: output id %llu is outside 1..%llu",
                 (unsigned long long)out_id, (unsigned long long)TD_SESSION_ID_MAX);
        return TD_EINVAL;
    }
    if (td__idmap_get(&s->tensors, out_id) != NULL) {
        snprintf(err, errlen, "to_device: output id %llu is already in use",
                 (unsigned long long)out_id);
        return TD_EINVAL;
    }
    if (device >= s->ndevs) {
        snprintf(err, errlen, "to_device: device index %u, but the session has %u device%s",
                 device, s->ndevs, s->ndevs == 1 ? "" : "s");
        poison(s, out_id, TD_EINVAL, err);
        return TD_EINVAL;
    }
    td__tensor *src = td__idmap_get(&s->tensors, src_id);
    if (src == NULL) {
        snprintf(err, errlen, "to_device: unknown tensor id %llu (never created, or released)",
                 (unsigned long long)src_id);
        poison(s, out_id, TD_ENOTFOUND, err);
        return TD_ENOTFOUND;
    }
    if (src->poison != TD_OK) { /* like an op: the output is poisoned, nothing is reported */
        poison(s, out_id, TD_EPOISONED, src->poison_msg ? src->poison_msg : "poisoned input");
        snprintf(err, errlen, "%s", src->poison_msg ? src->poison_msg : "poisoned input");
        return TD_EPOISONED;
    }
    td__device *to = s->devs[device], *from = src->buf->dev;
    const size_t nbytes = src->buf->nbytes;
    char why[384];
    td_status st = TD_OK;
    uint64_t total;
    if (s->limits.max_tensors != 0 && s->tensors.len >= s->limits.max_tensors) {
        snprintf(err, errlen, "to_device: session tensor quota of %llu reached",
                 (unsigned long long)s->limits.max_tensors);
        st = TD_EQUOTA;
    } else if (s->limits.max_bytes != 0 &&
               (!td__add_u64(s->bytes + s->record_bytes, nbytes, &total) ||
                total > s->limits.max_bytes)) {
        snprintf(err, errlen,
                 "to_device: allocating %zu bytes would exceed the session memory quota "
                 "(%llu of %llu bytes in use)",
                 nbytes, (unsigned long long)(s->bytes + s->record_bytes),
                 (unsigned long long)s->limits.max_bytes);
        st = TD_EQUOTA;
    }
    td__quota *q = s->limits.quota;
    if (st == TD_OK && q != NULL &&
        (st = td__quota_tensor_charge(q, nbytes, nbytes, why, sizeof why)) != TD_OK)
        snprintf(err, errlen, "to_device: %s", why);
    if (st != TD_OK) {
        poison(s, out_id, st, err);
        return st;
    }
    if ((st = record_charge(s, TD_TENSOR_RECORD_BYTES, why, sizeof why)) != TD_OK) {
        if (q != NULL) td__quota_tensor_uncharge(q, nbytes);
        snprintf(err, errlen, "to_device: %s", why);
        poison(s, out_id, st, err);
        return st;
    }
    td__tensor *t = td__calloc(1, sizeof *t);
    td__buffer *nb = NULL;
    if (t == NULL || (st = td__buffer_create(to, s->streams[device], nbytes, &nb)) != TD_OK) {
        st = t == NULL ? TD_ENOMEM : st;
        snprintf(err, errlen, "to_device: cannot allocate %zu bytes on %s", nbytes, to->name);
        goto fail;
    }
    nb->quota = q;
    nb->quota_bytes = q != NULL ? nbytes : 0;
    t->record_bytes = TD_TENSOR_RECORD_BYTES;
    t->desc = src->desc;
    t->buf = nb;
    /* Both streams synchronised: the source's producers are done, and so is the
     * destination's allocation (stream-ordered; buffer_copy_peer is not on that stream). */
    uint32_t fi = device_index(s, from);
    if (fi != UINT32_MAX && s->streams[fi] != NULL && from->backend->stream_sync != NULL)
        st = from->backend->stream_sync(from, s->streams[fi]);
    if (st == TD_OK && from != to && s->streams[device] != NULL && to->backend->stream_sync != NULL)
        st = to->backend->stream_sync(to, s->streams[device]);
    if (st == TD_OK)
        st = from == to ? device_copy(to, s->streams[device], nb->data, src->buf->data, nbytes)
                        : cross_copy(from, src->buf->stream, src->buf->data, to,
                                     s->streams[device], nb->data, nbytes);
    if (st != TD_OK) {
        snprintf(err, errlen, "to_device: copying tensor %llu (%zu bytes) from %s to %s failed "
                 "(%s)", (unsigned long long)src_id, nbytes, from->name, to->name,
                 td_status_message(st));
        goto fail;
    }
    if (!td__idmap_put(&s->tensors, out_id, t)) {
        st = TD_ENOMEM;
        snprintf(err, errlen, "to_device: out of host memory for the tensor table");
        goto fail;
    }
    nb->tensor_refs = 1;
    s->bytes += nbytes;
    return TD_OK;
fail:
    record_uncharge(s, TD_TENSOR_RECORD_BYTES);
    if (nb != NULL) {
        td__buffer_unref(nb); /* gives the tenant's bytes back */
        if (q != NULL) td__quota_tensor_uncharge(q, 0);
    } else if (q != NULL) {
        td__quota_tensor_uncharge(q, nbytes);
    }
    td__free(t);
    poison(s, out_id, st, err);
    return st;
}

uint64_t td__session_tensor_count(const td__session *s) { return s->tensors.len; }
uint64_t td__session_bytes(const td__session *s) { return s->bytes; }

td_status td__session_write_ptr(td__session *s, uint64_t id, uint64_t offset, size_t nbytes,
                                void **dst, char *err, size_t errlen)
{
    td__tensor *t;
    *dst = NULL;
    td_status st = write_target(s, id, offset, nbytes, &t, err, errlen);
    if (st != TD_OK || t == NULL) return st;
    if (t->buf->dev->backend->host_memory) *dst = (char *)t->buf->data + offset;
    return TD_OK;
}
