/* Server logging: one line per event on stderr, as text or JSON (--log-format), safe from any thread. */
#ifndef SERVE_LOG_H
#define SERVE_LOG_H

typedef enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR, LOG_OFF /* min level only: nothing logged */ } log_level;

/* Chooses the line format once at start-up, before other threads exist: json != 0 gives
 * {"ts":"...","level":"info","msg":"..."}; otherwise "2026-11-29T16:00:00.123Z info  message". */
void log_set_format(int json);
void log_set_min_level(log_level level);
void log_msg(log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
