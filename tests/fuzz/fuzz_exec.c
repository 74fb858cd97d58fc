/* fuzz_exec.c — see fuzz_exec.h. */
#include "tests/fuzz/fuzz_exec.h"
#include "engine/device.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void fuzz_trace(const char *fmt, ...)
{
    static int on = -1;
    if (on < 0) on = getenv("FUZZ_EXEC_TRACE") != NULL;
    if (!on) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

td__session *fuzz_cpu_session(void)
{
    static td__session *s;
    if (s == NULL) {
        char err[256];
        td__device *dev = NULL;
        if (td__devices_init(err, sizeof err) != TD_OK || (dev = td__device_find("cpu")) == NULL) {
            fprintf(stderr, "fuzz: no cpu device: %s\n", err);
            abort();
        }
        td__session_limits lim = {.max_bytes = 64u << 20, .max_tensors = 4096};
        if (td__session_create(dev, &lim, &s) != TD_OK) abort();
    }
    return s;
}

static bool small(const td__desc *d) { return td__desc_nbytes(d) <= FUZZ_EXEC_MAX_BYTES; }

bool fuzz_exec_cheap(const td__op *op, const td__desc *const *in, const td__desc *out)
{
    if (!small(out)) return false;
    for (uint32_t k = 0; k < op->n_inputs; k++)
        if (!small(in[k])) return false;
    if (op->opcode == TD_OP_MATMUL) {
        /* out elements (batch * M * N) times K; each factor is below 2^48, so clamp */
        uint64_t macs = (uint64_t)td__desc_nelem(out), k = (uint64_t)in[0]->dims[in[0]->rank - 1];
        if (k != 0 && macs > FUZZ_EXEC_MAX_MACS / k) return false;
    }
    return true;
}

void fuzz_on_failure(void *arg, uint32_t op_index, td_status status, const char *message)
{
    (void)arg;
    if (status == TD_EINVAL || status == TD_EINTERNAL || status == TD_EPROTO) {
        fprintf(stderr, "fuzz: an accepted op failed with %s at op %u: %s\n",
                td_status_name(status), op_index, message);
        abort();
    }
}

bool fuzz_make_tensor(td__session *s, uint64_t id, uint64_t tmp_id, const td__desc *d,
                      double value, bool index)
{
    if (d->dtype == TD_BOOL || index) {
        td__op full = {.opcode = TD_OP_FULL, .dtype = d->dtype, .output = id,
                       .n_iattrs = d->rank, .fattrs = {index ? 0.0 : value, 0}};
        for (uint32_t i = 0; i < d->rank; i++) full.iattrs[i] = d->dims[i];
        return td__session_exec(s, &full, 1, fuzz_on_failure, NULL) == 0;
    }
    td__op ops[2] = {
        {.opcode = TD_OP_ARANGE, .dtype = d->dtype, .output = tmp_id, .n_iattrs = 1,
         .iattrs = {td__desc_nelem(d)}, .fattrs = {value, 0.25}},
        {.opcode = TD_OP_RESHAPE, .n_inputs = 1, .inputs = {tmp_id}, .output = id,
         .n_iattrs = d->rank},
    };
    for (uint32_t i = 0; i < d->rank; i++) ops[1].iattrs[i] = d->dims[i];
    size_t failed = td__session_exec(s, ops, 2, fuzz_on_failure, NULL);
    td__session_release(s, &tmp_id, 1);
    return failed == 0;
}

td_status fuzz_read_all(td__session *s, uint64_t id, const td__desc *d)
{
    static unsigned char buf[FUZZ_EXEC_MAX_BYTES];
    size_t n = td__desc_nbytes(d);
    if (n > sizeof buf) return TD_ERANGE;
    char err[512];
    return td__session_read(s, id, 0, buf, n, err, sizeof err);
}
