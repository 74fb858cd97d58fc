/* cpu_dnnl.c — the oneDNN engine, thread scope and primitive helpers of cpu_dnnl.h, shared
 * by cpu_matmul.c and cpu_dnnl_conv.c so each creates and runs primitives the same way
 * (one OpenMP thread, user scratchpad, strict f32 math). Empty without TD_HAVE_DNNL. */
#include "backends/cpu/cpu_dnnl.h"
#if defined(TD_HAVE_DNNL)
#include <omp.h>
#include <pthread.h>
#include <string.h>

static dnnl_engine_t eng;
static pthread_once_t eng_once = PTHREAD_ONCE_INIT;

static void eng_init(void)
{
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success) eng = NULL;
}

dnnl_engine_t td__dnnl_engine(void)
{
    pthread_once(&eng_once, eng_init);
    return eng;
}

int td__dnnl_one_thread(void)
{
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    return saved;
}

void td__dnnl_threads_restore(int saved)
{
    omp_set_num_threads(saved);
}

static bool attr_make(dnnl_primitive_attr_t *attr)
{
    if (dnnl_primitive_attr_create(attr) != dnnl_success) return false;
    if (dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user) == dnnl_success &&
        dnnl_primitive_attr_set_fpmath_mode(*attr, dnnl_fpmath_mode_strict) == dnnl_success)
        return true;
    dnnl_primitive_attr_destroy(*attr);
    return false;
}

bool td__dnnl_pd(const void *op_desc, dnnl_primitive_desc_t *pd)
{
    dnnl_primitive_attr_t attr;
    if (td__dnnl_engine() == NULL || !attr_make(&attr)) return false;
    *pd = NULL;
    const bool ok = dnnl_primitive_desc_create(pd, op_desc, attr, eng, NULL) == dnnl_success;
    dnnl_primitive_attr_destroy(attr);
    return ok;
}

bool td__dnnl_reorder_pd(const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst,
                         dnnl_primitive_desc_t *pd)
{
    dnnl_primitive_attr_t attr;
    if (td__dnnl_engine() == NULL || !attr_make(&attr)) return false;
    *pd = NULL;
    const bool ok =
        dnnl_reorder_primitive_desc_create(pd, src, eng, dst, eng, attr) == dnnl_success;
    dnnl_primitive_attr_destroy(attr);
    return ok;
}

bool td__dnnl_prim(const_dnnl_primitive_desc_t pd, dnnl_primitive_t *prim, dnnl_memory_desc_t *sp,
                   size_t *sp_bytes)
{
    const dnnl_memory_desc_t *s = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    memset(sp, 0, sizeof *sp);
    if (s != NULL) *sp = *s;
    const size_t bytes = s != NULL ? dnnl_memory_desc_get_size(s) : 0;
    if (bytes > *sp_bytes) *sp_bytes = bytes;
    return dnnl_primitive_create(prim, pd) == dnnl_success;
}

bool td__dnnl_exec(dnnl_primitive_t prim, dnnl_stream_t st, int n, const int *arg,
                   const dnnl_memory_desc_t *md, void *const *h)
{
    enum { MAX_ARGS = 8 };
    dnnl_memory_t m[MAX_ARGS] = {NULL};
    dnnl_exec_arg_t args[MAX_ARGS];
    bool ok = n <= MAX_ARGS;
    for (int i = 0; i < n && ok; i++) {
        ok = dnnl_memory_create(&m[i], &md[i], eng, h[i]) == dnnl_success;
        args[i].arg = arg[i];
        args[i].memory = m[i];
    }
    ok = ok && dnnl_primitive_execute(prim, st, n, args) == dnnl_success &&
         dnnl_stream_wait(st) == dnnl_success;
    for (int i = 0; i < n && i < MAX_ARGS; i++)
        if (m[i] != NULL) dnnl_memory_destroy(m[i]);
    return ok;
}
#endif
