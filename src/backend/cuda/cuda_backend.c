/* The CUDA backend of one session: a stream, cuBLASLt and cuDNN handles, memory from the device's caching
 * allocator, pinned staging for host<->device copies, NVTX ranges per run and node, and kernel dispatch.
 *
 * Copies: inputs are copied into a pinned staging buffer (so the caller's memory is free at once) and queued
 * host->device; outputs are queued device->pinned and land in the caller's buffer at synchronize. Both
 * staging buffers only grow; a run that needs more waits for the queued copies before swapping buffers.
 * Session option "timeline": timing events around each copy and each stretch of compute (see run_timeline).
 * Setting CINFER_CUDA_SYNC=1 synchronises after every node so an asynchronous fault names its node.
 * Indices out of range: the index kernels report them through a page-locked flag the device writes directly
 * (cuda_index_check, kernels/index_check.h), tagged with the node; synchronize reads it after the wait it does
 * anyway and fails the run with CINFER_ERR_INVALID_ARGUMENT naming the node, as the CPU backend refuses the index.
 * Tests only: with CINFER_FAULT_INJECTION=1, CINFER_FAULT_NODE=<node name> makes that node write through an
 * invalid address instead of running, which loses the context like a real kernel bug would.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h> /* CUresult, CUdeviceptr: cuMemGetAddressRange through cudaGetDriverEntryPointByVersion */
#include <nvtx3/nvToolsExt.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/kernels/debug_fault.h"
#include "backend/cuda/kernels/movement.h"
#include "graph/op_schema.h"

typedef struct pending_copy {
    void *dst;
    size_t offset, bytes;
} pending_copy;

/* A pinned buffer that copies are staged through in order. */
typedef struct staging_buffer {
    void *data;
    size_t cap, used;
} staging_buffer;

/* One span of a run's timeline: events[start] and events[end] are recorded on its stream around the work. */
typedef struct timeline_span {
    int kind, stream; /* cinfer_span_kind; 0 session, 1 upload, 2 download stream */
    size_t bytes;
    int start, end;
} timeline_span;

/* Session option "timeline": a pool of timing events reused run after run (grown, never shrunk) and the spans of
 * the last run. Compute is one span from the first node launch or graph replay after a copy to the next copy (or
 * the run's end); nothing is recorded while capturing a graph (its replay is the span). */
typedef struct run_timeline {
    cudaEvent_t epoch; /* the device's (cuda_device_timeline_epoch) */
    cudaEvent_t *events;
    int num_events, used;
    timeline_span spans[CINFER_TIMELINE_MAX_SPANS];
    int num_spans;
    int open_compute; /* the compute span still open, or -1 */
} run_timeline;

typedef struct cuda_backend_ctx {
    cuda_device_state *dev;
    int stream_id;
    cuda_exec exec;
    cuda_weights *weights;
    void *scratch;
    size_t scratch_bytes;
    staging_buffer to_device, to_host;
    pending_copy *pending;
    size_t num_pending, cap_pending;
    cinfer_run_stats stats;
    uint64_t scratch_generation; /* bumped when the scratch buffer moves: graphs captured before are stale */
    bool capturing;
    cudaEvent_t join_event; /* orders the session's stream against a caller's (run_device), made on first use */
    cudaEvent_t wait_event; /* gpu_wait "block": a blocking-sync event the end-of-run wait sleeps on; else NULL */
    /* copy_overlapped: its two copy streams and the events that order them against the session's stream (made on
     * first use); lanes_open from a run's first overlapped copy until synchronize joins them back */
    cudaStream_t upload_stream, download_stream;
    cudaEvent_t uploaded, computed, downloaded;
    bool lanes_open;
    run_timeline *timeline; /* NULL unless the session asked for it */
    bool sync_each_node;
    const char *fault_node; /* fault injection (tests): the node that writes out of bounds, or NULL */
    const graph *graph;     /* the session's graph: an index_check tag k names its node k - 1 */
    /* work that may report into exec.index_check.flag was queued since synchronize last read it; still set at the
     * next begin_run (a run_device run, which ends without synchronize), the flag is cleared in stream order */
    bool index_flag_unread;
} cuda_backend_ctx;

static size_t align_staging(size_t n) { return (n + 255) & ~(size_t)255; }

/* ---- checks the kernels use ---- */

cinfer_status cuda_check_launch(const graph_node *n, const char *what, cudaError_t err) {
    if (err == cudaSuccess) return CINFER_OK;
    int dev = 0;
    cudaGetDevice(&dev);
    char ctx[300];
    snprintf(ctx, sizeof ctx, "%s node '%s': %s", n->op_type, n->name, what);
    return cuda_check(dev, err, ctx);
}

cinfer_status cuda_check_cublas(const graph_node *n, const char *what, cublasStatus_t st) {
    if (st == CUBLAS_STATUS_SUCCESS) return CINFER_OK;
    if (st == CUBLAS_STATUS_EXECUTION_FAILED || st == CUBLAS_STATUS_INTERNAL_ERROR) {
        cudaError_t err = cudaGetLastError(); /* a sticky fault shows up here first */
        if (err != cudaSuccess) return cuda_check_launch(n, what, err);
    }
    return core_error(st == CUBLAS_STATUS_NOT_SUPPORTED ? CINFER_ERR_UNSUPPORTED : CINFER_ERR_RUNTIME,
                      "%s node '%s': %s: cuBLAS status %d", n->op_type, n->name, what, (int)st);
}

cinfer_status cuda_check_cudnn(const graph_node *n, const char *what, cudnnStatus_t st) {
    if (st == CUDNN_STATUS_SUCCESS) return CINFER_OK;
    if (st == CUDNN_STATUS_EXECUTION_FAILED) {
        cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) return cuda_check_launch(n, what, err);
    }
    return core_error(st == CUDNN_STATUS_NOT_SUPPORTED ? CINFER_ERR_UNSUPPORTED : CINFER_ERR_RUNTIME,
                      "%s node '%s': %s: %s", n->op_type, n->name, what, cudnnGetErrorString(st));
}

