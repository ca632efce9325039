/* The unit of scheduling (model_request) and the per-model priority queue it waits in.
 *
 * A request carries everything the batcher needs to decide without looking at HTTP: its bound inputs (names,
 * dtypes, shapes, data), its batch size (first dim when the model batches, else 1), arrival time, priority
 * level, deadline, a cancellation probe and a completion callback. The queue keeps one FIFO per priority level
 * (level 1 served first), enforces max_queue_size and sets each request's deadline from the queue policy.
 * The queue itself takes no lock: its owner (scheduler.c) holds one lock around every call, and the batcher
 * (batcher.c) walks and unlinks requests under that lock when an instance is free to run a batch.
 *
 * Invariants the scheduling code keeps (kserve_routes.c relies on them):
 *  - `done` is called exactly once for every request that model_queue_push accepted, from a worker thread,
 *    never from the thread that pushed it; the submitter's model reference is dropped no later than in `done`.
 *  - nothing here ever waits on an HTTP thread: pushing takes the scheduler lock for a few pointer updates only.
 *  - a request whose deadline passed is never executed, and a cancelled one is dropped before it runs. */
#ifndef SERVE_MODEL_QUEUE_H
#define SERVE_MODEL_QUEUE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cinfer/cinfer.h"
#include "serve_error.h"

typedef struct model_request model_request;
typedef struct model_batch_outputs model_batch_outputs;

/* Where engine output data lives: malloc'd (device -1), or page-locked memory of GPU `device` of which `bytes` are
 * counted against the budget for page-locked outputs (model_pinned_outputs_take). */
typedef struct model_output_memory {
    int device;
    size_t bytes;
} model_output_memory;
#define MODEL_OUTPUTS_MALLOCED ((model_output_memory){-1, 0})

struct model_request {
    /* ---- set by the submitter (HTTP layer) before model_version_submit ---- */
    const cinfer_tensor *inputs; /* every model input, bound and validated; data owned by the submitter */
    size_t num_inputs;
    int64_t batch_size;          /* first dim when the model batches, else 1 */
    uint32_t priority;           /* 1 = highest; 0 = the model's default level */
    uint64_t timeout_us;         /* 0 = the model's default (none when the model sets none) */
    uint64_t arrival_ns;         /* stats_now_ns() when the request was received */
    /* Called once from a worker thread when outputs or error are set. The request must stay valid until then. */
    void (*done)(model_request *r);
    /* Optional: nonzero when the client has gone away, so the request is dropped before it runs. */
    int (*cancelled)(model_request *r);
    void *user;
    const char *id;              /* the request's "id" (NULL when none); owned by the submitter */

    /* ---- set by the queue and the worker ---- */
    uint64_t deadline_ns;        /* 0 = none */
    uint64_t seq;                /* arrival order among accepted requests (preserve_ordering) */
    uint32_t level;              /* 0-based queue level (0 = highest priority) */
    uint64_t start_ns, input_end_ns, infer_end_ns, end_ns; /* execution phases (monotonic ns) */
    serve_error error;           /* error.code != 0 on failure; outputs are then empty */
    cinfer_tensor *outputs;      /* every model output, in model order; freed by model_request_free_outputs */
    size_t num_outputs;
    int outputs_own_data;        /* 1: each output's data came from the engine (this request ran alone) */
    model_output_memory outputs_memory; /* with outputs_own_data: where that data lives */
    model_batch_outputs *batch;  /* else: outputs view into this batch's outputs (shared, counted) */
    void *output_copy;           /* outputs trimmed back from a padded batch live in this block */
    model_request *next, *prev;  /* queue links */
};

/* The outputs of one batched execution, shared by the requests whose outputs point into them. The last
 * request to release them frees them. */
struct model_batch_outputs {
    cinfer_tensor *tensors;
    size_t num;
    model_output_memory memory; /* where the data lives (model_outputs_free_data) */
    _Atomic size_t refs;
};

/* Frees the data of n engine outputs: page-locked memory goes back to its GPU's cache and its bytes to the budget,
 * the rest to cinfer_tensor_free_data. */
void model_outputs_free_data(cinfer_tensor *t, size_t n, model_output_memory memory);

/* The budget for page-locked outputs held by responses in flight, process-wide (cinfer-server
 * --pinned-output-memory): past it a GPU lane's outputs are malloc'd, so a burst of large responses cannot lock
 * down the host's memory (the GPU's pinned cache keeps what it once held). Default: an eighth of the host's memory,
 * at most 4 GiB; 0 turns page-locked outputs off. */
void model_pinned_outputs_set_budget(size_t bytes);
/* Takes `bytes` of the budget (true), or false when that would pass it; model_outputs_free_data gives them back. */
bool model_pinned_outputs_take(size_t bytes);
size_t model_pinned_outputs_held(void);

/* Releases the worker-filled outputs (keeps the rest of the request). */
void model_request_free_outputs(model_request *r);
/* Drops one reference to b; frees the engine outputs with the last. NULL is a no-op. */
void model_batch_outputs_release(model_batch_outputs *b);

typedef struct model_queue_policy {
    uint32_t levels;              /* priority levels; 0 means one */
    uint32_t default_level;       /* 1-based; 0 means the middle, as Triton */
    size_t max_size;              /* queued requests (not running ones); 0 = unbounded */
    uint64_t default_timeout_us;  /* 0 = none */
    int allow_timeout_override;   /* a request may set a timeout longer than the default */
    int full_status;              /* HTTP status when the queue is full: 503 (Triton) or 429 */
} model_queue_policy;

typedef struct model_queue {
    model_request **head, **tail; /* one FIFO per priority level */
    model_queue_policy policy;
    size_t size;                  /* requests queued */
    int64_t total_batch;          /* sum of their batch sizes */
    uint64_t next_seq;
    int closed;
} model_queue;

/* Returns 0 or -1 (out of memory). */
int model_queue_init(model_queue *q, const model_queue_policy *policy);
void model_queue_destroy(model_queue *q);

/* Appends r at its priority level, stamps its sequence number and sets its deadline. Fails with 503 (or the
 * policy's full_status) when the queue is full, 503 when closed, 400 when the priority is above the model's
 * levels. Triton's timeout rule: a request may shorten the default timeout, and lengthen it only when
 * allow_timeout_override is set. */
int model_queue_push(model_queue *q, model_request *r, const char *model_name, serve_error *e);
/* Walks the queue in service order: highest priority first, FIFO within a level. NULL at the end. */
model_request *model_queue_first(const model_queue *q);
model_request *model_queue_next(const model_queue *q, const model_request *r);
/* Removes r (which must be queued). */
void model_queue_unlink(model_queue *q, model_request *r);
/* Refuses new requests; queued ones stay to be served. */
void model_queue_close(model_queue *q);

#endif
