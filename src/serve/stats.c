/* Statistics: atomic counters per model version, their KServe JSON and their Prometheus text. */
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
    return s->batch ? 0 : -1;
}

void stats_model_destroy(stats_model *s) {
    if (!s) return;
    free(s->batch);
    s->batch = NULL;
}

static void dur_add(stats_duration *d, uint64_t ns) {
    ADD(d->count, 1);
    ADD(d->ns, ns);
}

void stats_record_execution(stats_model *s, int64_t batch_size, uint64_t input_ns, uint64_t infer_ns, uint64_t output_ns) {
    ADD(s->execution_count, 1);
    ADD(s->inference_count, (uint64_t)(batch_size > 0 ? batch_size : 1));
    atomic_store_explicit(&s->last_inference_ms, stats_wall_ms(), memory_order_relaxed);
    if (batch_size >= 1 && batch_size <= s->max_batch) {
        stats_batch *b = &s->batch[batch_size - 1];
        dur_add(&b->compute_input, input_ns);
        dur_add(&b->compute_infer, infer_ns);
        dur_add(&b->compute_output, output_ns);
    }
}

void stats_record_success(stats_model *s, uint64_t queue_ns, uint64_t input_ns, uint64_t infer_ns, uint64_t output_ns,
                          uint64_t total_ns) {
    dur_add(&s->success, total_ns);
    dur_add(&s->queue, queue_ns);
    dur_add(&s->compute_input, input_ns);
    dur_add(&s->compute_infer, infer_ns);
    dur_add(&s->compute_output, output_ns);
}

void stats_record_failure(stats_model *s, stats_fail_reason reason, uint64_t total_ns) {
    dur_add(&s->fail, total_ns);
    ADD(s->fail_reason[reason < STATS_NUM_REASONS ? reason : STATS_OTHER], 1);
}

static json_t *dur_json(const stats_duration *d) {
    return json_pack("{s:I, s:I}", "count", (json_int_t)LD(d->count), "ns", (json_int_t)LD(d->ns));
}

json_t *stats_model_json(const stats_model *s, const char *name, const char *version, uint64_t memory_bytes) {
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
    return json_pack("{s:s, s:s, s:I, s:I, s:I, s:o, s:{}, s:o, s:o}", "name", name, "version", version, "last_inference",
                     (json_int_t)LD(s->last_inference_ms), "inference_count", (json_int_t)LD(s->inference_count),
                     "execution_count", (json_int_t)LD(s->execution_count), "inference_stats", is, "response_stats",
                     "batch_stats", batches, "memory_usage", mem);
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

/* Prometheus label values escape backslash, double quote and newline. */
static void label_value(char *out, size_t n, const char *v) {
    size_t o = 0;
    for (; *v && o + 3 < n; v++) {
        if (*v == '\\' || *v == '"') out[o++] = '\\', out[o++] = *v;
        else if (*v == '\n') out[o++] = '\\', out[o++] = 'n';
        else out[o++] = *v;
    }
    out[o] = 0;
}

typedef enum { F_SUCCESS, F_COUNT, F_EXEC, F_REQ_US, F_QUEUE_US, F_IN_US, F_INFER_US, F_OUT_US, F_PENDING } family;

static uint64_t family_value(const stats_model *s, family f) {
    switch (f) {
    case F_SUCCESS: return LD(s->success.count);
    case F_COUNT: return LD(s->inference_count);
    case F_EXEC: return LD(s->execution_count);
    case F_REQ_US: return (LD(s->success.ns) + LD(s->fail.ns)) / 1000;
    case F_QUEUE_US: return LD(s->queue.ns) / 1000;
    case F_IN_US: return LD(s->compute_input.ns) / 1000;
    case F_INFER_US: return LD(s->compute_infer.ns) / 1000;
    case F_OUT_US: return LD(s->compute_output.ns) / 1000;
    default: return 0;
    }
}

void stats_prometheus(stats_text *t, const stats_model *const *models, const char *const *names,
                      const char *const *versions, size_t n) {
    static const struct {
        family f;
        const char *name, *help;
    } fams[] = {
        {F_SUCCESS, "nv_inference_request_success", "Number of successful inference requests, all batch sizes"},
        {F_COUNT, "nv_inference_count", "Number of inferences performed (does not include cached requests)"},
        {F_EXEC, "nv_inference_exec_count", "Number of model executions performed (does not include cached requests)"},
        {F_REQ_US, "nv_inference_request_duration_us", "Cumulative inference request duration in microseconds"},
        {F_QUEUE_US, "nv_inference_queue_duration_us", "Cumulative inference queuing duration in microseconds"},
        {F_IN_US, "nv_inference_compute_input_duration_us", "Cumulative compute input duration in microseconds"},
        {F_INFER_US, "nv_inference_compute_infer_duration_us", "Cumulative compute inference duration in microseconds"},
        {F_OUT_US, "nv_inference_compute_output_duration_us", "Cumulative inference compute output duration in microseconds"},
    };
    static const char *const reasons[STATS_NUM_REASONS] = {"REJECTED", "CANCELED", "BACKEND", "OTHER"};
    char mv[512], vv[64];
    stats_text_printf(t, "# HELP nv_inference_request_failure Number of failed inference requests, all batch sizes\n"
                         "# TYPE nv_inference_request_failure counter\n");
    for (size_t i = 0; i < n; i++) {
        label_value(mv, sizeof mv, names[i]);
        label_value(vv, sizeof vv, versions[i]);
        for (int r = 0; r < STATS_NUM_REASONS; r++)
            stats_text_printf(t, "nv_inference_request_failure{model=\"%s\",reason=\"%s\",version=\"%s\"} %" PRIu64 "\n", mv,
                              reasons[r], vv, LD(models[i]->fail_reason[r]));
    }
    for (size_t k = 0; k < sizeof fams / sizeof fams[0]; k++) {
        stats_text_printf(t, "# HELP %s %s\n# TYPE %s counter\n", fams[k].name, fams[k].help, fams[k].name);
        for (size_t i = 0; i < n; i++) {
            label_value(mv, sizeof mv, names[i]);
            label_value(vv, sizeof vv, versions[i]);
            stats_text_printf(t, "%s{model=\"%s\",version=\"%s\"} %" PRIu64 "\n", fams[k].name, mv, vv,
                              family_value(models[i], fams[k].f));
        }
    }
    stats_text_printf(t, "# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting "
                         "execution per-model.\n# TYPE nv_inference_pending_request_count gauge\n");
    for (size_t i = 0; i < n; i++) {
        label_value(mv, sizeof mv, names[i]);
        label_value(vv, sizeof vv, versions[i]);
        int64_t p = atomic_load_explicit(&models[i]->pending, memory_order_relaxed);
        stats_text_printf(t, "nv_inference_pending_request_count{model=\"%s\",version=\"%s\"} %" PRId64 "\n", mv, vv,
                          p < 0 ? 0 : p);
    }
}