void *cuda_scratch(cuda_exec *x, size_t bytes) {
    cuda_backend_ctx *c = (cuda_backend_ctx *)x->owner;
    if (bytes <= c->scratch_bytes) return c->scratch;
    size_t grown = bytes + bytes / 4;
    /* the old buffer goes back to this stream's pool: later work on the stream is ordered after its users */
    if (c->capturing) return NULL; /* a captured graph must not see the buffer move; the first (plain) run grew it */
    if (c->scratch) alloc_free(c->dev->memory, c->scratch);
    c->scratch = NULL;
    c->scratch_bytes = 0;
    c->scratch_generation++;
    if (alloc_malloc(c->dev->memory, grown, c->stream_id, &c->scratch) != CINFER_OK) return NULL;
    c->scratch_bytes = grown;
    return c->scratch;
}

static size_t large_workspace_bound(const cuda_backend_ctx *c) {
    size_t limit = alloc_get_limit(c->dev->memory);
    size_t bound = (limit ? limit : c->dev->total_memory) / 8;
    return bound < CUDA_LARGE_WORKSPACE_BYTES ? bound : CUDA_LARGE_WORKSPACE_BYTES;
}

void *cuda_exec_temp_alloc(cuda_exec *x, size_t bytes) {
    cuda_backend_ctx *c = (cuda_backend_ctx *)x->owner;
    void *p = NULL;
    return alloc_malloc(c->dev->memory, bytes, c->stream_id, &p) == CINFER_OK ? p : NULL;
}

void cuda_exec_temp_free(cuda_exec *x, void *p) {
    if (p) alloc_free(((cuda_backend_ctx *)x->owner)->dev->memory, p);
}

bool cuda_exec_capturing(const cuda_exec *x) { return ((const cuda_backend_ctx *)x->owner)->capturing; }
void cuda_exec_exclusive_begin(cuda_exec *x) { cuda_device_sync_begin(((cuda_backend_ctx *)x->owner)->dev); }
void cuda_exec_exclusive_end(cuda_exec *x) { cuda_device_sync_end(((cuda_backend_ctx *)x->owner)->dev); }

/* ---- kernel lookup by schema row (built once) ---- */

static const cuda_kernel **kernel_by_schema;
static size_t num_schemas;
static pthread_once_t kernel_index_once = PTHREAD_ONCE_INIT;

static void build_kernel_index(void) {
    size_t count = op_schema_count();
    const cuda_kernel **table = calloc(count ? count : 1, sizeof *table);
    if (!table) return;
    for (size_t i = 0; i < count; i++) table[i] = cuda_find_kernel(op_schema_at(i)->op_type);
    kernel_by_schema = table;
    num_schemas = count;
}

static const cuda_kernel *kernel_for(const graph_node *n) {
    pthread_once(&kernel_index_once, build_kernel_index);
    if (kernel_by_schema && n->schema_index >= 0 && (size_t)n->schema_index < num_schemas)
        return kernel_by_schema[n->schema_index];
    return cuda_find_kernel(n->op_type);
}

/* ---- backend interface ---- */

static cinfer_status use_device(cuda_backend_ctx *c) {
    CINFER_TRY(cuda_device_usable(c->dev));
    return cuda_check(c->dev->ordinal, cudaSetDevice(c->dev->ordinal), "cudaSetDevice");
}

/* ---- timeline (session option "timeline") ---- */

/* Records the next pool event on `stream`; *index is it, or -1 when the run already has CINFER_TIMELINE_MAX_SPANS
 * spans (later spans are not kept). */
static cinfer_status timeline_mark(cuda_backend_ctx *c, cudaStream_t stream, int *index) {
    run_timeline *t = c->timeline;
    *index = -1;
    if (t->used == t->num_events) {
        if (t->num_events >= 2 * CINFER_TIMELINE_MAX_SPANS) return CINFER_OK;
        int grown = t->num_events ? 2 * t->num_events : 64;
        cudaEvent_t *events = realloc(t->events, (size_t)grown * sizeof *events);
        if (!events) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of host memory");
        t->events = events;
        for (; t->num_events < grown; t->num_events++)
            CINFER_TRY(cuda_check(c->dev->ordinal, cudaEventCreate(&t->events[t->num_events]), "cudaEventCreate (timeline)"));
    }
    CINFER_TRY(cuda_check(c->dev->ordinal, cudaEventRecord(t->events[t->used], stream), "cudaEventRecord (timeline)"));
    *index = t->used++;
    return CINFER_OK;
}

/* Opens a span of `kind` on stream number `which` (`stream`); *span is its index, or -1 when not kept. */
static cinfer_status span_begin(cuda_backend_ctx *c, int kind, int which, cudaStream_t stream, size_t bytes, int *span) {
    run_timeline *t = c->timeline;
    *span = -1;
    if (t->num_spans == CINFER_TIMELINE_MAX_SPANS) return CINFER_OK;
    int start;
    CINFER_TRY(timeline_mark(c, stream, &start));
    if (start < 0) return CINFER_OK;
    t->spans[t->num_spans] = (timeline_span){kind, which, bytes, start, -1};
    *span = t->num_spans++;
    return CINFER_OK;
}

static cinfer_status span_end(cuda_backend_ctx *c, int span, cudaStream_t stream) {
    if (span < 0) return CINFER_OK;
    return timeline_mark(c, stream, &c->timeline->spans[span].end);
}

/* Before node launches and graph replays: opens the compute span unless one is open (or a capture is running). */
static cinfer_status compute_begins(cuda_backend_ctx *c) {
    run_timeline *t = c->timeline;
    if (!t || c->capturing || t->open_compute >= 0) return CINFER_OK;
    return span_begin(c, CINFER_SPAN_COMPUTE, 0, c->exec.stream, 0, &t->open_compute);
}

/* Before anything else is queued on the session's stream (a copy, a wait for a copy stream, the end of the run):
 * closes the open compute span there, so it does not take in a wait that is not compute. */
static cinfer_status compute_ends(cuda_backend_ctx *c) {
    run_timeline *t = c->timeline;
    if (!t || t->open_compute < 0) return CINFER_OK;
    int span = t->open_compute;
    t->open_compute = -1;
    return span_end(c, span, c->exec.stream);
}

