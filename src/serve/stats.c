/* Statistics: atomic counters and latency histograms per model version, and their KServe JSON. */
#include "stats.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LD(x) atomic_load_explicit(&(x), memory_order_relaxed)
#define ADD(x, v) atomic_fetch_add_explicit(&(x), (v), memory_order_relaxed)

int stats_model_init(stats_model *s, int max_batch) {
    memset(s, 0, sizeof *s);
    s->max_batch = max_batch < 1 ? 1 : max_batch;
    s->batch = calloc((size_t)s->max_batch, sizeof *s->batch);
    if (!s->batch) return -1;
    if (pthread_mutex_init(&s->record_lock, NULL) != 0) {
        free(s->batch);
        s->batch = NULL;
        return -1;
    }
    return 0;
}

void stats_model_destroy(stats_model *s) {
    if (!s || !s->batch) return;
    free(s->batch);
    s->batch = NULL;
    pthread_mutex_destroy(&s->record_lock);
}

/* Microseconds: 25 us to 10 s, about three buckets per decade (1, 2.5, 5). */
const uint64_t stats_hist_bounds_us[STATS_HIST_BOUNDS] = {25,     50,     100,     250,     500,     1000,
                                                          2500,   5000,   10000,   25000,   50000,   100000,
                                                          250000, 500000, 1000000, 2500000, 5000000, 10000000};

static void hist_add(stats_hist *h, uint64_t ns) {
    size_t b = 0;
    while (b < STATS_HIST_BOUNDS && ns > stats_hist_bounds_us[b] * 1000u) b++;
    ADD(h->bucket[b], 1);
    ADD(h->sum_ns, ns);
}

void stats_hist_snapshot(const stats_hist *h, uint64_t cum[STATS_HIST_BOUNDS + 1], uint64_t *sum_ns) {
    uint64_t c = 0;
    for (size_t b = 0; b <= STATS_HIST_BOUNDS; b++) cum[b] = c += LD(h->bucket[b]);
    *sum_ns = LD(h->sum_ns);
}

static void dur_add(stats_duration *d, uint64_t ns) {
    ADD(d->count, 1);
    ADD(d->ns, ns);
}

void stats_record_execution(stats_model *s, int64_t batch_size, uint64_t input_ns, uint64_t infer_ns, uint64_t output_ns) {
    pthread_mutex_lock(&s->record_lock);
    ADD(s->execution_count, 1);
    ADD(s->inference_count, (uint64_t)(batch_size > 0 ? batch_size : 1));
    atomic_store_explicit(&s->last_inference_ms, stats_wall_ms(), memory_order_relaxed);
    if (batch_size >= 1 && batch_size <= s->max_batch) {
        stats_batch *b = &s->batch[batch_size - 1];
        dur_add(&b->compute_input, input_ns);
        dur_add(&b->compute_infer, infer_ns);
        dur_add(&b->compute_output, output_ns);
    }
    pthread_mutex_unlock(&s->record_lock);
}

void stats_record_success(stats_model *s, uint64_t queue_ns, uint64_t input_ns, uint64_t infer_ns, uint64_t output_ns,
                          uint64_t total_ns) {
    pthread_mutex_lock(&s->record_lock);
    dur_add(&s->success, total_ns);
    dur_add(&s->queue, queue_ns);
    dur_add(&s->compute_input, input_ns);
    dur_add(&s->compute_infer, infer_ns);
    dur_add(&s->compute_output, output_ns);
    hist_add(&s->request_hist, total_ns);
    hist_add(&s->queue_hist, queue_ns);
    hist_add(&s->compute_hist, input_ns + infer_ns + output_ns);
    pthread_mutex_unlock(&s->record_lock);
}

void stats_record_failure(stats_model *s, stats_fail_reason reason, uint64_t total_ns) {
    pthread_mutex_lock(&s->record_lock);
    dur_add(&s->fail, total_ns);
    ADD(s->fail_reason[reason < STATS_NUM_REASONS ? reason : STATS_OTHER], 1);
    pthread_mutex_unlock(&s->record_lock);
}

static json_t *dur_json(const stats_duration *d) {
    return json_pack("{s:I, s:I}", "count", (json_int_t)LD(d->count), "ns", (json_int_t)LD(d->ns));
}

json_t *stats_model_json(const stats_model *s, const char *name, const char *version, uint64_t memory_bytes) {
    /* the lock is not part of the statistics' value: taking it through a const pointer is deliberate */
    pthread_mutex_t *lock = (pthread_mutex_t *)&s->record_lock;
    pthread_mutex_lock(lock);
    json_t *is = json_object();
    json_object_set_new(is, "success", dur_json(&s->success));
    json_object_set_new(is, "fail", dur_json(&s->fail));
    json_object_set_new(is, "queue", dur_json(&s->queue));
    json_object_set_new(is, "compute_input", dur_json(&s->compute_input));
    json_object_set_new(is, "compute_infer", dur_json(&s->compute_infer));
    json_object_set_new(is, "compute_output", dur_json(&s->compute_output));
    json_object_set_new(is, "cache_hit", dur_json(&s->cache_hit));
    json_object_set_new(is, "cache_miss", dur_json(&s->cache_miss));
    json_t *batches = json_array();
    for (int b = 0; b < s->max_batch; b++) {
        const stats_batch *x = &s->batch[b];
        if (!LD(x->compute_infer.count)) continue;
        json_array_append_new(batches, json_pack("{s:i, s:o, s:o, s:o}", "batch_size", b + 1, "compute_input",
                                                 dur_json(&x->compute_input), "compute_infer", dur_json(&x->compute_infer),
                                                 "compute_output", dur_json(&x->compute_output)));
    }
    json_t *mem = json_pack("[{s:s, s:i, s:I}]", "type", "CPU", "id", 0, "byte_size", (json_int_t)memory_bytes);
    json_t *entry = json_pack("{s:s, s:s, s:I, s:I, s:I, s:o, s:{}, s:o, s:o}", "name", name, "version", version, "last_inference",
                     (json_int_t)LD(s->last_inference_ms), "inference_count", (json_int_t)LD(s->inference_count),
                     "execution_count", (json_int_t)LD(s->execution_count), "inference_stats", is, "response_stats",
                     "batch_stats", batches, "memory_usage", mem);
    pthread_mutex_unlock(lock);
    return entry;
}

void stats_text_printf(stats_text *t, const char *fmt, ...) {
    if (t->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->d ? t->d + t->n : NULL, t->d ? t->cap - t->n : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = 1;
            return;
        }
        if (t->d && t->n + (size_t)n < t->cap) {
            t->n += (size_t)n;
            return;
        }
        size_t cap = t->cap ? t->cap * 2 : 4096;
        while (cap < t->n + (size_t)n + 1) cap *= 2;
        char *d = realloc(t->d, cap);
        if (!d) {
            t->oom = 1;
            return;
        }
        t->d = d;
        t->cap = cap;
    }
}
