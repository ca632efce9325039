/* The Prometheus page: per-model families from the statistics of every loaded version, then the telemetry sample
 * (host from /proc, GPUs from NVML, CUDA allocators), refreshed at most every cache_ms. Family order, names, label
 * sets and units are the contract documented in docs/server.md; values print as plain decimals (no exponent),
 * because perf_analyzer reads the nv_gpu_* lines with a regex. */
#include "metrics.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinfer/cinfer.h"
#include "log.h"
#include "model_version.h"
#include "telemetry/nvml.h"
#include "telemetry/procstat.h"

#define LD(x) atomic_load_explicit(&(x), memory_order_relaxed)
#define MAX_CUDA_DEVICES 64

/* Allocator statistics of one CUDA device. */
typedef struct alloc_sample {
    int device;
    char uuid[96];
    cinfer_memory_stats st;
} alloc_sample;

struct metrics {
    pthread_mutex_t lock; /* the sample below and the nvml handle */
    char *device;
    char *visible; /* NULL = every GPU */
    uint64_t cache_ns;
    nvml *nvml; /* NULL: no GPU telemetry */

    /* the current sample; sampled_ns 0 = none yet */
    uint64_t sampled_ns;
    nvml_gpu *gpus;
    size_t num_gpus;
    procstat_cpu cpu_prev; /* reading before the current one */
    int cpu_prev_ok;
    double cpu_util; /* < 0: unknown */
    procstat_memory mem;
    int mem_ok;
    procstat_self self;
    int self_ok;
    double cpu_s_prev; /* process CPU seconds and total inferences at the previous sample */
    uint64_t inferences_prev;
    int prev_ok;
    double cpu_per_inference_us; /* < 0: no inference between the last two samples */
    alloc_sample *allocs;
    size_t num_allocs;
};

/* ---- text ---- */

/* Prometheus label values escape backslash, double quote and newline. */
static void label_value(char *out, size_t n, const char *v) {
    size_t o = 0;
    for (; *v && o + 3 < n; v++) {
        if (*v == '\\' || *v == '"')
            out[o++] = '\\', out[o++] = *v;
        else if (*v == '\n')
            out[o++] = '\\', out[o++] = 'n';
        else
            out[o++] = *v;
    }
    out[o] = 0;
}

/* A non-negative double as a plain decimal: at most 6 fractional digits, trailing zeros dropped ("123.456", "700"). */
static const char *decimal(char *buf, size_t n, double v) {
    snprintf(buf, n, "%.6f", v < 0 ? 0 : v);
    char *dot = strchr(buf, '.');
    if (dot) {
        char *e = buf + strlen(buf) - 1;
        while (e > dot && *e == '0') *e-- = 0;
        if (e == dot) *e = 0;
    }
    return buf;
}

static void family(stats_text *t, const char *name, const char *type, const char *help) {
    stats_text_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* ---- the loaded versions ---- */

typedef struct version_row {
    model_version *mv;
    char model[520], version[64]; /* escaped label values */
    char labels[600];             /* model="...",version="..." */
} version_row;

typedef struct version_list {
    version_row *rows;
    size_t n, cap;
    int oom;
} version_list;

static void collect_version(void *ctx, model_version *mv) {
    version_list *l = ctx;
    if (l->oom) return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        version_row *r = realloc(l->rows, cap * sizeof *r);
        if (!r) {
            l->oom = 1;
            return;
        }
        l->rows = r;
        l->cap = cap;
    }
    version_row *row = &l->rows[l->n++];
    model_version_ref(mv);
    row->mv = mv;
    label_value(row->model, sizeof row->model, mv->name);
    label_value(row->version, sizeof row->version, mv->version_str);
    snprintf(row->labels, sizeof row->labels, "model=\"%s\",version=\"%s\"", row->model, row->version);
}

/* CUDA ordinal of a session device string: "cuda" -> 0, "cuda:N" -> N; -1 for anything else. */
static int cuda_ordinal(const char *device) {
    if (!device || strncmp(device, "cuda", 4) != 0) return -1;
    if (device[4] == 0) return 0;
    if (device[4] != ':') return -1;
    char *end;
    long k = strtol(device + 5, &end, 10);
    return *end || end == device + 5 || k < 0 || k >= MAX_CUDA_DEVICES ? -1 : (int)k;
}

/* ---- per-model families ---- */