/* A copy's span on stream number `which`: *span from copy_begins goes to span_end after the copy is queued. It closes
 * the open compute span first, so callers call it before the copy or a wait for it reaches the session's stream. */
static cinfer_status copy_begins(cuda_backend_ctx *c, int kind, int which, cudaStream_t stream, size_t bytes, int *span) {
    *span = -1;
    if (!c->timeline) return CINFER_OK;
    CINFER_TRY(compute_ends(c));
    return span_begin(c, kind, which, stream, bytes, span);
}

static cinfer_status copy_ends(cuda_backend_ctx *c, int span, cudaStream_t stream) {
    return c->timeline ? span_end(c, span, stream) : CINFER_OK;
}

static cinfer_status cuda_timeline_enable(backend *b) {
    cuda_backend_ctx *c = b->context;
    if (c->timeline) return CINFER_OK;
    CINFER_TRY(use_device(c));
    run_timeline *t = calloc(1, sizeof *t);
    if (!t) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of host memory");
    t->open_compute = -1;
    cinfer_status st = cuda_device_timeline_epoch(c->dev, c->exec.stream, &t->epoch);
    if (st != CINFER_OK) {
        free(t);
        return st;
    }
    c->timeline = t;
    return CINFER_OK;
}

/* Times from CUDA events: the run's first event from the epoch (float milliseconds, see cinfer.h), each event from
 * the run's first (exact to the events' resolution). */
static cinfer_status cuda_timeline_read(backend *b, cinfer_span *out, size_t capacity, size_t *count) {
    cuda_backend_ctx *c = b->context;
    run_timeline *t = c->timeline;
    *count = 0;
    if (!t || !t->used) return CINFER_OK;
    CINFER_TRY(use_device(c));
    const int dev = c->dev->ordinal;
    for (int i = 0; i < t->used; i++)
        CINFER_TRY(cuda_check(dev, cudaEventSynchronize(t->events[i]), "cudaEventSynchronize (timeline)"));
    float base_ms = 0;
    CINFER_TRY(cuda_check(dev, cudaEventElapsedTime(&base_ms, t->epoch, t->events[0]), "cudaEventElapsedTime (timeline)"));
    for (int i = 0; i < t->num_spans; i++) {
        const timeline_span *sp = &t->spans[i];
        if (sp->end < 0) continue; /* its end was not kept (the event pool was full) */
        if ((size_t)*count < capacity) {
            float start_ms = 0, end_ms = 0;
            CINFER_TRY(cuda_check(dev, cudaEventElapsedTime(&start_ms, t->events[0], t->events[sp->start]), "cudaEventElapsedTime (timeline)"));
            CINFER_TRY(cuda_check(dev, cudaEventElapsedTime(&end_ms, t->events[0], t->events[sp->end]), "cudaEventElapsedTime (timeline)"));
            out[*count] = (cinfer_span){.kind = sp->kind, .stream = sp->stream, .bytes = sp->bytes,
                                        .start_us = 1e3 * ((double)base_ms + start_ms), .end_us = 1e3 * ((double)base_ms + end_ms)};
        }
        (*count)++;
    }
    return CINFER_OK;
}

static void timeline_free(run_timeline *t) {
    if (!t) return;
    for (int i = 0; i < t->num_events; i++) cudaEventDestroy(t->events[i]);
    free(t->events);
    free(t);
}

static bool cuda_supports_op(const backend *b, const graph_node *n) {
    (void)b;
    return (n->domain == NULL || n->domain[0] == '\0' || strcmp(n->domain, "ai.onnx") == 0) && kernel_for(n) != NULL;
}

static cinfer_status cuda_alloc(backend *b, size_t bytes, void **out) {
    cuda_backend_ctx *c = b->context;
    CINFER_TRY(use_device(c));
    return alloc_malloc(c->dev->memory, bytes, c->stream_id, out);
}

static void cuda_release(backend *b, void *ptr) {
    cuda_backend_ctx *c = b->context;
    alloc_free(c->dev->memory, ptr);
}

/* Makes room for `bytes` more in a staging buffer: when it is too small, waits for the copies queued through it,
 * then swaps it for a bigger one. */
static cinfer_status staging_reserve(cuda_backend_ctx *c, staging_buffer *s, size_t bytes);

static cinfer_status flush_to_host(cuda_backend_ctx *c);

static cinfer_status stream_sync(cuda_backend_ctx *c) {
    if (!c->wait_event) return cuda_check(c->dev->ordinal, cudaStreamSynchronize(c->exec.stream), "cudaStreamSynchronize");
    CINFER_TRY(cuda_check(c->dev->ordinal, cudaEventRecord(c->wait_event, c->exec.stream), "cudaEventRecord"));
    return cuda_check(c->dev->ordinal, cudaEventSynchronize(c->wait_event), "cudaEventSynchronize");
}

static cinfer_status staging_reserve(cuda_backend_ctx *c, staging_buffer *s, size_t bytes) {
    if (s->used + bytes <= s->cap) return CINFER_OK;
    if (s->used) {
        CINFER_TRY(stream_sync(c));
        if (s == &c->to_host) CINFER_TRY(flush_to_host(c));
        s->used = 0; /* every copy staged through it has finished: run_device never synchronises, so reuse here */
        if (bytes <= s->cap) return CINFER_OK;
    }
    size_t cap = s->cap * 2 > bytes ? s->cap * 2 : bytes;
    if (cap < ((size_t)1 << 20)) cap = (size_t)1 << 20;
    void *grown = NULL;
    CINFER_TRY(alloc_malloc(c->dev->pinned, cap, c->stream_id, &grown));
    if (s->data) alloc_free(c->dev->pinned, s->data); /* its copies finished above */
    s->data = grown;
    s->cap = cap;
    s->used = 0;
    return CINFER_OK;
}

/* Page-locked host memory (cudaHostAlloc'd or registered) at both ends of [p, p + bytes): the DMA engines read and
 * write it directly, so copies skip the staging buffer and its memcpy. */
