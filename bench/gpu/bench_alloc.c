/* Allocator benchmark: replays an allocation trace (bench/gpu/alloc_trace.py) on two streams through the CUDA
 * module's caching allocator and through cudaMalloc/cudaFree, and times fixed-size pairs at 1 MiB and 64 MiB.
 * Prints the median and p90 cost of one malloc+free pair and the peak reserved/allocated bytes.
 *
 * Usage: bench_alloc TRACE [ITERATIONS]   (needs a GPU; links the CUDA module's code for the real per-device allocator)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_internal.h"

typedef struct event {
    char kind; /* 'a' or 'f' */
    int id;
    size_t bytes;
} event;

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static event *read_trace(const char *path, int *count, int *max_id) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    int cap = 1024, n = 0;
    event *ev = malloc(sizeof *ev * (size_t)cap);
    char kind;
    int id;
    *max_id = 0;
    while (fscanf(f, " %c %d", &kind, &id) == 2) {
        size_t bytes = 0;
        if (kind == 'a' && fscanf(f, " %zu", &bytes) != 1) break;
        if (n == cap) ev = realloc(ev, sizeof *ev * (size_t)(cap *= 2));
        ev[n++] = (event){kind, id, bytes};
        if (id > *max_id) *max_id = id;
    }
    fclose(f);
    *count = n;
    return ev;
}

/* Costs of malloc+free pairs: cost[id] accumulates the malloc time and then the free time of block id. */
typedef struct pair_costs {
    double *values;
    int n, cap;
} pair_costs;

static void add_cost(pair_costs *c, double us) {
    if (c->n == c->cap) c->values = realloc(c->values, sizeof(double) * (size_t)(c->cap = c->cap ? c->cap * 2 : 4096));
    c->values[c->n++] = us;
}

static void report(const char *name, pair_costs *c, size_t peak_reserved, size_t peak_allocated, size_t mallocs) {
    qsort(c->values, (size_t)c->n, sizeof(double), compare_double);
    printf("%-34s %8d %12.3f %12.3f %14.1f %14.1f %10zu\n", name, c->n, c->values[c->n / 2], c->values[c->n * 9 / 10],
           (double)peak_reserved / 1048576.0, (double)peak_allocated / 1048576.0, mallocs);
    c->n = 0;
}

#define CHECK(call)                                                                                       \
    do {                                                                                                  \
        cudaError_t e_ = (call);                                                                          \
        if (e_ != cudaSuccess) {                                                                          \
            fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));                                   \
            return 1;                                                                                     \
        }                                                                                                 \
    } while (0)

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_alloc TRACE [ITERATIONS]\n");
        return 2;
    }
    int iterations = argc > 2 ? atoi(argv[2]) : 20;
    int count, max_id;
    event *ev = read_trace(argv[1], &count, &max_id);
    if (!ev || count == 0) {
        fprintf(stderr, "bench_alloc: cannot read trace %s\n", argv[1]);
        return 1;
    }
    void **ptr = calloc((size_t)max_id + 1, sizeof(void *));
    double *t_alloc = calloc((size_t)max_id + 1, sizeof(double));
    cuda_device_state *d;
    if (cuda_device_get(0, &d) != CINFER_OK) {
        fprintf(stderr, "bench_alloc: %s\n", cinfer_last_error());
        return 1;
    }
    cudaStream_t streams[2];
    int ids[2];
    for (int s = 0; s < 2; s++) {
        CHECK(cudaStreamCreateWithFlags(&streams[s], cudaStreamNonBlocking));
        ids[s] = cuda_device_add_stream(d, streams[s]);
    }
    pair_costs costs = {0};
    printf("trace %s: %d events, %d blocks per run, %d runs alternating two streams\n", argv[1], count, max_id + 1,
           iterations);
    printf("%-34s %8s %12s %12s %14s %14s %10s\n", "path", "pairs", "median us", "p90 us", "peak resv MiB",
           "peak alloc MiB", "dev mallocs");

    /* caching allocator: run i on stream i % 2; every fourth block is also used by the other stream, so its free
     * waits on an event like a tensor handed to a copy stream */
    for (int warm = 0; warm < 2; warm++) {
        for (int it = 0; it < iterations; it++) {
            int s = it % 2;
            for (int k = 0; k < count; k++) {
                event *e = &ev[k];
                double t0 = now_us();
                if (e->kind == 'a') {
                    if (alloc_malloc(d->memory, e->bytes, ids[s], &ptr[e->id]) != CINFER_OK) {
                        fprintf(stderr, "bench_alloc: %s\n", cinfer_last_error());
                        return 1;
                    }
                    if (e->id % 4 == 0) alloc_record_stream(d->memory, ptr[e->id], ids[1 - s]);
                    t_alloc[e->id] = now_us() - t0;
                } else {
                    alloc_free(d->memory, ptr[e->id]);
                    if (warm) add_cost(&costs, t_alloc[e->id] + now_us() - t0);
                }
            }
        }
    }
    struct alloc_stats st;
    alloc_get_stats(d->memory, &st);
    report("caching allocator (trace)", &costs, st.peak_reserved_bytes, st.peak_allocated_bytes, st.num_device_mallocs);
    alloc_empty_cache(d->memory);

    for (int it = 0; it < iterations; it++) {
        size_t live = 0, peak = 0;
        for (int k = 0; k < count; k++) {
            event *e = &ev[k];
            double t0 = now_us();
            if (e->kind == 'a') {
                CHECK(cudaMalloc(&ptr[e->id], e->bytes));
                t_alloc[e->id] = now_us() - t0;
                live += e->bytes;
                if (live > peak) peak = live;
            } else {
                CHECK(cudaFree(ptr[e->id]));
                add_cost(&costs, t_alloc[e->id] + now_us() - t0);
            }
        }
        if (it == iterations - 1) report("cudaMalloc + cudaFree (trace)", &costs, peak, peak, (size_t)iterations * (size_t)(max_id + 1));
    }

    size_t fixed[2] = {(size_t)1 << 20, (size_t)64 << 20};
    for (int f = 0; f < 2; f++) {
        char name[64];
        alloc_reset_peak(d->memory);
        void *p;
        for (int i = 0; i < 1000; i++) {
            double t0 = now_us();
            alloc_malloc(d->memory, fixed[f], ids[0], &p);
            alloc_free(d->memory, p);
            add_cost(&costs, now_us() - t0);
        }
        alloc_get_stats(d->memory, &st);
        snprintf(name, sizeof name, "caching allocator %zu MiB pair", fixed[f] >> 20);
        report(name, &costs, st.peak_reserved_bytes, st.peak_allocated_bytes, st.num_device_mallocs);
        for (int i = 0; i < 200; i++) {
            double t0 = now_us();
            CHECK(cudaMalloc(&p, fixed[f]));
            CHECK(cudaFree(p));
            add_cost(&costs, now_us() - t0);
        }
        snprintf(name, sizeof name, "cudaMalloc+cudaFree %zu MiB pair", fixed[f] >> 20);
        report(name, &costs, fixed[f], fixed[f], 200);
    }
    return 0;
}