typedef enum { F_SUCCESS, F_COUNT, F_EXEC, F_REQ_US, F_QUEUE_US, F_IN_US, F_INFER_US, F_OUT_US } counter_family;

static uint64_t counter_value(const stats_model *s, counter_family f) {
    switch (f) {
    case F_SUCCESS: return LD(s->success.count);
    case F_COUNT: return LD(s->inference_count);
    case F_EXEC: return LD(s->execution_count);
    case F_REQ_US: return LD(s->success.ns) / 1000; /* successes only, as Triton (failures: fail.ns in the JSON) */
    case F_QUEUE_US: return LD(s->queue.ns) / 1000;
    case F_IN_US: return LD(s->compute_input.ns) / 1000;
    case F_INFER_US: return LD(s->compute_infer.ns) / 1000;
    case F_OUT_US: return LD(s->compute_output.ns) / 1000;
    }
    return 0;
}

static void write_model_counters(stats_text *t, const version_list *v) {
    static const struct {
        counter_family f;
        const char *name, *help;
    } fams[] = {
        {F_SUCCESS, "nv_inference_request_success", "Number of successful inference requests, all batch sizes"},
        {F_COUNT, "nv_inference_count", "Number of inferences performed (does not include cached requests)"},
        {F_EXEC, "nv_inference_exec_count", "Number of model executions performed (does not include cached requests)"},
        {F_REQ_US, "nv_inference_request_duration_us", "Cumulative inference request duration in microseconds"},
        {F_QUEUE_US, "nv_inference_queue_duration_us", "Cumulative inference queuing duration in microseconds"},
        {F_IN_US, "nv_inference_compute_input_duration_us", "Cumulative compute input duration in microseconds"},
        {F_INFER_US, "nv_inference_compute_infer_duration_us", "Cumulative compute inference duration in microseconds"},
        {F_OUT_US, "nv_inference_compute_output_duration_us",
         "Cumulative inference compute output duration in microseconds"},
    };
    static const char *const reasons[STATS_NUM_REASONS] = {"REJECTED", "CANCELED", "BACKEND", "OTHER"};
    family(t, "nv_inference_request_failure", "counter", "Number of failed inference requests, all batch sizes");
    for (size_t i = 0; i < v->n; i++) {
        const version_row *r = &v->rows[i];
        for (int k = 0; k < STATS_NUM_REASONS; k++) /* label order as Triton prints it: model, reason, version */
            stats_text_printf(t,
                              "nv_inference_request_failure{model=\"%s\",reason=\"%s\",version=\"%s\"} %" PRIu64 "\n",
                              r->model, reasons[k], r->version, LD(r->mv->stats.fail_reason[k]));
    }
    for (size_t k = 0; k < sizeof fams / sizeof fams[0]; k++) {
        family(t, fams[k].name, "counter", fams[k].help);
        for (size_t i = 0; i < v->n; i++)
            stats_text_printf(t, "%s{%s} %" PRIu64 "\n", fams[k].name, v->rows[i].labels,
                              counter_value(&v->rows[i].mv->stats, fams[k].f));
    }
    family(t, "nv_inference_pending_request_count", "gauge",
           "Instantaneous number of pending requests awaiting execution per-model.");
    for (size_t i = 0; i < v->n; i++) {
        int64_t p = LD(v->rows[i].mv->stats.pending);
        stats_text_printf(t, "nv_inference_pending_request_count{%s} %" PRId64 "\n", v->rows[i].labels, p < 0 ? 0 : p);
    }
    family(t, "cinfer_oom_retries_total", "counter",
           "Executions that ran out of memory (each is retried in halves; a single request that still does not fit "
           "gets a 503), docs/resilience.md");
    for (size_t i = 0; i < v->n; i++)
        stats_text_printf(t, "cinfer_oom_retries_total{%s} %" PRIu64 "\n", v->rows[i].labels, LD(v->rows[i].mv->oom_retries));
    family(t, "cinfer_isolation_retries_total", "counter",
           "Batches of several requests the engine refused as invalid data, run again one request at a time so only "
           "the request at fault fails, docs/server.md");
    for (size_t i = 0; i < v->n; i++)
        stats_text_printf(t, "cinfer_isolation_retries_total{%s} %" PRIu64 "\n", v->rows[i].labels,
                          LD(v->rows[i].mv->isolation_retries));
}