static bool host_is_pinned(const void *p, size_t bytes) {
    struct cudaPointerAttributes a, z;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess || a.type != cudaMemoryTypeHost ||
        cudaPointerGetAttributes(&z, (const char *)p + bytes - 1) != cudaSuccess || z.type != cudaMemoryTypeHost) {
        (void)cudaGetLastError(); /* an unknown pointer is not an error */
        return false;
    }
    return true;
}

static cinfer_status cuda_copy_to_device(backend *b, void *dst, const void *src, size_t bytes) {
    cuda_backend_ctx *c = b->context;
    if (!bytes) return CINFER_OK;
    CINFER_TRY(use_device(c));
    /* page-locked src is copied from directly (the run waits for the stream before it returns, so src stays the
     * caller's until then); anything else is staged */
    const void *from = src;
    if (!host_is_pinned(src, bytes)) {
        size_t need = align_staging(bytes);
        CINFER_TRY(staging_reserve(c, &c->to_device, need));
        char *stage = (char *)c->to_device.data + c->to_device.used;
        memcpy(stage, src, bytes);
        c->to_device.used += need;
        from = stage;
    }
    int span;
    CINFER_TRY(copy_begins(c, CINFER_SPAN_UPLOAD, 0, c->exec.stream, bytes, &span));
    CINFER_TRY(cuda_check(c->dev->ordinal, cudaMemcpyAsync(dst, from, bytes, cudaMemcpyHostToDevice, c->exec.stream),
                          "host-to-device copy"));
    CINFER_TRY(copy_ends(c, span, c->exec.stream));
    c->stats.host_to_device_copies++;
    c->stats.host_to_device_bytes += bytes;
    return CINFER_OK;
}

static bool cuda_host_pinned(backend *b, const void *p, size_t bytes) {
    (void)b;
    return bytes == 0 || host_is_pinned(p, bytes);
}

/* `waiting`'s next work waits for what is queued on `on` so far, through `event` (neither the host nor the GPU
 * blocks more than the order needs). */
static cinfer_status stream_waits_for(const cuda_backend_ctx *c, cudaStream_t waiting, cudaStream_t on, cudaEvent_t event) {
    CINFER_TRY(cuda_check(c->dev->ordinal, cudaEventRecord(event, on), "cudaEventRecord"));
    return cuda_check(c->dev->ordinal, cudaStreamWaitEvent(waiting, event, 0), "cudaStreamWaitEvent");
}

/* Forks the two copy streams off the session's stream: what is queued there so far (an earlier run_device writing
 * the same buffers, say) comes first. */
static cinfer_status open_lanes(cuda_backend_ctx *c) {
    const int dev = c->dev->ordinal;
    cudaStream_t *streams[] = {&c->upload_stream, &c->download_stream};
    cudaEvent_t *events[] = {&c->uploaded, &c->computed, &c->downloaded};
    for (int i = 0; i < 2; i++)
        if (!*streams[i]) CINFER_TRY(cuda_check(dev, cudaStreamCreateWithFlags(streams[i], cudaStreamNonBlocking), "cudaStreamCreate"));
    for (int i = 0; i < 3; i++)
        if (!*events[i]) CINFER_TRY(cuda_check(dev, cudaEventCreateWithFlags(events[i], cudaEventDisableTiming), "cudaEventCreate"));
    CINFER_TRY(stream_waits_for(c, c->upload_stream, c->exec.stream, c->computed));
    CINFER_TRY(stream_waits_for(c, c->download_stream, c->exec.stream, c->computed));
    c->lanes_open = true;
    return CINFER_OK;
}

/* Joins the copy streams back: the session's stream waits for the last download and the last upload (each upload
 * is waited for already, unless a run stopped between its copy and that wait), so a wait on the session's stream
 * covers them and later work is ordered after. */
static cinfer_status close_lanes(cuda_backend_ctx *c) {
    if (!c->lanes_open) return CINFER_OK;
    c->lanes_open = false;
    CINFER_TRY(stream_waits_for(c, c->exec.stream, c->download_stream, c->downloaded));
    return stream_waits_for(c, c->exec.stream, c->upload_stream, c->uploaded);
}

/* An event is waited for as last recorded when cudaStreamWaitEvent is called, so one event per direction serves
 * every chunk. Host memory must be page-locked (host_pinned). Only runs call it: begin_run checked the device and
 * made it current. */
static cinfer_status cuda_copy_overlapped(backend *b, void *dst, const void *src, size_t bytes, bool to_device) {
    cuda_backend_ctx *c = b->context;
    if (!bytes) return CINFER_OK;
    if (!c->lanes_open) CINFER_TRY(open_lanes(c));
    const int dev = c->dev->ordinal;
    int span;
    if (to_device) {
        CINFER_TRY(copy_begins(c, CINFER_SPAN_UPLOAD, 1, c->upload_stream, bytes, &span));
        CINFER_TRY(cuda_check(dev, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->upload_stream),
                              "host-to-device copy (upload stream)"));
        CINFER_TRY(copy_ends(c, span, c->upload_stream));
        CINFER_TRY(stream_waits_for(c, c->exec.stream, c->upload_stream, c->uploaded));
        c->stats.host_to_device_copies++;
        c->stats.host_to_device_bytes += bytes;
        return CINFER_OK;
    }
    CINFER_TRY(stream_waits_for(c, c->download_stream, c->exec.stream, c->computed));
    CINFER_TRY(copy_begins(c, CINFER_SPAN_DOWNLOAD, 2, c->download_stream, bytes, &span)); /* after the wait: the copy's own start */
    CINFER_TRY(cuda_check(dev, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->download_stream),
                          "device-to-host copy (download stream)"));
    CINFER_TRY(copy_ends(c, span, c->download_stream));
    c->stats.device_to_host_copies++;
    c->stats.device_to_host_bytes += bytes;
    return CINFER_OK;
}

