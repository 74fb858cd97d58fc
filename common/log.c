/* log.c — see log.h. Each line is formatted into one buffer and written with one write(2),
 * so concurrent writers never interleave inside a line.
 *
 * The journal test follows sd-daemon's convention (systemd.exec(5), $JOURNAL_STREAM): the
 * variable names the device and inode of the stream systemd connected; a child that
 * inherited the variable but had stderr redirected elsewhere must not prefix, hence the
 * fstat comparison rather than the variable's mere presence. */
#include "log.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Atomics: tensord changes level and format on SIGHUP while other threads log. */
static atomic_int g_level = TD_LOG_INFO;
static const char *g_prefix = "tensord";
static atomic_int g_format = TD_LOG_FORMAT_PLAIN;
static atomic_bool g_journal;

static const char *const k_names[] = {"debug", "info", "warning", "error"};
static const int k_priority[] = {7, 6, 4, 3}; /* LOG_DEBUG, LOG_INFO, LOG_WARNING, LOG_ERR */

void td__log_set_level(enum td__log_level level) { atomic_store(&g_level, (int)level); }
void td__log_set_prefix(const char *prefix) { g_prefix = prefix; }
bool td__log_to_journal(void) { return atomic_load(&g_journal); }

static bool stderr_is_journal(void)
{
    const char *js = getenv("JOURNAL_STREAM");
    if (js == NULL || js[0] == '\0') return false;
    unsigned long long dev, ino;
    char tail;
    if (sscanf(js, "%llu:%llu%c", &dev, &ino, &tail) != 2) return false;
    struct stat st;
    if (fstat(STDERR_FILENO, &st) != 0) return false;
    return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void td__log_set_format(enum td__log_format format)
{
    atomic_store(&g_journal, format != TD_LOG_FORMAT_PLAIN && stderr_is_journal());
    atomic_store(&g_format, (int)format);
}

/* Append to buf at *n (bounded; *n never passes len - 1). */
static void put(char *buf, size_t len, size_t *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t len, size_t *n, const char *fmt, ...)
{
    if (*n + 1 >= len) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *n, len - *n, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    *n += (size_t)k < len - *n ? (size_t)k : len - *n - 1;
}

/* A JSON string: each character goes in whole (never half an escape) while it fits before
 * the last byte of `len`, which is kept for the closing quote. */
static void put_json_string(char *buf, size_t len, size_t *n, const char *s)
{
    if (*n + 2 >= len) return;
    buf[(*n)++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        char e[8];
        if (*p == '"' || *p == '\\')
            snprintf(e, sizeof e, "\\%c", *p);
        else if (*p == '\n')
            snprintf(e, sizeof e, "\\n");
        else if (*p == '\t')
            snprintf(e, sizeof e, "\\t");
        else if (*p < 0x20 || *p == 0x7f)
            snprintf(e, sizeof e, "\\u%04x", *p);
        else
            snprintf(e, sizeof e, "%c", *p);
        size_t k = strlen(e);
        if (*n + k + 1 >= len) break;
        memcpy(buf + *n, e, k);
        *n += k;
    }
    buf[(*n)++] = '"';
    buf[*n] = '\0';
}

size_t td__log_format_line(char *buf, size_t len, enum td__log_format format, bool journal,
                           enum td__log_level level, const char *prefix, long long unix_ms,
                           const char *msg)
{
    size_t n = 0;
    if (len == 0) return 0;
    buf[0] = '\0';
    if (len < 64) return 0; /* too small for any line */
    size_t body = len - 3; /* room for the closing brace, the newline and the NUL */
    char ts[96] = "";
    if (format != TD_LOG_FORMAT_PLAIN) {
        time_t secs = (time_t)(unix_ms / 1000);
        struct tm tm;
        gmtime_r(&secs, &tm);
        snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 (int)(unix_ms % 1000));
    }
    if (journal) put(buf, body, &n, "<%d>", k_priority[level]);
    if (format == TD_LOG_FORMAT_JSON) {
        put(buf, body, &n, "{\"time\":\"%s\",\"level\":\"%s\",\"prog\":", ts, k_names[level]);
        put_json_string(buf, body, &n, prefix);
        put(buf, body, &n, ",\"msg\":");
        put_json_string(buf, body, &n, msg);
        buf[n++] = '}';
    } else {
        if (format == TD_LOG_FORMAT_TEXT && !journal) put(buf, body, &n, "%s ", ts);
        put(buf, body, &n, "%s: %s: %s", prefix, k_names[level], msg);
    }
    buf[n++] = '\n';
    buf[n] = '\0';
    return n;
}

void td__log(enum td__log_level level, const char *fmt, ...)
{
    if ((int)level < atomic_load(&g_level)) return;
    enum td__log_format format = (enum td__log_format)atomic_load(&g_format);
    char msg[1024], line[8 * 1024]; /* room for msg with every character escaped */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    long long ms = 0;
    if (format != TD_LOG_FORMAT_PLAIN) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    }
    size_t n = td__log_format_line(line, sizeof line, format, atomic_load(&g_journal), level,
                                   g_prefix, ms, msg);
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(STDERR_FILENO, line + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        off += (size_t)w;
    }
}