static void write_histograms(stats_text *t, const version_list *v) {
    static const struct {
        size_t offset;
        const char *name, *help;
    } hists[] = {
        {offsetof(stats_model, request_hist), "cinfer_inference_request_duration_us",
         "Latency of successful inference requests, arrival to response ready, in microseconds"},
        {offsetof(stats_model, queue_hist), "cinfer_inference_queue_duration_us",
         "Queue time of successful inference requests, arrival to execution start, in microseconds"},
        {offsetof(stats_model, compute_hist), "cinfer_inference_compute_duration_us",
         "Compute time (input + infer + output) of successful inference requests, in microseconds"},
    };
    char num[64];
    for (size_t h = 0; h < sizeof hists / sizeof hists[0]; h++) {
        family(t, hists[h].name, "histogram", hists[h].help);
        for (size_t i = 0; i < v->n; i++) {
            const stats_hist *hist = (const stats_hist *)((const char *)&v->rows[i].mv->stats + hists[h].offset);
            uint64_t cum[STATS_HIST_BOUNDS + 1], sum_ns;
            stats_hist_snapshot(hist, cum, &sum_ns);
            const char *l = v->rows[i].labels;
            for (size_t b = 0; b < STATS_HIST_BOUNDS; b++)
                stats_text_printf(t, "%s_bucket{%s,le=\"%" PRIu64 "\"} %" PRIu64 "\n", hists[h].name, l,
                                  stats_hist_bounds_us[b], cum[b]);
            stats_text_printf(t, "%s_bucket{%s,le=\"+Inf\"} %" PRIu64 "\n", hists[h].name, l, cum[STATS_HIST_BOUNDS]);
            stats_text_printf(t, "%s_sum{%s} %s\n", hists[h].name, l, decimal(num, sizeof num, sum_ns / 1000.0));
            stats_text_printf(t, "%s_count{%s} %" PRIu64 "\n", hists[h].name, l, cum[STATS_HIST_BOUNDS]);
        }
    }
}

/* The model's parameter bytes: the host copy (kind CPU, device 0) always, plus one copy per CUDA device that runs
 * one of its instances (kind GPU; sessions on one device share the weights). */
static void write_model_memory(stats_text *t, const version_list *v) {
    family(t, "cinfer_model_memory_bytes", "gauge",
           "Parameter bytes the loaded model version holds, by device kind (CPU, GPU) and device id");
    for (size_t i = 0; i < v->n; i++) {
        const model_version *mv = v->rows[i].mv;
        stats_text_printf(t, "cinfer_model_memory_bytes{%s,kind=\"CPU\",device_id=\"0\"} %" PRIu64 "\n",
                          v->rows[i].labels, mv->memory_bytes);
        uint64_t seen = 0;
        for (size_t k = 0; k < mv->num_instances; k++) {
            int d = cuda_ordinal(mv->instances[k].device);
            if (d < 0 || (seen >> d & 1)) continue;
            seen |= 1ull << d;
            stats_text_printf(t, "cinfer_model_memory_bytes{%s,kind=\"GPU\",device_id=\"%d\"} %" PRIu64 "\n",
                              v->rows[i].labels, d, mv->memory_bytes);
        }
    }
}

/* ---- telemetry sample ---- */

/* CUDA devices whose allocator statistics to read: those of --device and of every instance. Never loads CUDA by
 * itself: an empty set means no cinfer_cuda_* call at all. */
static uint64_t cuda_devices_in_use(const metrics *m, const version_list *v) {
    uint64_t set = 0;
    int d = cuda_ordinal(m->device);
    if (d >= 0) set |= 1ull << d;
    for (size_t i = 0; i < v->n; i++)
        for (size_t k = 0; k < v->rows[i].mv->num_instances; k++)
            if ((d = cuda_ordinal(v->rows[i].mv->instances[k].device)) >= 0) set |= 1ull << d;
    return set;
}

static void sample_allocators(metrics *m, uint64_t set) {
    free(m->allocs);
    m->allocs = NULL;
    m->num_allocs = 0;
    int count = 0;
    if (!set || cinfer_cuda_device_count(&count) != CINFER_OK || count <= 0) return;
    m->allocs = calloc((size_t)count, sizeof *m->allocs);
    if (!m->allocs) return;
    for (int d = 0; d < count && d < MAX_CUDA_DEVICES; d++) {
        if (!(set >> d & 1)) continue;
        alloc_sample *a = &m->allocs[m->num_allocs];
        if (cinfer_cuda_memory_stats(d, &a->st) != CINFER_OK) continue;
        cinfer_device_info info;
        a->device = d;
        a->uuid[0] = 0;
        if (cinfer_cuda_device_info(d, &info) == CINFER_OK) snprintf(a->uuid, sizeof a->uuid, "%s", info.uuid);
        m->num_allocs++;
    }
}