static cinfer_status cuda_copy_to_host(backend *b, void *dst, const void *src, size_t bytes) {
    cuda_backend_ctx *c = b->context;
    if (!bytes) return CINFER_OK;
    CINFER_TRY(use_device(c));
    /* straight into page-locked dst (synchronize completes it); anything else lands in staging and is moved out by
     * flush_to_host once the stream is idle */
    const bool staged = !host_is_pinned(dst, bytes);
    const size_t need = align_staging(bytes);
    if (staged) {
        CINFER_TRY(staging_reserve(c, &c->to_host, need));
        if (c->num_pending == c->cap_pending) {
            size_t cap = c->cap_pending ? c->cap_pending * 2 : 16;
            pending_copy *p = realloc(c->pending, cap * sizeof *p);
            if (!p) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of host memory");
            c->pending = p;
            c->cap_pending = cap;
        }
    }
    void *to = staged ? (char *)c->to_host.data + c->to_host.used : dst;
    int span;
    CINFER_TRY(copy_begins(c, CINFER_SPAN_DOWNLOAD, 0, c->exec.stream, bytes, &span));
    CINFER_TRY(cuda_check(c->dev->ordinal, cudaMemcpyAsync(to, src, bytes, cudaMemcpyDeviceToHost, c->exec.stream),
                          "device-to-host copy"));
    CINFER_TRY(copy_ends(c, span, c->exec.stream));
    if (staged) {
        c->pending[c->num_pending++] = (pending_copy){dst, c->to_host.used, bytes};
        c->to_host.used += need;
    }
    c->stats.device_to_host_copies++;
    c->stats.device_to_host_bytes += bytes;
    return CINFER_OK;
}


/* The driver's cuMemGetAddressRange, looked up once through the runtime (no link against libcuda); NULL where the
 * driver does not give it. */
typedef CUresult (*address_range_fn)(CUdeviceptr *base, size_t *size, CUdeviceptr p);
static address_range_fn address_range;
static pthread_once_t address_range_once = PTHREAD_ONCE_INIT;
static void find_address_range(void) {
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault, &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
        address_range = (address_range_fn)fn;
    (void)cudaGetLastError();
}

/* Allocations of this device that device_reads has found, [base, base + size): a range inside one needs no
 * second look within one batch of copies (the caller keeps its buffers alive for the call). */
enum { KNOWN_RANGES = 8 };
typedef struct device_ranges {
    int count;
    uintptr_t base[KNOWN_RANGES], size[KNOWN_RANGES];
} device_ranges;

/* Whether the copy kernel may touch [p, p + bytes): memory of this device at the same address, the whole range
 * inside one allocation. Anything else (pageable or mapped host memory, another GPU's, a range running past its
 * allocation) goes to the copy calls, which refuse a bad range with an error where a kernel would fault the
 * context or overrun a neighbouring allocation. `known` (or NULL) remembers the allocations found: a DLRM-style
 * run's 27 inputs and the plan's buffers lie in a few, so its 108 driver calls a run become a handful. */
static bool range_inside(uintptr_t at, size_t bytes, uintptr_t base, size_t size) {
    return at >= base && at - base <= size && bytes <= size - (at - base); /* no wrap for a start past the end */
}

static bool device_reads(int ordinal, const void *p, size_t bytes, device_ranges *known) {
    const uintptr_t at = (uintptr_t)p;
    for (int i = 0; known && i < known->count; i++)
        if (range_inside(at, bytes, known->base[i], known->size[i])) return true;
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    if (a.devicePointer != p || a.type != cudaMemoryTypeDevice || a.device != ordinal) return false;
    pthread_once(&address_range_once, find_address_range);
    CUdeviceptr base = 0;
    size_t size = 0;
    if (!address_range || address_range(&base, &size, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS) return false;
    if (!range_inside(at, bytes, (uintptr_t)base, size)) return false;
    if (known && known->count < KNOWN_RANGES) {
        known->base[known->count] = (uintptr_t)base;
        known->size[known->count++] = size;
    }
    return true;
}

/* The copies as one launch of the SM copy kernel (an SM copy runs at the memory's bandwidth, where the copy engine
 * takes a few microseconds per copy however small: H200 trace, a DLRM-style model's 28 copies, 23 us), when there
 * are at most MOVEMENT_COPY_BATCH_MAX of them and every range passes device_reads; *launched says whether it took
 * them. */
static cinfer_status kernel_copies(cuda_backend_ctx *c, void *const *dst, const void *const *src, const size_t *bytes,
                                   size_t n, bool *launched) {
    *launched = n > 0 && n <= MOVEMENT_COPY_BATCH_MAX;
    device_ranges known = {0};
    for (size_t i = 0; *launched && i < n; i++)
        *launched = device_reads(c->dev->ordinal, src[i], bytes[i], &known) &&
                    device_reads(c->dev->ordinal, dst[i], bytes[i], &known);
    if (!*launched) return CINFER_OK;
    movement_copy_batch batch;
    batch.n = (int)n;
    for (size_t i = 0; i < n; i++) {
        batch.dst[i] = dst[i];
        batch.src[i] = src[i];
        batch.bytes[i] = bytes[i];
    }
    return cuda_check(c->dev->ordinal, movement_launch_copy_batch(&batch, c->exec.stream), "device copy");
}

/* One device-to-device copy: kernel_copies, else cudaMemcpyAsync. */
static cinfer_status queue_device_copy(cuda_backend_ctx *c, void *dst, const void *src, size_t bytes) {
    bool launched;
    CINFER_TRY(kernel_copies(c, &dst, &src, &bytes, 1, &launched));
    if (launched) return CINFER_OK;
    return cuda_check(c->dev->ordinal, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->exec.stream),
                      "device-to-device copy");
}

/* Device-to-device copies in stream order: kernel_copies; otherwise cudaMemcpyBatchAsync (its CUDA 13 form), one
 * call; where it is missing or refuses (an older toolkit or driver, a pointer kind it will not take), one
 * cudaMemcpyAsync each, which reports a real fault itself. */
