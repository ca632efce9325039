/* Private to the runtime: a session's plans and state, shared by session.c and chunked_copies.c. */
#ifndef CINFER_RUNTIME_SESSION_INTERNAL_H
#define CINFER_RUNTIME_SESSION_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "cinfer/cinfer.h"
#include "graph/graph.h"

#define PLAN_CACHE_SIZE 16 /* the server's batch-size buckets (powers of two up to 2^15) each keep their plan */
/* Chunked copies (plan_chunks): by default a pointwise plan is split into chunks of about CHUNK_IO_BYTES of inputs
 * and outputs each (at most PLAN_MAX_CHUNKS), when that makes two or more. On the H200 the 2048x2048 float image
 * (32 MiB of io) ran best in 8 to 12 chunks: 4 MiB chunks pay the first upload and the last download, 1 MiB ones
 * the per-chunk launches and waits (bench/BENCHMARKS.md). Chunk lengths are multiples of CHUNK_ALIGN_ELEMENTS, so
 * every chunk's buffers stay 256-byte aligned. */
#define PLAN_MAX_CHUNKS 64
#define CHUNK_IO_BYTES ((size_t)4 << 20)
#define CHUNK_ALIGN_ELEMENTS 1024

/* Data-dependent shapes (docs/engine.md "Data-dependent shapes"): a graph whose nodes include ones with
 * OP_FLAG_DATA_DEPENDENT that run on the backend is run in stages, each ending at such a node. Stage 0's plan is
 * cached by the input signature; the plan of stage k + 1 is a child of the stage-k plan, keyed by the actual output
 * shapes of the node that ended stage k; a plan keeps its last PLAN_STAGE_CHILDREN children (LRU). */
#define PLAN_STAGE_CHILDREN 8

typedef struct plan {
    unsigned char *signature; /* stage 0: the input signature; a later stage: its entry shapes (stage_key) */
    size_t signature_len;
    tensor *values;        /* per value: concrete dtype/dims; data bound per run or fixed (constants, host) */
    int64_t *offsets;      /* arena offset per value or -1 */
    void **host_owned;     /* per value: buffer owned by the plan (host-evaluated results), or NULL */
    bool *node_runs;
    void *arena;
    size_t arena_bytes;
    /* Device backends: one buffer for the model inputs, the produced model outputs and the host-known values
     * device nodes read (uploaded once, when the plan is built). */
    void *io_block;
    size_t io_bytes;
    uint64_t last_used;
    /* CUDA Graphs: the captured run of this plan's nodes (backend-owned handle), the plain runs so far, and
     * whether capture proved impossible */
    void *graph_exec;
    uint64_t device_runs;     /* plain runs that succeeded (the first warms plans and scratch) */
    int capture_failures;     /* a failure can be passing (another thread synchronising the device): three end it */
    bool graph_impossible;
    bool caller_binding_pays; /* run_device: binding the caller's buffers beats copying them (caller_binding_pays) */
    /* Chunked copies (plan_chunks): a pointwise plan's host run split into num_chunks plans over element ranges
     * of its own io buffers (chunk c starts at element chunk_first[c]), so that uploads, compute and downloads
     * of different chunks overlap. chunks_checked: whether plan_chunks has looked at this plan. */
    struct plan **chunks;
    int64_t *chunk_first;
    int num_chunks;
    bool chunks_checked;
    /* Staged runs: this plan runs nodes [stage_begin, stage_end] (the whole graph when the graph has no stages);
     * values produced before stage_begin (and, after stage 0, the model inputs) are `external`: their data is bound
     * per run from the stages before (session.run_values). */
    int stage, stage_begin, stage_end;
    struct plan *children[PLAN_STAGE_CHILDREN];
    const struct plan *parent;
    int *external;
    int num_external;
} plan;

struct cinfer_session {
    const cinfer_model *model;
    const graph *graph;      /* what runs: the model's graph, or its half-precision copy (option "precision") */
    backend *backend;
    plan *plans[PLAN_CACHE_SIZE];
    uint64_t clock;
    unsigned char *signature; /* this run's input signature, reused across runs (grown on demand) */
    size_t signature_cap;
    pthread_mutex_t lock;    /* runs on one session are serialised (plans and arenas are per session) */
    bool profile;            /* option "profile": time every node */
    bool cuda_graphs;        /* option "cuda_graphs": capture and replay each plan's nodes (device backends) */
    uint64_t graph_captures, graph_fallbacks;
    bool graph_replayed;     /* the last run replayed a graph */
    bool caller_buffers_bound; /* the last run read and wrote the caller's device buffers in place */
    size_t guard_bytes;      /* option "guard_bytes": debugging layout with checked guards around every value */
    long copy_chunks;        /* option "copy_chunks": 0 = by size, 1 = never split, N = N chunks (plan_chunks) */
    bool timeline;           /* option "timeline": the backend times each run (cinfer_session_timeline) */
    unsigned char *guard_host; /* host image of the arena for filling and checking guards */
    void *aligned_inputs;      /* copies of caller inputs not aligned to their element size (host backends) */
    size_t aligned_inputs_bytes;
    size_t guard_host_bytes;
    double *node_seconds;    /* per node, summed over runs (profile only) */
    uint64_t *node_calls;
    /* Data-dependent shapes: the nodes that end stages (in order), and per value what the current staged run has
     * produced so far (data where it lives, actual dims) */
    int num_stage_ends;
    int *stage_ends;
    tensor *run_values;
    /* CPU fallback in device sessions: cpu_fallback[i] when node i runs on the CPU kernels (the device backend has
     * none), through host_backend, its inputs copied to fallback_host and its outputs back */
    bool *cpu_fallback;
    size_t num_cpu_fallback;
    backend *host_backend;
    void *fallback_host;
    size_t fallback_host_bytes;
};

/* Frees a plan, its chunk plans and the backend memory it holds. */
void session_plan_free(cinfer_session *s, plan *p);
/* Plans a run for the bound input shapes (signature: its cache key, taken over). dry: shapes and offsets only
 * (capacity planning), for the whole graph with data-dependent outputs at their bounds; no memory is taken on the
 * backend. parent: NULL for stage 0, else the plan of the stage before (whose child this is; signature then holds
 * the entry shapes, see stage_key in session.c). */
cinfer_status session_build_plan(cinfer_session *s, const cinfer_tensor **bound, unsigned char *signature,
                                 size_t signature_len, bool dry, const plan *parent, plan **out);
/* Device backends: the plan's nodes, through a CUDA graph where possible (capture on the second run). */
cinfer_status session_run_device_nodes(cinfer_session *s, plan *p);

/* chunked_copies.c: the chunk plans of p go (their io is p's, so only their own memory goes); whether this run of
 * p (host caller buffers `bound` and `outputs`) goes in chunks, splitting p the first time it is asked; the run in
 * chunks, ending with a wait for all of it. */
void chunks_free(cinfer_session *s, plan *p);
bool chunks_run_here(cinfer_session *s, plan *p, const cinfer_tensor **bound, const cinfer_tensor *outputs);
cinfer_status chunks_run(cinfer_session *s, plan *p, const cinfer_tensor **bound, cinfer_tensor *outputs);

#endif