/* Takes a new sample when the current one is older than cache_ns. Called with m->lock held. */
static void refresh(metrics *m, const version_list *v) {
    uint64_t now = stats_now_ns();
    if (m->sampled_ns && now - m->sampled_ns < m->cache_ns) return;
    m->sampled_ns = now;
    procstat_cpu cpu;
    m->cpu_util = -1;
    if (procstat_read_cpu(&cpu) == 0) {
        if (m->cpu_prev_ok) {
            double u = procstat_cpu_utilization(&m->cpu_prev, &cpu);
            if (u >= 0) m->cpu_util = u;
        }
        if (m->cpu_util >= 0 || !m->cpu_prev_ok) { /* keep the older reading while no tick passed */
            m->cpu_prev = cpu;
            m->cpu_prev_ok = 1;
        }
    }
    m->mem_ok = procstat_read_memory(&m->mem) == 0;
    m->self_ok = procstat_read_self(&m->self) == 0;
    uint64_t inferences = 0;
    for (size_t i = 0; i < v->n; i++) inferences += LD(v->rows[i].mv->stats.inference_count);
    m->cpu_per_inference_us = -1;
    if (m->self_ok) {
        double cpu_s = m->self.user_s + m->self.system_s;
        if (m->prev_ok && inferences > m->inferences_prev && cpu_s >= m->cpu_s_prev)
            m->cpu_per_inference_us = (cpu_s - m->cpu_s_prev) * 1e6 / (double)(inferences - m->inferences_prev);
        m->cpu_s_prev = cpu_s;
        m->inferences_prev = inferences;
        m->prev_ok = 1;
    }
    free(m->gpus);
    m->gpus = NULL;
    m->num_gpus = 0;
    if (m->nvml && nvml_sample(m->nvml, m->visible, &m->gpus, &m->num_gpus) != 0)
        log_warn("metrics: out of memory sampling the GPUs");
    sample_allocators(m, cuda_devices_in_use(m, v));
}

/* ---- host and GPU families ---- */

static void write_host(stats_text *t, const metrics *m) {
    char num[64];
    if (m->cpu_util >= 0) {
        family(t, "nv_cpu_utilization", "gauge",
               "CPU utilization rate [0.0 - 1.0] of the machine, over the last sample interval");
        stats_text_printf(t, "nv_cpu_utilization %s\n", decimal(num, sizeof num, m->cpu_util));
    }
    if (m->mem_ok) {
        family(t, "nv_cpu_memory_total_bytes", "gauge", "CPU total memory (RAM), in bytes");
        stats_text_printf(t, "nv_cpu_memory_total_bytes %" PRIu64 "\n", m->mem.total);
        family(t, "nv_cpu_memory_used_bytes", "gauge", "CPU used memory (RAM): total minus available, in bytes");
        stats_text_printf(t, "nv_cpu_memory_used_bytes %" PRIu64 "\n",
                          m->mem.total > m->mem.available ? m->mem.total - m->mem.available : 0);
    }
    if (m->self_ok) {
        family(t, "process_cpu_seconds_total", "counter",
               "Total user and system CPU time of the server process in seconds");
        stats_text_printf(t, "process_cpu_seconds_total %s\n",
                          decimal(num, sizeof num, m->self.user_s + m->self.system_s));
        family(t, "process_resident_memory_bytes", "gauge", "Resident memory size of the server process in bytes");
        stats_text_printf(t, "process_resident_memory_bytes %" PRIu64 "\n", m->self.resident_bytes);
        family(t, "process_virtual_memory_bytes", "gauge", "Virtual memory size of the server process in bytes");
        stats_text_printf(t, "process_virtual_memory_bytes %" PRIu64 "\n", m->self.virtual_bytes);
    }
    if (m->cpu_per_inference_us >= 0) {
        family(t, "cinfer_cpu_time_per_inference_us", "gauge",
               "Server process CPU time per inference (all models) between the last two samples, in microseconds");
        stats_text_printf(t, "cinfer_cpu_time_per_inference_us %s\n",
                          decimal(num, sizeof num, m->cpu_per_inference_us));
    }
}