static cinfer_status queue_device_copies(cuda_backend_ctx *c, void *const *dst, const void *const *src,
                                        const size_t *bytes, size_t n) {
    bool launched;
    CINFER_TRY(kernel_copies(c, dst, src, bytes, n, &launched));
    if (launched) return CINFER_OK;
#if CUDART_VERSION >= 13000
    struct cudaMemcpyAttributes attr;
    memset(&attr, 0, sizeof attr);
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream; /* the sources may be written by earlier stream work */
    size_t first = 0;
    if (cudaMemcpyBatchAsync(dst, (const void **)src, bytes, n, &attr, &first, 1, c->exec.stream) == cudaSuccess)
        return CINFER_OK;
    (void)cudaGetLastError(); /* a refusal is not a fault: the per-copy path follows */
#endif
    for (size_t i = 0; i < n; i++) /* kernel_copies refused them: straight to the copy calls */
        if (bytes[i])
            CINFER_TRY(cuda_check(c->dev->ordinal,
                                  cudaMemcpyAsync(dst[i], src[i], bytes[i], cudaMemcpyDeviceToDevice, c->exec.stream),
                                  "device-to-device copy"));
    return CINFER_OK;
}

static cinfer_status cuda_copy_on_device(backend *b, void *dst, const void *src, size_t bytes) {
    cuda_backend_ctx *c = b->context;
    if (!bytes) return CINFER_OK;
    int span;
    CINFER_TRY(copy_begins(c, CINFER_SPAN_DEVICE_COPY, 0, c->exec.stream, bytes, &span));
    CINFER_TRY(queue_device_copy(c, dst, src, bytes));
    return copy_ends(c, span, c->exec.stream);
}

/* One span for the batch (its bytes summed). */
static cinfer_status cuda_copy_on_device_batch(backend *b, void *const *dst, const void *const *src, const size_t *bytes,
                                               size_t n) {
    cuda_backend_ctx *c = b->context;
    if (!n) return CINFER_OK;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += bytes[i];
    int span;
    CINFER_TRY(copy_begins(c, CINFER_SPAN_DEVICE_COPY, 0, c->exec.stream, total, &span));
    CINFER_TRY(queue_device_copies(c, dst, src, bytes, n));
    return copy_ends(c, span, c->exec.stream);
}

/* The same test the copy kernel applies (device_reads): kernels may read and write the range directly. */
static bool cuda_owns_device_range(backend *b, const void *p, size_t bytes) {
    cuda_backend_ctx *c = b->context;
    return use_device(c) == CINFER_OK && device_reads(c->dev->ordinal, p, bytes, NULL);
}

/* An event recorded on one stream and waited for on the other: neither the host nor the GPU blocks more than
 * the order needs. */
static cinfer_status cuda_join_stream(backend *b, void *stream, bool session_waits) {
    cuda_backend_ctx *c = b->context;
    CINFER_TRY(use_device(c));
    if (!c->join_event)
        CINFER_TRY(cuda_check(c->dev->ordinal, cudaEventCreateWithFlags(&c->join_event, cudaEventDisableTiming),
                              "cudaEventCreate"));
    cudaStream_t caller = (cudaStream_t)stream, from = session_waits ? caller : c->exec.stream,
                 to = session_waits ? c->exec.stream : caller;
    enum cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (session_waits && cudaStreamIsCapturing(caller, &capturing) == cudaSuccess && capturing != cudaStreamCaptureStatusNone)
        return core_error(CINFER_ERR_UNSUPPORTED, "cinfer_session_run_device: the caller's stream is being captured into a "
                          "CUDA graph; cinfer captures (and replays) its own graphs, so call it outside the capture");
    return stream_waits_for(c, to, from, c->join_event);
}

/* ---- CUDA Graphs ---- */

typedef struct cuda_graph_run {
    cudaGraphExec_t exec;
    uint64_t scratch_generation; /* the scratch buffer the captured kernels use */
} cuda_graph_run;

static cinfer_status cuda_graph_begin(backend *b) {
    cuda_backend_ctx *c = b->context;
    if (c->sync_each_node || c->fault_node)
        return core_error(CINFER_ERR_UNSUPPORTED, "CUDA graphs are off while CINFER_CUDA_SYNC or fault injection is set");
    CINFER_TRY(use_device(c));
    /* thread-local mode: other threads' CUDA calls (other sessions) go on while this one captures, except the
     * device-wide synchronising ones, which wait for the capture_lock held shared until graph_end */
    pthread_rwlock_rdlock(&c->dev->capture_lock);
    cinfer_status st = cuda_check(c->dev->ordinal, cudaStreamBeginCapture(c->exec.stream, cudaStreamCaptureModeThreadLocal),
                                  "cudaStreamBeginCapture");
    if (st != CINFER_OK) {
        pthread_rwlock_unlock(&c->dev->capture_lock);
        return st;
    }
    c->capturing = true;
    return CINFER_OK;
}

static void *cuda_graph_end(backend *b, bool keep) {
    cuda_backend_ctx *c = b->context;
    cudaGraph_t graph = NULL;
    cudaError_t err = cudaStreamEndCapture(c->exec.stream, &graph);
    c->capturing = false;
    pthread_rwlock_unlock(&c->dev->capture_lock);
    cuda_graph_run *run = NULL;
    if (err == cudaSuccess && graph && keep) {
        run = calloc(1, sizeof *run);
        if (run && cudaGraphInstantiate(&run->exec, graph, 0) == cudaSuccess) {
            run->scratch_generation = c->scratch_generation;
        } else {
            free(run);
            run = NULL;
        }
    }
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError(); /* a failed capture leaves a non-sticky error; the plain run that follows must not see it */
    return run;
}

static cinfer_status cuda_graph_launch(backend *b, void *exec, bool *stale) {
    cuda_backend_ctx *c = b->context;
    cuda_graph_run *run = exec;
    *stale = run->scratch_generation != c->scratch_generation;
    if (*stale) return CINFER_OK;
    CINFER_TRY(compute_begins(c));
    c->index_flag_unread = true; /* the captured index kernels hold the flag's address and their nodes' tags */
    return cuda_check(c->dev->ordinal, cudaGraphLaunch(run->exec, c->exec.stream), "cudaGraphLaunch");
}

static void cuda_graph_destroy(backend *b, void *exec) {
    cuda_backend_ctx *c = b->context;
    cuda_graph_run *run = exec;
    if (!run) return;
    cudaSetDevice(c->dev->ordinal);
    cudaStreamSynchronize(c->exec.stream); /* a replay still queued keeps using it */
    cudaGraphExecDestroy(run->exec);
    free(run);
}

