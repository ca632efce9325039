/* The Prometheus page (GET :metrics-port/metrics, text format 0.0.4): Triton's per-model nv_inference_* counters,
 * cinfer's latency histograms and per-model memory, host CPU and memory from /proc, GPU telemetry from NVML
 * (Triton's nv_gpu_* names with the single label gpu_uuid, plus cinfer_gpu_* extras), and the CUDA allocator's
 * statistics per device in use. docs/server.md ("Metrics") lists every series.
 *
 * Telemetry (NVML, /proc, allocator) is sampled when a scrape asks for it and kept for a short time (cache_ms), so
 * a burst of scrapes costs one sample; the per-model counters are read live on every scrape. Scrapes run on the
 * metrics listener's own thread, never on the KServe HTTP threads. */
#ifndef SERVE_METRICS_H
#define SERVE_METRICS_H

#include <stddef.h>

#include "repo.h"
#include "serve_error.h"

typedef struct metrics_options {
    const char *device;       /* the server's --device ("cpu", "cuda", "cuda:N"): "cuda..." asks for allocator stats */
    const char *nvml_library; /* NVML to load; NULL: $CINFER_NVML_LIBRARY when set (then nothing else), else
                               * libnvidia-ml.so.1 */
    const char
        *visible_devices; /* GPUs to report, CUDA_VISIBLE_DEVICES syntax; NULL: $CUDA_VISIBLE_DEVICES (unset = all) */
    unsigned cache_ms;    /* telemetry sample lifetime; 0 = 500 ms */
} metrics_options;

typedef struct metrics metrics;

/* Loads NVML (its absence only switches the GPU series off, with one log line saying why) and takes the first
 * host and GPU samples (baselines for CPU utilisation and energy). Fails only when out of memory. */
int metrics_create(const metrics_options *opt, metrics **out, serve_error *e);
/* NULL is a no-op. */
void metrics_free(metrics *m);

/* Appends the whole page for the versions loaded in r. Thread-safe. */
void metrics_write(metrics *m, repo *r, stats_text *t);

#endif
