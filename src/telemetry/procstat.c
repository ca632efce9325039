/* /proc readers and parsers: /proc/stat (machine CPU ticks), /proc/meminfo (machine memory), /proc/self/status
 * (this process's memory), getrusage (this process's CPU time, finer than /proc/self/stat's clock ticks). */
#include "procstat.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* Reads a small /proc file into buf (NUL-terminated). Returns 0 or -1. */
static int read_text(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t got = fread(buf, 1, n - 1, f);
    fclose(f);
    buf[got] = 0;
    return got ? 0 : -1;
}

int procstat_parse_cpu(const char *text, procstat_cpu *out) {
    const char *line = text;
    while (line && strncmp(line, "cpu ", 4) != 0) {
        line = strchr(line, '\n');
        if (line) line++;
    }
    if (!line) return -1;
    uint64_t v[8] = {0}; /* user nice system idle iowait irq softirq steal (guest time is already inside user) */
    int got =
        sscanf(line + 4, "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64,
               &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
    if (got < 4) return -1;
    out->busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    out->total = out->busy + v[3] + v[4];
    return 0;
}

int procstat_read_cpu(procstat_cpu *out) {
    char buf[1024]; /* the aggregate line comes first */
    if (read_text("/proc/stat", buf, sizeof buf) != 0) return -1;
    return procstat_parse_cpu(buf, out);
}

double procstat_cpu_utilization(const procstat_cpu *before, const procstat_cpu *after) {
    if (after->total <= before->total || after->busy < before->busy) return -1;
    double u = (double)(after->busy - before->busy) / (double)(after->total - before->total);
    return u > 1 ? 1 : u;
}

/* The value in kB of "key:" in a /proc key-value file, as bytes; -1 when absent. */
static int64_t kb_field(const char *text, const char *key) {
    size_t k = strlen(key);
    for (const char *p = text; p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (!strncmp(p, key, k) && p[k] == ':') {
            char *end;
            unsigned long long v = strtoull(p + k + 1, &end, 10);
            if (end == p + k + 1) return -1;
            return (int64_t)v * 1024;
        }
    }
    return -1;
}

int procstat_parse_memory(const char *text, procstat_memory *out) {
    int64_t t = kb_field(text, "MemTotal"), a = kb_field(text, "MemAvailable");
    if (t < 0 || a < 0) return -1;
    out->total = (uint64_t)t;
    out->available = (uint64_t)a;
    return 0;
}

int procstat_read_memory(procstat_memory *out) {
    char buf[8192];
    if (read_text("/proc/meminfo", buf, sizeof buf) != 0) return -1;
    return procstat_parse_memory(buf, out);
}

int procstat_parse_status(const char *text, procstat_self *out) {
    int64_t rss = kb_field(text, "VmRSS"), vm = kb_field(text, "VmSize");
    if (rss < 0 || vm < 0) return -1;
    out->resident_bytes = (uint64_t)rss;
    out->virtual_bytes = (uint64_t)vm;
    return 0;
}

int procstat_read_self(procstat_self *out) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
    out->user_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6;
    out->system_s = (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    char buf[8192];
    if (read_text("/proc/self/status", buf, sizeof buf) != 0) return -1;
    return procstat_parse_status(buf, out);
}
