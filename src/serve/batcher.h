/* The dynamic batcher: which queued requests run together (Triton's rule, per shape group), and the data plumbing
 * of one batched execution (inputs concatenated along dim 0, optionally padded; outputs sliced back per request).
 *
 * Formation (batcher_form) runs when an instance is free, under the scheduler's lock, never ahead of time:
 *  - Requests are taken in service order (priority level, then arrival). The first request of a group decides its
 *    shape: a request joins the group when every input has the same non-batch dims (padded dims excepted), so
 *    shapes are never mixed; other shapes form their own groups (at most BATCHER_MAX_GROUPS are looked at).
 *  - Within a group requests are added in order while the batch stays within the cap (the largest preferred batch
 *    size, else max_batch_size, as Triton). A group is ready when (1) a preferred size can be formed: the largest
 *    one is sent; else (2) the batch cannot grow (cap reached, or the next request of its shape does not fit):
 *    it is sent whole; else (3) its oldest request has waited max_queue_delay_microseconds (or the queue is
 *    closing): what there is is sent. Otherwise the instance waits until the earliest group's delay runs out.
 *  - A request whose deadline passed is unlinked into `expired` (never executed); the caller answers it.
 *
 * Padding (a model opts in through config parameters, see batcher_policy_init and docs/server.md "Scheduling"):
 * listed variable dims of listed inputs may differ inside a group; the batch takes the longest and fills the rest
 * with the configured value; listed outputs are trimmed back to each request's own length. */
#ifndef SERVE_BATCHER_H
#define SERVE_BATCHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cinfer/cinfer.h"
#include "config_model.h"
#include "model_queue.h"
#include "serve_error.h"

#define BATCHER_MAX_GROUPS 8

/* Config parameter keys of the padding opt-in. */
#define BATCHER_PARAM_PAD_INPUTS "cinfer_pad_inputs"   /* "NAME:DIM=VALUE, ..." */
#define BATCHER_PARAM_PAD_MASK "cinfer_pad_mask"       /* "NAME" (one of the padded inputs) */
#define BATCHER_PARAM_PAD_OUTPUTS "cinfer_pad_outputs" /* "NAME:DIM=INPUT:DIM, ..." */
/* Batch-size buckets: an execution of n rows runs as the smallest bucket >= n, the extra rows copies of the first
 * request's first row, their outputs dropped, so a GPU instance meets a few shapes only (one CUDA graph each).
 * "auto" (default): GPU instances pad to powers of two up to the max batch, the preferred sizes and the max batch;
 * CPU instances do not pad (padding there is only wasted work). "none", "pow2" (every instance), or a list
 * "1,2,4,16" (every instance; sizes above the max batch are ignored, the max batch is always one). */
#define BATCHER_PARAM_BUCKETS "cinfer_batch_buckets"

typedef struct batcher_pad {
    uint32_t dims;             /* bit d set: full-tensor dim d (>= 1; dim 0 is the batch) may differ and is padded */
    unsigned char value[8];    /* the pad element in the input's data type */
    size_t esz;
} batcher_pad;

typedef struct batcher_trim {
    int dim;                   /* full-tensor dim of the output trimmed back per request; 0 = not trimmed */
    size_t input;              /* the config input ... */
    int input_dim;             /* ... whose full-tensor dim gives each request's length */
} batcher_trim;

typedef struct batcher_policy {
    int dynamic;               /* 0: every request runs alone (max_batch_size 0, or no dynamic_batching block) */
    int64_t max_batch;         /* most inferences per execution: the largest preferred size, else max_batch_size */
    int64_t *preferred;        /* ascending, deduplicated */
    size_t num_preferred;
    uint64_t max_delay_ns;
    size_t num_inputs, num_outputs;
    batcher_pad *pad;          /* per config input, NULL when the model does not pad */
    batcher_trim *trim;        /* per config output, NULL when the model does not pad */
    int mask_input;            /* config input index of the mask, -1 without padding */
    int64_t *buckets;          /* ascending batch-size buckets (BATCHER_PARAM_BUCKETS), NULL for none */
    size_t num_buckets;
    int buckets_gpu_only;      /* "auto": only GPU instances pad */
} batcher_policy;

/* The rows an execution of `total` rows runs on an instance (a GPU one when gpu is set), at most `cap` (0 = no cap):
 * the smallest bucket >= total, else total. */
int64_t batcher_bucket(const batcher_policy *p, int64_t total, int gpu, int64_t cap);

/* Builds the policy from a completed config. Reads the padding parameters (BATCHER_PARAM_*) and checks them
 * against the config: inputs and outputs exist, each padded dim is a variable (-1) dim, pad values fit the data
 * type, the mask is one of the padded inputs, the model batches with dynamic_batching. Returns 0, or -1 with a
 * message naming the parameter, tensor and what was expected in e (400; 500 when out of memory). */
