/* log.h — one-line log messages to stderr: "tensord: LEVEL: message". A level threshold
 * (td__log_set_level) filters them. Thread-safety: any thread (one fprintf per line). */
#ifndef TD_COMMON_LOG_H
#define TD_COMMON_LOG_H

enum td__log_level { TD_LOG_DEBUG = 0, TD_LOG_INFO = 1, TD_LOG_WARN = 2, TD_LOG_ERROR = 3 };

void td__log_set_level(enum td__log_level level);
void td__log_set_prefix(const char *prefix); /* static string, e.g. "tensord" */
void td__log(enum td__log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#endif
