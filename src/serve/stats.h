/* Per model-version inference statistics kept with relaxed atomics (any thread may update, readers see a
 * consistent-enough snapshot): Triton's counters, latency histograms, and their KServe statistics JSON.
 * The Prometheus page that prints them is metrics.c. */
#ifndef SERVE_STATS_H
#define SERVE_STATS_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef struct stats_duration {
    _Atomic uint64_t count, ns;
} stats_duration;

/* Why a request failed, as the `reason` label of nv_inference_request_failure. */
typedef enum stats_fail_reason { STATS_REJECTED, STATS_CANCELED, STATS_BACKEND, STATS_OTHER, STATS_NUM_REASONS } stats_fail_reason;

/* Latency histogram: bucket upper bounds in microseconds (Prometheus `le`), the last bucket being +Inf. */
#define STATS_HIST_BOUNDS 18
extern const uint64_t stats_hist_bounds_us[STATS_HIST_BOUNDS];
typedef struct stats_hist {
    _Atomic uint64_t bucket[STATS_HIST_BOUNDS + 1]; /* observations per bucket (not cumulative); the last: > every bound */
    _Atomic uint64_t sum_ns;
} stats_hist;

typedef struct stats_batch {
    stats_duration compute_input, compute_infer, compute_output;
} stats_batch;

typedef struct stats_model {
    stats_duration success, fail, queue, compute_input, compute_infer, compute_output, cache_hit, cache_miss;
    _Atomic uint64_t inference_count;    /* inferences (batch elements) executed */
    _Atomic uint64_t execution_count;    /* model executions (batches) */
    _Atomic uint64_t last_inference_ms;  /* wall clock, ms since the epoch; 0 = never */
    _Atomic uint64_t fail_reason[STATS_NUM_REASONS];
    _Atomic int64_t pending;             /* requests queued or executing */
    /* successful requests only: arrival -> completion, arrival -> execution start, the three compute phases */
    stats_hist request_hist, queue_hist, compute_hist;
    int max_batch;                       /* size of `batch`: batch sizes 1..max_batch */
    stats_batch *batch;
    /* Each record_* call updates several counters; readers of the statistics JSON must see them together
     * (perf_analyzer aborts when the three compute counts of a window differ), so records and that reader
     * take this lock. The Prometheus page reads the atomics without it. */
    pthread_mutex_t record_lock;
} stats_model;

static inline uint64_t stats_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t stats_wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Zeroes s and sizes its batch table for batch sizes 1..max(1, max_batch). Returns 0 or -1 (out of memory). */
int stats_model_init(stats_model *s, int max_batch);
void stats_model_destroy(stats_model *s);

/* One execution of `batch_size` inferences (a batch of requests) and the requests it completed:
 * queue = arrival -> execution start, then the three compute phases, total = arrival -> completion.
 * A success also lands in the request, queue and compute (input + infer + output) histograms. */
void stats_record_execution(stats_model *s, int64_t batch_size, uint64_t input_ns, uint64_t infer_ns, uint64_t output_ns);
void stats_record_success(stats_model *s, uint64_t queue_ns, uint64_t input_ns, uint64_t infer_ns, uint64_t output_ns,
                          uint64_t total_ns);
void stats_record_failure(stats_model *s, stats_fail_reason reason, uint64_t total_ns);

/* One model_stats[] entry with every field Triton prints (zeros when nothing happened). New reference.
 * memory_bytes goes into memory_usage as one CPU entry. */
json_t *stats_model_json(const stats_model *s, const char *name, const char *version, uint64_t memory_bytes);

/* A growable text buffer (the Prometheus page, repository signatures); after an allocation failure `oom` is set and
 * further writes are dropped. */
typedef struct stats_text {
    char *d;
    size_t n, cap;
    int oom;
} stats_text;
void stats_text_printf(stats_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Cumulative bucket counts (cum[i] = observations <= bound i; cum[STATS_HIST_BOUNDS] = all of them, the count)
 * and the sum in nanoseconds, from one pass over the buckets. */
void stats_hist_snapshot(const stats_hist *h, uint64_t cum[STATS_HIST_BOUNDS + 1], uint64_t *sum_ns);

#endif
