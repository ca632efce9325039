/* The interface every backend fills (after ggml-backend): memory, copies, and running one node.
 *
 * An object is { iface, context }: iface is a table of function pointers (optional ones may be NULL),
 * context the backend's private state. The runtime plans memory and walks the nodes; a backend only
 * says which ops it has and runs them on buffers it allocated.
 */
#ifndef CINFER_BACKEND_H
#define CINFER_BACKEND_H

#include <stdbool.h>

#include "graph/graph.h"

typedef struct backend backend;

struct backend_i {
    const char *name; /* "cpu", "cuda" */
    void (*free)(backend *b);
    /* Does this backend implement the node's op (any dtype it may meet)? */
    bool (*supports_op)(const backend *b, const graph_node *n);
    /* Device memory for arenas and outputs; host memory for the CPU backend. */
    cinfer_status (*alloc)(backend *b, size_t bytes, void **out);
    void (*release)(backend *b, void *ptr);
    /* Copies between host and the backend's memory (memcpy on the CPU). Device backends may queue them:
     * copy_to_device may return before the copy ran (the source may be reused at once: it is staged), and
     * copy_to_host completes at the next synchronize. */
    cinfer_status (*copy_to_device)(backend *b, void *dst, const void *src, size_t bytes);
    cinfer_status (*copy_to_host)(backend *b, void *dst, const void *src, size_t bytes);
    /* Device backends: a copy within the device's memory, queued on the session's stream. */
    cinfer_status (*copy_on_device)(backend *b, void *dst, const void *src, size_t bytes);
    /* Optional (device backends): n such copies (each bytes[i] > 0) queued in one call, for models with many
     * inputs (a DLRM-style model has 27): one API call instead of n. */
    cinfer_status (*copy_on_device_batch)(backend *b, void *const *dst, const void *const *src, const size_t *bytes,
                                          size_t n);
    /* Device backends: orders the session's stream against a caller's (a cudaStream_t; NULL = the legacy default
     * stream): session_waits = true makes the session's next work wait for what is queued on `stream` so far;
     * false makes `stream`'s next work wait for what the session queued so far. Neither blocks the host. */
    cinfer_status (*join_stream)(backend *b, void *stream, bool session_waits);
    /* Optional (device backends): whether [p, p + bytes) is memory of this backend's device that kernels may read
     * and write directly (one allocation holds the whole range), so a run may bind it in place of a copy. */
    bool (*owns_device_range)(backend *b, const void *p, size_t bytes);
    /* Optional (device backends): whether [p, p + bytes) is page-locked host memory, which copies reach by DMA. */
    bool (*host_pinned)(backend *b, const void *p, size_t bytes);
    /* Optional (device backends): a copy between page-locked host memory and the device that may overlap other
     * copies and the session's work: to_device on an upload stream (the session's later work waits for it), else
     * on a download stream after the session's work so far. synchronize waits for both and joins them back, so
     * the session's work after it is ordered after them. Chunked copies of pointwise models use it. */
    cinfer_status (*copy_overlapped)(backend *b, void *dst, const void *src, size_t bytes, bool to_device);
    /* Runs one node on tensors whose data lives in this backend's memory; shapes are already inferred. */
    cinfer_status (*run_node)(backend *b, const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
    /* Waits for queued work (NULL for synchronous backends); completes pending copy_to_host copies. */
    cinfer_status (*synchronize)(backend *b);
    /* Optional: bracket one run (per-run copy counters, profiler ranges). `label` names the model. */
    cinfer_status (*begin_run)(backend *b, const char *label);
    void (*end_run)(backend *b);
    /* Device backends: the device copy of constant value `v` of the graph the backend was created for (uploaded
     * once per device and model). NULL for host backends. */
    void *(*constant_data)(backend *b, int v);
    /* Optional (device backends): the memory sessions may use (the device's total or its configured limit) and
     * how much of it is taken now (by this process's cache or others). */
    cinfer_status (*device_memory)(backend *b, size_t *capacity, size_t *in_use);
    /* Optional (device backends): CUDA Graphs. graph_begin starts capturing the session's stream; graph_end stops
     * it and returns an executable graph of what was queued, or NULL when capture was impossible (keep = false
     * discards it). graph_launch replays one on the session's stream; *stale is set instead when the graph
     * refers to session memory that has since moved (the caller destroys it and captures again). */
    cinfer_status (*graph_begin)(backend *b);
    void *(*graph_end)(backend *b, bool keep);
    cinfer_status (*graph_launch)(backend *b, void *exec, bool *stale);
    void (*graph_destroy)(backend *b, void *exec);
    /* Optional (device backends): session option "timeline". timeline_enable times every later run with events
     * around each copy and each stretch of compute; timeline_read waits for the last run's events and writes up to
     * `capacity` spans (*count: the run's number of spans). See cinfer_session_timeline. */
    cinfer_status (*timeline_enable)(backend *b);
    cinfer_status (*timeline_read)(backend *b, cinfer_span *spans, size_t capacity, size_t *count);
    /* Optional: copies made by the last run (begin_run resets them). */
    void (*last_run_stats)(const backend *b, cinfer_run_stats *out);
    bool host_memory; /* buffers are plain host pointers (the runtime may read them directly) */
};

struct backend {
    const struct backend_i *iface;
    void *context;
};

/* The CPU backend (always available); threads <= 0 means all cores. */
cinfer_status backend_cpu_create(int threads, backend **out);
/* Runs `n` with the CPU kernels on host tensors: also used for constant folding and host shape nodes. */
cinfer_status backend_cpu_run_node(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);
bool backend_cpu_has_op(const char *op_type);

#endif
