/* abi_module.c — a stand-in backend module for tests/unit/engine/backend_abi.c, built three
 * times: with TD_TEST_ABI set to this tree's TD_BACKEND_ABI_VERSION (accepted), to another
 * version (refused), and with TD_TEST_NO_ABI (no td_backend_abi symbol: an old module,
 * refused). Its entries do nothing; the test never opens a device. */
#include "backends/backend.h"

static td_status count(int *out)
{
    *out = 0;
    return TD_OK;
}
static td_status open_dev(td__device *dev, int index, char *err, size_t errlen)
{
    (void)dev, (void)index, (void)err, (void)errlen;
    return TD_EDEVICE;
}
static td_status alloc(td__device *dev, void *stream, size_t nbytes, void **out)
{
    (void)dev, (void)stream, (void)nbytes, (void)out;
    return TD_ENOMEM;
}
static void release(td__device *dev, void *stream, void *data, size_t nbytes)
{
    (void)dev, (void)stream, (void)data, (void)nbytes;
}
static td_status wr(td__device *dev, void *stream, void *dst, size_t off, const void *src, size_t n)
{
    (void)dev, (void)stream, (void)dst, (void)off, (void)src, (void)n;
    return TD_EDEVICE;
}
static td_status rd(td__device *dev, void *stream, const void *src, size_t off, void *dst, size_t n)
{
    (void)dev, (void)stream, (void)dst, (void)off, (void)src, (void)n;
    return TD_EDEVICE;
}
static td_status run(td__device *dev, void *stream, const td__op *op, const td__view *in,
                     const td__view *out, char *err, size_t errlen)
{
    (void)dev, (void)stream, (void)op, (void)in, (void)out, (void)err, (void)errlen;
    return TD_EDEVICE;
}

static const td__backend test_backend = {
    .kind = "abitest",
    .device_count = count,
    .device_open = open_dev,
    .buffer_alloc = alloc,
    .buffer_free = release,
    .buffer_write = wr,
    .buffer_read = rd,
    .exec = run,
};

#ifdef TD_TEST_NO_ABI
__attribute__((visibility("default"))) const td__backend *td_backend_entry(void);
const td__backend *td_backend_entry(void) { return &test_backend; }
#else
__attribute__((visibility("default"))) uint32_t td_backend_abi(void);
uint32_t td_backend_abi(void) { return TD_TEST_ABI; }
__attribute__((visibility("default"))) const td__backend *td_backend_entry(void);
const td__backend *td_backend_entry(void) { return &test_backend; }
#endif
