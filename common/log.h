/* log.h — one-line log messages to stderr.
 *
 * Plain (the default, libtensord): "PREFIX: LEVEL: message". A level threshold
 * (td__log_set_level) filters them.
 *
 * Service style (td__log_set_format, tensord): every line starts with its time in RFC 3339
 * UTC with milliseconds ("2026-12-01T18:20:00.123Z tensord: info: message"), or is one
 * JSON object per line with the format TD_LOG_FORMAT_JSON:
 *     {"time":"2026-12-01T18:20:00.123Z","level":"info","prog":"tensord","msg":"..."}
 * (keys in that order; "msg" escaped per RFC 8259: quote, backslash and control
 * characters). When stderr is the systemd journal (the sd-daemon convention:
 * $JOURNAL_STREAM is "DEV:INODE" of stderr, as systemd sets it for StandardError=journal),
 * each line starts with the syslog priority "<N>" (debug 7, info 6, warning 4, error 3,
 * sd-daemon(3)) and, in text format, leaves the time out (the journal stamps each entry
 * itself); JSON lines keep their "time".
 *
 * Thread-safety: td__log from any thread (one write(2) per line, so lines never
 * interleave); the setters from any thread too (tensord calls them again on SIGHUP).
 */
#ifndef TD_COMMON_LOG_H
#define TD_COMMON_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum td__log_level { TD_LOG_DEBUG = 0, TD_LOG_INFO = 1, TD_LOG_WARN = 2, TD_LOG_ERROR = 3 };
enum td__log_format { TD_LOG_FORMAT_PLAIN = 0, TD_LOG_FORMAT_TEXT, TD_LOG_FORMAT_JSON };

void td__log_set_level(enum td__log_level level);
void td__log_set_prefix(const char *prefix); /* static string, e.g. "tensord" */
/* Switch to the service style above (TEXT or JSON; PLAIN goes back) and look at
 * $JOURNAL_STREAM once. */
void td__log_set_format(enum td__log_format format);
/* Whether lines carry "<N>" priority prefixes (stderr is the journal). */
bool td__log_to_journal(void);
void td__log(enum td__log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Format one line as td__log would into buf (NUL-terminated, cut to fit; ends with '\n'),
 * with `unix_ms` as its time (milliseconds since 1970 UTC) and `journal` for the priority
 * prefix. Returns the length. For tests and td__log itself. */
size_t td__log_format_line(char *buf, size_t len, enum td__log_format format, bool journal,
                           enum td__log_level level, const char *prefix, long long unix_ms,
                           const char *msg);
#endif
