/* Server logging: text or JSON lines on stderr. The format is chosen once before threads start; each line is
 * written with one fprintf under stdio's lock, so lines from different threads never interleave. */
#include "log.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int log_json = 0;            /* set once at start-up, read-only afterwards */
static log_level log_min = LOG_INFO; /* same */

void log_set_format(int json) { log_json = json; }
void log_set_min_level(log_level level) { log_min = level; }

static const char *level_name(log_level l) {
    switch (l) {
    case LOG_DEBUG: return "debug";
    case LOG_INFO: return "info";
    case LOG_WARN: return "warn";
    default: return "error";
    }
}

void log_msg(log_level level, const char *fmt, ...) {
    if (level < log_min) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    size_t n = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + n, sizeof when - n, ".%03ldZ", ts.tv_nsec / 1000000);
    if (log_json) {
        json_t *o = json_pack("{s:s, s:s, s:s}", "ts", when, "level", level_name(level), "msg", msg);
        char *line = o ? json_dumps(o, JSON_COMPACT) : NULL;
        if (line) fprintf(stderr, "%s\n", line);
        else /* not UTF-8 (a file name, say): still say it, as a JSON line without the message text */
            fprintf(stderr, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"(message not valid UTF-8)\"}\n", when, level_name(level));
        free(line);
        json_decref(o);
    } else {
        fprintf(stderr, "%s %-5s %s\n", when, level_name(level), msg);
    }
}
