/* The instance scheduler of one model version: its request queue, the instances that pull batches from it, and
 * the completion order (preserve_ordering).
 *
 * Design: instances pull. A worker whose instance is free calls scheduler_next, which forms a batch right then
 * (batcher_form) and hands it over, so a batch always goes to an instance with nothing in flight, and a slow
 * instance, which comes back less often, naturally takes fewer batches. When several instances are parked, an
 * arriving request wakes the least-loaded one (fewest batches in flight, then the one idle longest), and only one
 * at a time: a worker that leaves requests behind wakes the next, so requests never wait while an instance idles,
 * and there is no thundering herd. A parked instance that saw a batch still short of its size waits on a timer
 * for the oldest request's max_queue_delay (arrivals wake it early only when they may complete a batch).
 *
 * Lanes: a model instance may run several batches at once, one per lane (model_version.h: a GPU instance has two
 * by default, each with its own session, stream and buffers, so one lane gathers and uploads batch k+1 while the
 * other computes batch k). The scheduler's entries are lanes; each belongs to a group (its instance), and
 * "least-loaded" compares the groups' batches in flight, so an idle GPU is preferred over a GPU with a lane busy.
 *
 * Locking: one mutex per model guards the queue and the instances' parking state. Pushing (HTTP thread) holds it
 * for a few pointer updates, then posts the chosen worker's semaphore after unlocking; it never waits for a worker.
 * Completions with preserve_ordering go through a second, small lock that orders the `done` calls by arrival. */
#ifndef SERVE_SCHEDULER_H
#define SERVE_SCHEDULER_H

#include <pthread.h>
#include <semaphore.h>
#include <stddef.h>
#include <stdint.h>

#include "batcher.h"
#include "config_model.h"
#include "model_queue.h"
#include "serve_error.h"

/* Config parameter choosing the HTTP status of "queue full": "503" (default, as Triton) or "429". */
#define SCHEDULER_PARAM_QUEUE_FULL_STATUS "cinfer_queue_full_status"

typedef struct scheduler_instance {
    sem_t wake;                /* posted (after the lock is released) to wake it when parked */
    int parked;                /* waiting in scheduler_next */
    int signaled;              /* woken for new work and not yet looked at it */
    int timed;                 /* parked with a timer (a batch short of its size is waiting for its delay) */
    uint64_t parked_since;
    int slots;                 /* batches it may have in flight (1: it runs one batch at a time) */
    int in_flight;
    size_t group;              /* the instance this lane belongs to (index into scheduler.group_load) */
    int gpu;                   /* a GPU lane: pads batches to the buckets (batcher_form_capped) */
    int64_t cap;               /* most inferences per batch for this instance; 0 = the policy's max (lowered after OOM) */
} scheduler_instance;

typedef struct scheduler {
    pthread_mutex_t lock;
    model_queue queue;
    batcher_policy policy;
    scheduler_instance *inst;  /* one per lane */
    size_t num_instances;      /* lanes */
    int *group_load;           /* per instance: batches its lanes have in flight */
    size_t num_groups;
    int64_t wake_threshold;    /* queued inferences from which an arrival may complete a batch early */
    const char *model_name;    /* owned by the model version */
    /* completion order (preserve_ordering) */
    int preserve_ordering;
    pthread_mutex_t order_lock;
    model_request *finished;   /* completed, waiting for earlier arrivals; sorted by seq */
    uint64_t next_release;
    int releasing;
    int initialised;
} scheduler;

/* Sets up the queue (policy from dynamic_batching and SCHEDULER_PARAM_QUEUE_FULL_STATUS), the batcher policy and
 * num_lanes parked-lane states; lane i belongs to instance lane_group[i] (NULL: each lane its own instance).
 * Errors name the model and parameter. */
int scheduler_init(scheduler *s, const model_config *cfg, size_t num_lanes, const size_t *lane_group,
                   const char *model_name, serve_error *e);
/* Lane i runs on a GPU (it pads its batches to the buckets); set before the workers start. */
void scheduler_set_gpu(scheduler *s, size_t i, int gpu);
/* Frees what scheduler_init made; the queue must be empty (after close and the workers' exit). */
void scheduler_destroy(scheduler *s);

/* Queues r and wakes a parked instance when it may have work (the wake-up is signalled after the lock is released,
 * so r may be completed before this returns: the caller keeps the scheduler alive until then, not r).
 * Fails like model_queue_push (503 / 429 / 400). */
int scheduler_submit(scheduler *s, model_request *r, serve_error *e);

/* Blocks until instance `i` has work: a batch in b->reqs (b->n > 0) and/or requests past their deadline in
 * b->expired, which the caller answers. Returns 1 with work, 0 once the queue is closed and empty. The instance
 * counts the batch in flight until scheduler_batch_done. */
int scheduler_next(scheduler *s, size_t i, batcher_batch *b);
/* Instance `i` finished the batch it took with scheduler_next. */
void scheduler_batch_done(scheduler *s, size_t i);
/* Completes r (its outputs or error are set): calls r->done now, or with preserve_ordering once every request
 * that arrived before it has completed. Every request scheduler_submit accepted must be completed once. */
void scheduler_complete(scheduler *s, model_request *r);

/* Sets instance `i`'s batch cap (0 = the policy's max): the batches it takes from then on hold at most `cap`
 * inferences (batcher_form_capped). Called by the worker after an out-of-memory error and as the cap recovers. */
void scheduler_set_cap(scheduler *s, size_t i, int64_t cap);

/* Refuses new requests and wakes every parked instance; queued requests are still handed out (no delay wait). */
void scheduler_close(scheduler *s);
/* Requests queued now (not running). */
size_t scheduler_queued(scheduler *s);

#endif
