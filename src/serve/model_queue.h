/* The unit of scheduling (model_request) and the per-model queue it waits in.
 *
 * Design for the dynamic batcher (next step): a request carries everything a batcher needs to decide
 * without looking at HTTP: its bound inputs (names, dtypes, shapes, data), its batch size (first dim when the
 * model batches, else 1), arrival time, priority level, deadline, a cancellation probe and a completion
 * callback. The queue keeps one FIFO per priority level (level 1 served first) and enforces max_queue_size.
 * Today an instance worker pops one request and runs it alone (model_queue_pop); a batcher replaces that call
 * with one that takes several compatible requests (same non-batch shapes) up to max_batch_size / preferred
 * sizes / max delay, concatenates their inputs, runs once, and scatters the outputs back into each request's
 * `outputs` before calling `done` on each. Nothing outside model_queue.c and model_version.c changes. */
#ifndef SERVE_MODEL_QUEUE_H
#define SERVE_MODEL_QUEUE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "cinfer/cinfer.h"
#include "serve_error.h"

typedef struct model_request model_request;

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

    /* ---- set by the queue and the worker ---- */
    uint64_t deadline_ns;        /* 0 = none */
    uint64_t start_ns, input_end_ns, infer_end_ns, end_ns; /* execution phases (monotonic ns) */
    serve_error error;           /* error.code != 0 on failure; outputs are then empty */
    cinfer_tensor *outputs;      /* every model output, in model order; freed by model_request_free_outputs */
    size_t num_outputs;
    model_request *next;         /* queue link */
};

/* Releases the worker-filled outputs (keeps the rest of the request). */
void model_request_free_outputs(model_request *r);

typedef struct model_queue {
    pthread_mutex_t lock;
    pthread_cond_t ready;
    model_request **head, **tail; /* one FIFO per priority level */
    uint32_t levels;              /* >= 1 */
    uint32_t default_level;       /* 1-based */
    size_t size, max_size;        /* max_size 0 = unbounded */
    uint64_t default_timeout_us;
    int allow_timeout_override;
    int closed;
} model_queue;

/* levels: priority levels (0 means one); default_level 1-based (0 means the middle, as Triton); max_size 0 =
 * unbounded; default_timeout_us 0 = none. Returns 0 or -1 (out of memory). */
int model_queue_init(model_queue *q, uint32_t levels, uint32_t default_level, size_t max_size,
                     uint64_t default_timeout_us, int allow_timeout_override);
void model_queue_destroy(model_queue *q);

/* Appends r at its priority level and sets its deadline. Fails with 503 when the queue is full or closed,
 * 400 when the priority is above the model's levels. */
int model_queue_push(model_queue *q, model_request *r, const char *model_name, serve_error *e);
/* Blocks until a request is available and removes the oldest of the highest priority; NULL once the queue is
 * closed and empty (the worker's signal to exit). */
model_request *model_queue_pop(model_queue *q);
/* Refuses new requests; queued ones are still handed out by model_queue_pop. */
void model_queue_close(model_queue *q);
size_t model_queue_size(model_queue *q);

#endif