typedef enum { G_UTIL, G_MEM_TOTAL, G_MEM_USED, G_POWER, G_LIMIT, G_ENERGY, G_MEM_UTIL, G_TEMP } gpu_family;

static void write_gpu_family(stats_text *t, const metrics *m, gpu_family f) {
    static const struct {
        const char *name, *type, *help;
        unsigned need;
    } fams[] = {
        [G_UTIL] = {"nv_gpu_utilization", "gauge", "GPU utilization rate [0.0 - 1.0)", NVML_HAS_UTILIZATION},
        [G_MEM_TOTAL] = {"nv_gpu_memory_total_bytes", "gauge", "GPU total memory, in bytes", NVML_HAS_MEMORY},
        [G_MEM_USED] = {"nv_gpu_memory_used_bytes", "gauge", "GPU used memory, in bytes", NVML_HAS_MEMORY},
        [G_POWER] = {"nv_gpu_power_usage", "gauge", "GPU power usage in watts", NVML_HAS_POWER},
        [G_LIMIT] = {"nv_gpu_power_limit", "gauge", "GPU power management limit in watts", NVML_HAS_POWER_LIMIT},
        [G_ENERGY] = {"nv_energy_consumption", "counter",
                      "GPU energy consumption in joules since cinfer-server started", NVML_HAS_ENERGY},
        [G_MEM_UTIL] = {"cinfer_gpu_memory_utilization", "gauge",
                        "Share of time GPU memory was read or written [0.0 - 1.0]", NVML_HAS_UTILIZATION},
        [G_TEMP] = {"cinfer_gpu_temperature_celsius", "gauge", "GPU core temperature in degrees Celsius",
                    NVML_HAS_TEMPERATURE},
    };
    int any = 0;
    char num[64];
    for (size_t i = 0; i < m->num_gpus; i++) {
        const nvml_gpu *g = &m->gpus[i];
        if (!(g->has & fams[f].need)) continue;
        if (!any++) family(t, fams[f].name, fams[f].type, fams[f].help);
        const char *val = num;
        switch (f) {
        case G_UTIL: decimal(num, sizeof num, g->utilization); break;
        case G_MEM_TOTAL: snprintf(num, sizeof num, "%" PRIu64, g->memory_total); break;
        case G_MEM_USED: snprintf(num, sizeof num, "%" PRIu64, g->memory_used); break;
        case G_POWER: decimal(num, sizeof num, g->power_w); break;
        case G_LIMIT: decimal(num, sizeof num, g->power_limit_w); break;
        case G_ENERGY: decimal(num, sizeof num, g->energy_j); break;
        case G_MEM_UTIL: decimal(num, sizeof num, g->memory_utilization); break;
        case G_TEMP: snprintf(num, sizeof num, "%u", g->temperature_c); break;
        }
        stats_text_printf(t, "%s{gpu_uuid=\"%s\"} %s\n", fams[f].name, g->uuid, val);
    }
}

