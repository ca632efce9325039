/* Host telemetry from /proc (and getrusage): machine CPU utilisation (/proc/stat), machine memory (/proc/meminfo),
 * and this process's CPU time, resident and virtual memory. The parsers take the file's text so tests can feed them. */
#ifndef TELEMETRY_PROCSTAT_H
#define TELEMETRY_PROCSTAT_H

#include <stdint.h>

/* The aggregate "cpu" line of /proc/stat, in clock ticks. */
typedef struct procstat_cpu {
    uint64_t busy;  /* user + nice + system + irq + softirq + steal */
    uint64_t total; /* busy + idle + iowait */
} procstat_cpu;

/* Parses the text of /proc/stat. Returns 0, or -1 when it has no well-formed "cpu " line. */
int procstat_parse_cpu(const char *text, procstat_cpu *out);
int procstat_read_cpu(procstat_cpu *out);
/* Busy share of the ticks between two readings, 0-1; -1 when no tick passed (or the counters went back). */
double procstat_cpu_utilization(const procstat_cpu *before, const procstat_cpu *after);

/* /proc/meminfo, in bytes. */
typedef struct procstat_memory {
    uint64_t total, available;
} procstat_memory;
/* Parses the text of /proc/meminfo (MemTotal and MemAvailable, in kB). Returns 0, or -1 when either is missing. */
int procstat_parse_memory(const char *text, procstat_memory *out);
int procstat_read_memory(procstat_memory *out);

/* This process. */
typedef struct procstat_self {
    double user_s, system_s; /* CPU time of all its threads, live and exited (getrusage, microseconds) */
    uint64_t resident_bytes; /* VmRSS */
    uint64_t virtual_bytes;  /* VmSize */
} procstat_self;
/* Parses the text of /proc/self/status for VmRSS and VmSize (kB). Returns 0, or -1 when either is missing. */
int procstat_parse_status(const char *text, procstat_self *out);
/* CPU times from getrusage(RUSAGE_SELF), memory from /proc/self/status. Returns 0 or -1. */
int procstat_read_self(procstat_self *out);

#endif