int batcher_policy_init(batcher_policy *p, const model_config *cfg, serve_error *e);
void batcher_policy_free(batcher_policy *p);

/* One formed batch. `reqs` has room for max(1, max_batch) requests (batcher_batch_init). */
typedef struct batcher_batch {
    model_request **reqs;
    size_t n, cap;
    int64_t total;             /* sum of the requests' batch sizes */
    int64_t rows;              /* rows the execution runs (batcher_bucket), set before batcher_gather; 0 = total */
    model_request *expired;    /* requests found past their deadline, linked through `next` */
} batcher_batch;

int batcher_batch_init(batcher_batch *b, const batcher_policy *p);
void batcher_batch_free(batcher_batch *b);

typedef enum batcher_decision { BATCHER_EMPTY, BATCHER_WAIT, BATCHER_READY } batcher_decision;

/* Looks at the queue at time `now` (the caller holds the queue's lock). READY: b->reqs holds the batch, removed
 * from the queue. WAIT: nothing is ready; look again at *wake_ns or when a request arrives. EMPTY: the queue has
 * nothing to run. In every case b->expired lists the requests removed because their deadline passed. */
batcher_decision batcher_form(const batcher_policy *p, model_queue *q, uint64_t now, batcher_batch *b, uint64_t *wake_ns);
/* batcher_form for one instance: `cap` > 0 and below p->max_batch lowers its batch to at most `cap` inferences
 * (except that a single request larger than it is still sent alone; set after an out-of-memory error lowered that
 * instance's batch cap, model_version.c); `gpu` says whether it pads to the buckets (batcher_bucket). A padding
 * instance does not pad over queued work: when the batch it would take (delay over, or full) is short of its
 * bucket by more than a quarter of the bucket and a prefix of at least BATCHER_SPLIT_MIN inferences fills a bucket
 * exactly, it takes that prefix and leaves the rest queued for the next free lane (72 queued: 64 now and 8 next,
 * not 128 rows of which 56 are padding). Smaller batches pad: their run time is mostly fixed cost. */
#define BATCHER_SPLIT_MIN 16
batcher_decision batcher_form_capped(const batcher_policy *p, model_queue *q, uint64_t now, int64_t cap, int gpu,
                                     batcher_batch *b, uint64_t *wake_ns);

/* 1 when a and b may run in one batch (same non-batch dims except padded ones). */
int batcher_compatible(const batcher_policy *p, const model_request *a, const model_request *b);

/* Per-instance buffers for gathered inputs, reused from batch to batch. A GPU instance sets `pinned` and `device`:
 * its buffers then come from that device's page-locked cache (cinfer_cuda_host_alloc), so the engine copies the
 * batch to the GPU by DMA without staging it; a buffer it cannot get pinned is ordinary memory. */
typedef struct batcher_scratch {
    void **buf;
    size_t *cap;
    bool *is_pinned; /* per buffer: from cinfer_cuda_host_alloc */
    size_t n;
    bool pinned;
    int device;
    struct copy_pool *pool; /* helpers splitting the gather's copies (copy_pool.h; owned by the lane), or NULL */
    struct copy_job *jobs;  /* the gather's copies, reused */
    size_t jobs_cap;
} batcher_scratch;

void batcher_scratch_free(batcher_scratch *s);

/* Fills `in` (num_inputs tensors) with the batch's inputs. One request: its own tensors (no copy), except that a
 * pinned scratch (a GPU lane) takes a copy of inputs of COPY_POOL_MIN_BYTES or more, so the engine uploads them by DMA
 * without staging them. Several:
 * concatenated along dim 0 into scratch buffers (the plain copies split over s->pool's helpers), padded dims filled
 * up to the batch's longest with the pad value. Errors (out of memory) are 500. */
int batcher_gather(const batcher_policy *p, const batcher_batch *b, batcher_scratch *s, cinfer_tensor *in, serve_error *e);

/* Hands the execution's outputs (`outs`, num_outputs tensors in a calloc'ed array) to the batch's requests and
 * takes ownership of them in every case. One request: the array becomes its outputs. Several: each request's
 * outputs view its rows of the shared outputs (trimmed outputs are copied). `memory` says where the outputs' data
 * lives (model_outputs_free_data frees it accordingly). Errors name the model and output. */
int batcher_scatter(const batcher_policy *p, const batcher_batch *b, cinfer_tensor *outs, model_output_memory memory,
                    const char *model_name, const model_config *cfg, serve_error *e);

#endif