/* After the stream is idle: moves staged outputs to their destinations. */
static cinfer_status flush_to_host(cuda_backend_ctx *c) {
    for (size_t i = 0; i < c->num_pending; i++)
        memcpy(c->pending[i].dst, (char *)c->to_host.data + c->pending[i].offset, c->pending[i].bytes);
    c->num_pending = 0;
    c->to_host.used = 0;
    return CINFER_OK;
}

/* After the stream is idle: an index out of range that a kernel reported (cuda_index_check) fails the run like the
 * CPU backend's refusal, naming the first node that met one; the flag is cleared for the next run. A plain load of
 * page-locked memory: the stream's synchronisation made the device's writes visible, and nothing is copied. */
static cinfer_status check_index_flag(cuda_backend_ctx *c) {
    volatile int *flag = c->exec.index_check.flag;
    c->index_flag_unread = false;
    const int tag = flag ? *flag : 0;
    if (!tag) return CINFER_OK;
    *flag = 0;
    if (tag < 1 || tag > c->graph->num_nodes)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "an index is out of range (found on cuda:%d after the run)",
                          c->dev->ordinal);
    const graph_node *n = &c->graph->nodes[tag - 1];
    return core_error(CINFER_ERR_INVALID_ARGUMENT, "%s node '%s': an index is out of range for the axis it indexes "
                      "(found on cuda:%d after the run; the outputs were discarded)", n->op_type, n->name, c->dev->ordinal);
}

static cinfer_status cuda_synchronize(backend *b) {
    cuda_backend_ctx *c = b->context;
    CINFER_TRY(use_device(c));
    CINFER_TRY(compute_ends(c));
    CINFER_TRY(close_lanes(c));
    CINFER_TRY(stream_sync(c));
    c->to_device.used = 0;
    CINFER_TRY(flush_to_host(c));
    return check_index_flag(c);
}

static cinfer_status cuda_run_node(backend *b, const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    cuda_backend_ctx *c = b->context; /* begin_run checked the device and made it current for this run */
    const cuda_kernel *k = kernel_for(n);
    if (!k) return core_error(CINFER_ERR_UNSUPPORTED, "%s node '%s': no CUDA kernel", n->op_type, n->name);
    CINFER_TRY(compute_begins(c));
    /* the tag names this node if one of its index kernels meets an index out of range (check_index_flag) */
    c->exec.index_check.tag = n >= c->graph->nodes && n < c->graph->nodes + c->graph->num_nodes
                                  ? (int)(n - c->graph->nodes) + 1
                                  : -1;
    c->index_flag_unread = true;
    nvtxRangePushA(n->name);
    cinfer_status st = c->fault_node && strcmp(c->fault_node, n->name) == 0
                           ? cuda_check_launch(n, "injected fault", cuda_launch_illegal_write(c->exec.stream))
                           : k->run(&c->exec, n, in, num_in, out, num_out);
    if (st == CINFER_OK && c->sync_each_node) {
        st = cuda_check_launch(n, "running", cudaStreamSynchronize(c->exec.stream));
    }
    nvtxRangePop();
    return st;
}

static cinfer_status cuda_begin_run(backend *b, const char *label) {
    cuda_backend_ctx *c = b->context;
    CINFER_TRY(use_device(c));
    memset(&c->stats, 0, sizeof c->stats);
    if (c->timeline) {
        c->timeline->used = c->timeline->num_spans = 0;
        c->timeline->open_compute = -1;
    }
    c->exec.large_workspace_bytes = large_workspace_bound(c); /* once per run, not per Conv: it takes a lock */
    if (c->index_flag_unread) { /* the last run ended unread: a report of its own must not fail this one */
        CINFER_TRY(cuda_check(c->dev->ordinal, movement_launch_index_check_reset(c->exec.index_check, c->exec.stream),
                              "clearing the index flag"));
        c->index_flag_unread = false;
    }
    nvtxRangePushA(label ? label : "cinfer run");
    return CINFER_OK;
}

static void cuda_end_run(backend *b) {
    /* a run_device run ends without synchronize, so its compute span closes here; end_run cannot fail, and an event
     * record that fails (a lost context) fails the session's next CUDA call as well */
    (void)compute_ends(b->context);
    nvtxRangePop();
}

static void *cuda_constant_data(backend *b, int v) {
    cuda_backend_ctx *c = b->context;
    return c->weights ? cuda_weights_data(c->weights, v) : NULL;
}