static void write_gpus(stats_text *t, const metrics *m) {
    if (!m->num_gpus) return;
    for (gpu_family f = G_UTIL; f <= G_ENERGY; f++) write_gpu_family(t, m, f);
    family(t, "cinfer_gpu_info", "gauge",
           "Identity of each reported GPU or MIG instance (mig_gi and mig_ci empty on a physical GPU); value 1");
    for (size_t i = 0; i < m->num_gpus; i++) {
        const nvml_gpu *g = &m->gpus[i];
        char name[200], gi[16] = "", ci[16] = "";
        label_value(name, sizeof name, g->name);
        if (g->mig_gi >= 0) snprintf(gi, sizeof gi, "%d", g->mig_gi);
        if (g->mig_ci >= 0) snprintf(ci, sizeof ci, "%d", g->mig_ci);
        stats_text_printf(t,
                          "cinfer_gpu_info{gpu_uuid=\"%s\",index=\"%d\",name=\"%s\",mig_gi=\"%s\",mig_ci=\"%s\"} 1\n",
                          g->uuid, g->index, name, gi, ci);
    }
    write_gpu_family(t, m, G_MEM_UTIL);
    write_gpu_family(t, m, G_TEMP);
    static const struct {
        uint64_t bit;
        const char *name;
    } reasons[] = {{NVML_REASON_GPU_IDLE, "gpu_idle"},
                   {NVML_REASON_SW_POWER_CAP, "sw_power_cap"},
                   {NVML_REASON_HW_SLOWDOWN, "hw_slowdown"},
                   {NVML_REASON_SW_THERMAL, "sw_thermal_slowdown"},
                   {NVML_REASON_HW_THERMAL, "hw_thermal_slowdown"},
                   {NVML_REASON_HW_POWER_BRAKE, "hw_power_brake_slowdown"}};
    int any = 0;
    for (size_t i = 0; i < m->num_gpus; i++) {
        const nvml_gpu *g = &m->gpus[i];
        if (!(g->has & NVML_HAS_CLOCK_REASONS)) continue;
        if (!any++)
            family(t, "cinfer_gpu_clock_throttle_reason", "gauge",
                   "1 while the GPU's clocks are held down for this reason (NVML clock event reasons), else 0");
        for (size_t r = 0; r < sizeof reasons / sizeof reasons[0]; r++)
            stats_text_printf(t, "cinfer_gpu_clock_throttle_reason{gpu_uuid=\"%s\",reason=\"%s\"} %d\n", g->uuid,
                              reasons[r].name, (g->clock_reasons & reasons[r].bit) ? 1 : 0);
    }
    any = 0;
    for (size_t i = 0; i < m->num_gpus; i++) {
        const nvml_gpu *g = &m->gpus[i];
        if (!(g->has & (NVML_HAS_ECC_CORRECTED | NVML_HAS_ECC_UNCORRECTED))) continue;
        if (!any++)
            family(t, "cinfer_gpu_ecc_errors", "counter",
                   "Volatile ECC error count (since the driver last loaded), by type (corrected, uncorrected)");
        if (g->has & NVML_HAS_ECC_CORRECTED)
            stats_text_printf(t, "cinfer_gpu_ecc_errors{gpu_uuid=\"%s\",type=\"corrected\"} %" PRIu64 "\n", g->uuid,
                              g->ecc_corrected);
        if (g->has & NVML_HAS_ECC_UNCORRECTED)
            stats_text_printf(t, "cinfer_gpu_ecc_errors{gpu_uuid=\"%s\",type=\"uncorrected\"} %" PRIu64 "\n", g->uuid,
                              g->ecc_uncorrected);
    }
    any = 0;
    for (size_t i = 0; i < m->num_gpus; i++) {
        const nvml_gpu *g = &m->gpus[i];
        if (!(g->has & (NVML_HAS_PCIE_TX | NVML_HAS_PCIE_RX))) continue;
        if (!any++)
            family(t, "cinfer_gpu_pcie_throughput_bytes_per_second", "gauge",
                   "PCIe throughput by direction (tx: GPU to host, rx: host to GPU), in bytes per second");
        if (g->has & NVML_HAS_PCIE_TX)
            stats_text_printf(
                t, "cinfer_gpu_pcie_throughput_bytes_per_second{gpu_uuid=\"%s\",direction=\"tx\"} %" PRIu64 "\n",
                g->uuid, g->pcie_tx_bps);
        if (g->has & NVML_HAS_PCIE_RX)
            stats_text_printf(
                t, "cinfer_gpu_pcie_throughput_bytes_per_second{gpu_uuid=\"%s\",direction=\"rx\"} %" PRIu64 "\n",
                g->uuid, g->pcie_rx_bps);
    }
}

