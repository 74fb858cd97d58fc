/* log.c — see log.h. Lines are formatted into one buffer first so concurrent writers do not
 * interleave inside a line. */
#include "log.h"
#include <stdarg.h>
#include <stdio.h>

static enum td__log_level g_level = TD_LOG_INFO;
static const char *g_prefix = "tensord";

void td__log_set_level(enum td__log_level level) { g_level = level; }
void td__log_set_prefix(const char *prefix) { g_prefix = prefix; }

void td__log(enum td__log_level level, const char *fmt, ...)
{
    static const char *names[] = {"debug", "info", "warning", "error"};
    if (level < g_level) return;
    char line[1024];
    int n = snprintf(line, sizeof line, "%s: %s: ", g_prefix, names[level]);
    if (n < 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line);
}