static cinfer_status cuda_device_memory(backend *b, size_t *capacity, size_t *in_use) {
    cuda_backend_ctx *c = b->context;
    CINFER_TRY(use_device(c));
    struct alloc_stats st;
    alloc_get_stats(c->dev->memory, &st);
    size_t limit = alloc_get_limit(c->dev->memory);
    if (limit) { /* a configured cap: only this process's cache counts against it */
        *capacity = limit;
        *in_use = st.reserved_bytes;
        return CINFER_OK;
    }
    size_t free_b = 0, total_b = 0;
    CINFER_TRY(cuda_check(c->dev->ordinal, cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo"));
    *capacity = total_b;
    *in_use = total_b - free_b > st.reserved_bytes ? total_b - free_b : st.reserved_bytes; /* other processes too */
    return CINFER_OK;
}

static void cuda_last_run_stats(const backend *b, cinfer_run_stats *out) {
    const cuda_backend_ctx *c = b->context;
    *out = c->stats;
}

static void cuda_free(backend *b) {
    if (!b) return;
    cuda_backend_ctx *c = b->context;
    if (c) {
        cudaSetDevice(c->dev->ordinal);
        cudaStream_t ours[] = {c->exec.stream, c->upload_stream, c->download_stream};
        for (int i = 0; i < 3; i++)
            if (ours[i]) cudaStreamSynchronize(ours[i]); /* nothing of ours may still run when its memory goes */
        if (c->scratch) alloc_free(c->dev->memory, c->scratch);
        if (c->exec.workspace) alloc_free(c->dev->memory, c->exec.workspace);
        if (c->to_device.data) alloc_free(c->dev->pinned, c->to_device.data);
        if (c->to_host.data) alloc_free(c->dev->pinned, c->to_host.data);
        if (c->exec.index_check.flag) alloc_free(c->dev->pinned, c->exec.index_check.flag);
        cuda_weights_release(c->dev, c->weights);
        cuda_device_sync_begin(c->dev); /* cuDNN's destroy synchronises the device */
        if (c->exec.dnn) cudnnDestroy(c->exec.dnn);
        if (c->exec.lt) cublasLtDestroy(c->exec.lt);
        cuda_device_sync_end(c->dev);
        if (c->stream_id > 0) cuda_device_remove_stream(c->dev, c->stream_id);
        if (c->exec.stream) cudaStreamDestroy(c->exec.stream);
        if (c->upload_stream) cudaStreamDestroy(c->upload_stream);
        if (c->download_stream) cudaStreamDestroy(c->download_stream);
        if (c->uploaded) cudaEventDestroy(c->uploaded);
        if (c->computed) cudaEventDestroy(c->computed);
        if (c->downloaded) cudaEventDestroy(c->downloaded);
        if (c->join_event) cudaEventDestroy(c->join_event);
        if (c->wait_event) cudaEventDestroy(c->wait_event);
        timeline_free(c->timeline);
        free(c->pending);
        free(c);
    }
    free(b);
}

static const struct backend_i cuda_iface = {
    .name = "cuda",
    .free = cuda_free,
    .supports_op = cuda_supports_op,
    .alloc = cuda_alloc,
    .release = cuda_release,
    .copy_to_device = cuda_copy_to_device,
    .copy_to_host = cuda_copy_to_host,
    .copy_on_device = cuda_copy_on_device,
    .copy_on_device_batch = cuda_copy_on_device_batch,
    .join_stream = cuda_join_stream,
    .owns_device_range = cuda_owns_device_range,
    .host_pinned = cuda_host_pinned,
    .copy_overlapped = cuda_copy_overlapped,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_launch = cuda_graph_launch,
    .graph_destroy = cuda_graph_destroy,
    .run_node = cuda_run_node,
    .synchronize = cuda_synchronize,
    .begin_run = cuda_begin_run,
    .end_run = cuda_end_run,
    .constant_data = cuda_constant_data,
    .last_run_stats = cuda_last_run_stats,
    .timeline_enable = cuda_timeline_enable,
    .timeline_read = cuda_timeline_read,
    .device_memory = cuda_device_memory,
    .host_memory = false,
};

cinfer_status cuda_backend_create(const cuda_backend_options *opt, const graph *g, backend **out) {
    cuda_device_state *d;
    CINFER_TRY(cuda_device_get(opt->device, &d));
    CINFER_TRY(cuda_device_usable(d));
    backend *b = calloc(1, sizeof *b);
    cuda_backend_ctx *c = calloc(1, sizeof *c);
    if (!b || !c) {
        free(b);
        free(c);
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    b->iface = &cuda_iface;
    b->context = c;
    c->dev = d;
    c->exec.device = d->ordinal;
    c->exec.allow_tf32 = opt->allow_tf32;
    c->exec.deterministic = opt->deterministic;
    c->exec.owner = (struct cuda_backend_ctx *)c;
    c->graph = g;
    const char *sync = getenv("CINFER_CUDA_SYNC");
    c->sync_each_node = sync && sync[0] == '1';
    const char *inject = getenv("CINFER_FAULT_INJECTION");
    if (inject && strcmp(inject, "1") == 0) c->fault_node = getenv("CINFER_FAULT_NODE");
    cinfer_status st = cuda_check(d->ordinal, cudaSetDevice(d->ordinal), "cudaSetDevice");
    if (st == CINFER_OK)
        st = cuda_check(d->ordinal, cudaStreamCreateWithFlags(&c->exec.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    if (st == CINFER_OK) {
        c->stream_id = cuda_device_add_stream(d, c->exec.stream);
        if (c->stream_id < 0)
            st = core_error(CINFER_ERR_UNSUPPORTED, "cuda:%d: more than %d sessions at once", d->ordinal, CUDA_MAX_STREAMS - 1);
    }
    if (st == CINFER_OK && opt->blocking_wait)
        st = cuda_check(d->ordinal, cudaEventCreateWithFlags(&c->wait_event, cudaEventBlockingSync | cudaEventDisableTiming),
                        "cudaEventCreate");
    if (st == CINFER_OK) {
        cublasStatus_t bs = cublasLtCreate(&c->exec.lt);
        if (bs != CUBLAS_STATUS_SUCCESS) st = core_error(CINFER_ERR_RUNTIME, "cuda:%d: cublasLtCreate failed (status %d)", d->ordinal, (int)bs);
    }
    if (st == CINFER_OK) {
        cudnnStatus_t ds = cudnnCreate(&c->exec.dnn);
        if (ds == CUDNN_STATUS_SUCCESS) ds = cudnnSetStream(c->exec.dnn, c->exec.stream);
        if (ds != CUDNN_STATUS_SUCCESS)
            st = core_error(CINFER_ERR_RUNTIME, "cuda:%d: cuDNN initialisation failed: %s", d->ordinal, cudnnGetErrorString(ds));
    }
    if (st == CINFER_OK) {
        c->exec.workspace_bytes = CUDA_WORKSPACE_BYTES;
        const char *ws_mb = getenv("CINFER_CUDA_WORKSPACE_MB"); /* tuning: larger batches' fastest convolutions */
        if (ws_mb && atol(ws_mb) > 0 && atol(ws_mb) <= 65536) c->exec.workspace_bytes = (size_t)atol(ws_mb) << 20;
        st = alloc_malloc(d->memory, c->exec.workspace_bytes, c->stream_id, &c->exec.workspace);
    }
    if (st == CINFER_OK) { /* the index flag: page-locked, so the device writes it and the host reads it in place */
        void *flag = NULL;
        st = alloc_malloc(d->pinned, sizeof(int), c->stream_id, &flag);
        if (st == CINFER_OK) {
            *(volatile int *)flag = 0;
            c->exec.index_check.flag = flag;
        }
    }
    if (st == CINFER_OK) st = cuda_weights_acquire(d, g, &c->weights);
    if (st != CINFER_OK) {
        cuda_free(b);
        return st;
    }
    *out = b;
    return CINFER_OK;
}
