/* errbuf.h — printf into a caller's error buffer: the one way messages reach the `char *err,
 * size_t errlen` parameters used across the engine, the wire codec and the backends.
 *
 * Header-only (static inline) because loadable backend modules use it too and must not
 * depend on engine or common symbols (backends/gpu/gpu_internal.h says why).
 * Thread-safety: writes only the caller's buffer. */
#ifndef TD_COMMON_ERRBUF_H
#define TD_COMMON_ERRBUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* Format into err[0 .. errlen) (truncated, always terminated); nothing when err is NULL or
 * errlen is 0. */
static inline void td__verrf(char *err, size_t errlen, const char *fmt, va_list ap)
{
    if (err != NULL && errlen > 0) vsnprintf(err, errlen, fmt, ap);
}

static inline void td__errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void td__errf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    td__verrf(err, errlen, fmt, ap);
    va_end(ap);
}

#endif