static void write_allocators(stats_text *t, const metrics *m) {
    if (!m->num_allocs) return;
    static const struct {
        const char *name, *type, *help;
        size_t offset;
    } fams[] = {
        {"cinfer_gpu_allocator_allocated_bytes", "gauge", "Device memory held by live allocations",
         offsetof(cinfer_memory_stats, allocated_bytes)},
        {"cinfer_gpu_allocator_reserved_bytes", "gauge",
         "Device memory the caching allocator holds (allocated + cached)",
         offsetof(cinfer_memory_stats, reserved_bytes)},
        {"cinfer_gpu_allocator_peak_allocated_bytes", "gauge", "Highest allocated_bytes so far",
         offsetof(cinfer_memory_stats, peak_allocated_bytes)},
        {"cinfer_gpu_allocator_peak_reserved_bytes", "gauge", "Highest reserved_bytes so far",
         offsetof(cinfer_memory_stats, peak_reserved_bytes)},
        {"cinfer_gpu_allocator_inactive_split_bytes", "gauge", "Free bytes inside partly used segments (fragmentation)",
         offsetof(cinfer_memory_stats, inactive_split_bytes)},
        {"cinfer_gpu_allocator_limit_bytes", "gauge", "Cap on reserved bytes (0 = none)",
         offsetof(cinfer_memory_stats, limit_bytes)},
        {"cinfer_gpu_allocator_pinned_reserved_bytes", "gauge", "Pinned host staging memory the allocator holds",
         offsetof(cinfer_memory_stats, pinned_reserved_bytes)},
        {"cinfer_gpu_allocator_active_blocks", "gauge", "Live allocations",
         offsetof(cinfer_memory_stats, active_blocks)},
        {"cinfer_gpu_allocator_device_mallocs", "counter", "cudaMalloc calls made by the allocator",
         offsetof(cinfer_memory_stats, num_device_mallocs)},
        {"cinfer_gpu_allocator_device_frees", "counter", "cudaFree calls made by the allocator",
         offsetof(cinfer_memory_stats, num_device_frees)},
        {"cinfer_gpu_allocator_alloc_retries", "counter", "Allocations that freed the cache and retried",
         offsetof(cinfer_memory_stats, num_alloc_retries)},
        {"cinfer_gpu_allocator_ooms", "counter", "Allocations that failed for lack of device memory",
         offsetof(cinfer_memory_stats, num_ooms)},
    };
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
        family(t, fams[f].name, fams[f].type, fams[f].help);
        for (size_t i = 0; i < m->num_allocs; i++) {
            const alloc_sample *a = &m->allocs[i];
            size_t v = *(const size_t *)((const char *)&a->st + fams[f].offset);
            stats_text_printf(t, "%s{device=\"%d\",gpu_uuid=\"%s\"} %zu\n", fams[f].name, a->device, a->uuid, v);
        }
    }
}

/* ---- lifecycle ---- */

static void nvml_warn(const char *msg) { log_warn("%s", msg); }

int metrics_create(const metrics_options *opt, metrics **out, serve_error *e) {
    *out = NULL;
    metrics *m = calloc(1, sizeof *m);
    if (!m) return serve_fail(e, SERVE_INTERNAL, "out of memory");
    pthread_mutex_init(&m->lock, NULL);
    m->cache_ns = (uint64_t)(opt->cache_ms ? opt->cache_ms : 500) * 1000000u;
    m->cpu_util = m->cpu_per_inference_us = -1;
    const char *visible = opt->visible_devices ? opt->visible_devices : getenv("CUDA_VISIBLE_DEVICES");
    m->device = strdup(opt->device ? opt->device : "cpu");
    m->visible = visible ? strdup(visible) : NULL;
    if (!m->device || (visible && !m->visible)) {
        metrics_free(m);
        return serve_fail(e, SERVE_INTERNAL, "out of memory");
    }
    const char *lib = opt->nvml_library ? opt->nvml_library : getenv("CINFER_NVML_LIBRARY");
    char why[512] = "";
    m->nvml = nvml_open(lib, nvml_warn, why, sizeof why);
    if (m->nvml) {
        log_info("GPU telemetry: NVML (%s) sees %u GPU%s%s%s", lib && lib[0] ? lib : "libnvidia-ml.so.1",
                 nvml_device_count(m->nvml), nvml_device_count(m->nvml) == 1 ? "" : "s",
                 m->visible ? "; reporting those in CUDA_VISIBLE_DEVICES=" : "", m->visible ? m->visible : "");
    } else {
        log_info("GPU telemetry off: %s", why);
    }
    m->cpu_prev_ok = procstat_read_cpu(&m->cpu_prev) == 0; /* so the first scrape has a CPU utilisation */
    *out = m;
    return 0;
}

void metrics_free(metrics *m) {
    if (!m) return;
    nvml_close(m->nvml);
    free(m->gpus);
    free(m->allocs);
    free(m->device);
    free(m->visible);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

void metrics_write(metrics *m, repo *r, stats_text *t) {
    version_list v = {0};
    repo_foreach_version(r, collect_version, &v);
    if (v.oom) {
        t->oom = 1;
    } else {
        write_model_counters(t, &v);
        write_histograms(t, &v);
        write_model_memory(t, &v);
        pthread_mutex_lock(&m->lock);
        refresh(m, &v);
        write_host(t, m);
        write_gpus(t, m);
        write_allocators(t, m);
        pthread_mutex_unlock(&m->lock);
    }
    for (size_t i = 0; i < v.n; i++) model_version_unref(v.rows[i].mv);
    free(v.rows);
}
