/* What a lane's worker does: take a batch from the scheduler when the lane is free, drop expired and cancelled
 * requests, gather, run once, scatter, record statistics, complete; the out-of-memory path: split the batch in
 * halves down to single requests, log the allocator state once per event, lower the instance's batch cap and raise
 * it again after successes; and failure isolation: a batch of several requests the engine refuses as invalid data
 * (one request's index out of range, say) runs again one request at a time, so only the culprit fails.
 * Lock discipline: model_version_internal.h. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "faults.h"
#include "log.h"
#include "model_version_internal.h"

static void fail_request(model_version *mv, model_request *r, stats_fail_reason why) {
    r->end_ns = stats_now_ns();
    stats_record_failure(&mv->stats, why, r->end_ns - r->arrival_ns);
    atomic_fetch_sub(&mv->stats.pending, 1);
    scheduler_complete(&mv->sched, r);
}

/* Triton's answer to a request whose queue timeout passed before it could run: 503, never executed. */
static void expire_request(model_version *mv, model_request *r, uint64_t now) {
    serve_fail(&r->error, SERVE_UNAVAILABLE, "request timeout expired: the request to model '%s' waited %" PRIu64
                                             " us in the queue", mv->name, (now - r->arrival_ns) / 1000);
    fail_request(mv, r, STATS_REJECTED);
}

static void fail_batch(model_version *mv, batcher_batch *b, const serve_error *e, stats_fail_reason why) {
    for (size_t i = 0; i < b->n; i++) {
        model_request_free_outputs(b->reqs[i]);
        b->reqs[i]->error = *e;
        fail_request(mv, b->reqs[i], why);
    }
    b->n = 0;
}

/* After an execution ran out of memory (once per event: the first failure of a batch from the queue): logs the
 * allocator state of the instance's device and returns its cached blocks to the driver. */
static void oom_report(model_instance *inst, const batcher_batch *b, const char *detail) {
    model_version *mv = inst->owner;
    int dev = instance_gpu(inst);
    char alloc[512] = "host memory (no device allocator)";
    cinfer_memory_stats ms;
    if (dev >= 0 && cinfer_cuda_memory_stats(dev, &ms) == CINFER_OK)
        snprintf(alloc, sizeof alloc, "allocator on %s: allocated %zu B, reserved %zu B, peak reserved %zu B, limit %zu B, "
                 "active blocks %zu, inactive split %zu B, device mallocs %zu, alloc retries %zu, OOMs %zu", inst->device,
                 ms.allocated_bytes, ms.reserved_bytes, ms.peak_reserved_bytes, ms.limit_bytes, ms.active_blocks,
                 ms.inactive_split_bytes, ms.num_device_mallocs, ms.num_alloc_retries, ms.num_ooms);
    if (dev >= 0) cinfer_cuda_empty_cache(dev);
    log_warn("model '%s' version %s instance %s (%s) ran out of memory on a batch of %" PRId64 " inferences (%zu requests): "
             "%s; %s; cached blocks freed, retrying in halves", mv->name, mv->version_str, inst->name, inst->device,
             b->total, b->n, detail, alloc);
}

/* Sets the instance's batch cap (0 = none) and tells the scheduler (for each of its lanes). Caller holds cap_lock. */
void model_instance_set_cap_locked(model_instance *inst, int64_t cap) {
    model_version *mv = inst->owner;
    if (cap >= mv->sched.policy.max_batch) cap = 0;
    atomic_store(&inst->batch_cap, cap);
    inst->cap_successes = 0;
    for (size_t l = 0; l < inst->num_lanes; l++) scheduler_set_cap(&mv->sched, inst->lanes[l].sched_index, cap);
}

/* A successful execution: raises a lowered cap one step every oom_recover_after successes. */
static void cap_success(model_instance *inst) {
    model_version *mv = inst->owner;
    pthread_mutex_lock(&inst->cap_lock);
    int64_t cap = atomic_load(&inst->batch_cap);
    if (!cap || ++inst->cap_successes < mv->oom_recover_after) {
        pthread_mutex_unlock(&inst->cap_lock);
        return;
    }
    int64_t step = mv->sched.policy.max_batch / MODEL_OOM_RECOVER_DIVISOR;
    model_instance_set_cap_locked(inst, cap + (step > 1 ? step : 1));
    pthread_mutex_unlock(&inst->cap_lock);
    log_info("model '%s' version %s instance %s: batch cap raised to %" PRId64 " after %" PRIu64 " successful executions",
             mv->name, mv->version_str, inst->name, atomic_load(&inst->batch_cap) ? atomic_load(&inst->batch_cap)
                                                                                 : mv->sched.policy.max_batch,
             mv->oom_recover_after);
}

static size_t output_bytes(const cinfer_tensor *t) {
    size_t bytes = cinfer_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++) bytes *= (size_t)t->dims[d];
    return bytes;
}

/* The engine run of one batch. A GPU lane's outputs go into page-locked buffers from the device's pinned cache,
 * sized by cinfer_session_output_info: the engine's DMA writes them directly, with no copy out of its staging buffer,
 * and a pointwise model whose inputs are page-locked too (a gathered batch) gets chunked copies. They are freed back
 * to the cache when the responses are done (model_outputs_free_data). *memory says where the outputs live: where
 * page-locked memory cannot be had (outputs of unknown or zero size, the budget for them spent, the cache refusing)
 * the run allocates ordinary outputs. */
static cinfer_status run_session(model_lane *lane, size_t ni, cinfer_tensor *outs, size_t no, model_output_memory *memory) {
    *memory = MODEL_OUTPUTS_MALLOCED;
    const int device = lane->output_device;
    if (device < 0 || cinfer_session_output_info(lane->session, lane->inputs, ni, outs, no) != CINFER_OK)
        return cinfer_session_run(lane->session, lane->inputs, ni, outs, no);
    size_t total = 0, k = 0;
    for (size_t j = 0; j < no && total != SIZE_MAX; j++)
        total = output_bytes(&outs[j]) ? total + output_bytes(&outs[j]) : SIZE_MAX; /* a zero-size output: run plain */
    model_output_memory pinned = {device, total};
    const bool taken = total != SIZE_MAX && model_pinned_outputs_take(total);
    for (; taken && k < no; k++)
        if (cinfer_cuda_host_alloc(device, output_bytes(&outs[k]), &outs[k].data) != CINFER_OK) break;
    cinfer_status st = taken && k == no ? cinfer_session_run_into(lane->session, lane->inputs, ni, outs, no) : CINFER_ERR_UNSUPPORTED;
    if (st == CINFER_OK) {
        *memory = pinned;
        return CINFER_OK;
    }
    if (taken) model_outputs_free_data(outs, k, pinned);
    memset(outs, 0, no * sizeof *outs);
    return taken && k == no ? st : cinfer_session_run(lane->session, lane->inputs, ni, outs, no);
}

/* What became of an execution (execute). Only EXEC_ANSWERED completed the batch's requests; after the others none
 * of them was completed or failed, and the caller runs them again in smaller pieces. */
typedef enum exec_outcome {
    EXEC_ANSWERED,      /* every request completed: with its outputs, or failed with the execution's error */
    EXEC_OUT_OF_MEMORY, /* the engine ran out of memory: retry in halves (execute_split) */
    EXEC_BAD_DATA,      /* a batch of several requests that the engine refused as invalid data (an index out of range,
                         * a value it cannot take): some request(s) in it are at fault, rerun each alone */
} exec_outcome;

/* Runs batch b once on this instance: gathers the inputs (concatenated, padded), runs the session (unless a test
 * fault says otherwise, faults.h), scatters the outputs, records statistics (one execution of the batch's
 * inferences; per request its queue time and the batch's compute phases) and completes the requests.
 * EXEC_OUT_OF_MEMORY and EXEC_BAD_DATA (b->n > 1 only) leave every request as it was, the engine's message in
 * detail. An injected fault (faults.h) is never EXEC_BAD_DATA: it stands for a failure of the execution itself. */
static exec_outcome execute(model_lane *lane, batcher_batch *b, int64_t *ok_total, char *detail, size_t detail_len) {
    model_instance *inst = lane->inst;
    model_version *mv = inst->owner;
    uint64_t start = stats_now_ns();
    for (size_t i = 0; i < b->n; i++) b->reqs[i]->start_ns = start;
    serve_error e = {0};
    size_t ni = mv->cfg.num_inputs, no = cinfer_model_num_outputs(mv->model);
    if (atomic_load(&inst->device_failed)) {
        model_version_unavailable(mv, &e);
        fail_batch(mv, b, &e, STATS_BACKEND);
        return EXEC_ANSWERED;
    }
    b->rows = batcher_bucket(&mv->sched.policy, b->total, instance_gpu(inst) >= 0, atomic_load(&inst->batch_cap));
    if (batcher_gather(&mv->sched.policy, b, &lane->scratch, lane->inputs, &e) != 0) {
        fail_batch(mv, b, &e, STATS_OTHER);
        return EXEC_ANSWERED;
    }
    cinfer_tensor *outs = calloc(no ? no : 1, sizeof *outs);
    if (!outs) {
        serve_fail(&e, SERVE_INTERNAL, "model '%s': out of memory for the outputs", mv->name);
        fail_batch(mv, b, &e, STATS_OTHER);
        return EXEC_ANSWERED;
    }
    uint64_t input_end = stats_now_ns();
    char fault[512] = "";
    int injected_device_failure = 0;
    cinfer_status st = faults_check_run(mv->name, b->total, b->reqs, b->n, fault, sizeof fault, &injected_device_failure);
    model_output_memory memory = MODEL_OUTPUTS_MALLOCED;
    if (st == CINFER_OK) st = run_session(lane, ni, outs, no, &memory);
    if (inst->test_delay_ms) {
        struct timespec ts = {(time_t)(inst->test_delay_ms / 1000), (long)(inst->test_delay_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0) {}
    }
    uint64_t infer_end = stats_now_ns();
    if (st != CINFER_OK) {
        const char *why = fault[0] ? fault : cinfer_last_error();
        for (size_t j = 0; j < no; j++) cinfer_tensor_free_data(&outs[j]); /* run_session's are malloc'd or NULL */
        free(outs);
        if (st == CINFER_ERR_OUT_OF_MEMORY || (st == CINFER_ERR_INVALID_ARGUMENT && b->n > 1 && !fault[0])) {
            snprintf(detail, detail_len, "%s", why);
            return st == CINFER_ERR_OUT_OF_MEMORY ? EXEC_OUT_OF_MEMORY : EXEC_BAD_DATA;
        }
        int code = st == CINFER_ERR_INVALID_ARGUMENT ? SERVE_BAD_REQUEST
                   : st == CINFER_ERR_UNSUPPORTED    ? SERVE_UNSUPPORTED
                                                     : SERVE_INTERNAL;
        serve_fail(&e, code, "model '%s' version %s failed to run%s: %s: %s", mv->name, mv->version_str,
                   b->n > 1 ? " a batch" : "", cinfer_status_name(st), why);
        /* a kernel failure may be a sticky CUDA error: then the device is gone and the answer is 503 */
        if (injected_device_failure && !atomic_exchange(&inst->device_failed, 1))
            log_error("model '%s' version %s instance %s: device %s has failed (injected: %s); the model is not ready and "
                      "the server reports not live until the process restarts", mv->name, mv->version_str, inst->name,
                      inst->device, fault);
        if (st == CINFER_ERR_RUNTIME &&
            (injected_device_failure || (instance_gpu(inst) >= 0 && model_version_check_devices(mv))) &&
            atomic_load(&inst->device_failed)) {
            char msg[sizeof e.msg];
            snprintf(msg, sizeof msg, "%s", e.msg);
            serve_fail(&e, SERVE_UNAVAILABLE, "model '%s' version %s is unavailable: its device %s failed (%s)", mv->name,
                       mv->version_str, inst->device, msg);
        }
        fail_batch(mv, b, &e, code == SERVE_BAD_REQUEST ? STATS_OTHER : STATS_BACKEND);
        return EXEC_ANSWERED;
    }
    if (batcher_scatter(&mv->sched.policy, b, outs, memory, mv->name, &mv->cfg, &e) != 0) { /* outs taken over */
        fail_batch(mv, b, &e, STATS_BACKEND);
        return EXEC_ANSWERED;
    }
    uint64_t end = stats_now_ns();
    uint64_t in = input_end - start, infer = infer_end - input_end, out = end - infer_end;
    int64_t inferences = config_batches(&mv->cfg) ? b->total : 1;
    stats_record_execution(&mv->stats, inferences, in, infer, out);
    atomic_fetch_add(&inst->executions, 1);
    atomic_fetch_add(&inst->inferences, (uint64_t)inferences);
    if (b->rows > b->total) atomic_fetch_add(&inst->padded_rows, (uint64_t)(b->rows - b->total));
    if (b->total > *ok_total) *ok_total = b->total;
    for (size_t i = 0; i < b->n; i++) {
        model_request *r = b->reqs[i];
        r->input_end_ns = input_end;
        r->infer_end_ns = infer_end;
        r->end_ns = end;
        stats_record_success(&mv->stats, start - r->arrival_ns, in, infer, out, end - r->arrival_ns);
        atomic_fetch_sub(&mv->stats.pending, 1);
        scheduler_complete(&mv->sched, r);
    }
    b->n = 0;
    cap_success(inst);
    return EXEC_ANSWERED;
}

static void execute_split(model_lane *lane, batcher_batch *b, int *reported, int64_t *ok_total);

/* A batch of several requests that the engine refused as invalid data: runs each request alone, in the batch's
 * order, so the request at fault fails with its own message and the others get their results. A request alone is
 * never isolated again (execute gives EXEC_BAD_DATA only for several), so this cannot loop: a refused batch of n
 * costs at most n more executions, each request run alone once (an out-of-memory failure alone still gets its
 * 503 through execute_split). Logged once per batch; counted per instance and model (isolation_retries). */
static void execute_isolated(model_lane *lane, batcher_batch *b, const char *detail, int *reported, int64_t *ok_total) {
    model_instance *inst = lane->inst;
    model_version *mv = inst->owner;
    atomic_fetch_add(&mv->isolation_retries, 1);
    atomic_fetch_add(&inst->isolation_retries, 1);
    log_warn("model '%s' version %s instance %s: the engine refused a batch of %zu requests (%" PRId64 " inferences) as "
             "invalid data (%s); running each request alone so only the one at fault fails", mv->name, mv->version_str,
             inst->name, b->n, b->total, detail);
    for (size_t i = 0; i < b->n; i++) {
        batcher_batch alone = {.reqs = &b->reqs[i], .n = 1, .cap = 1, .total = b->reqs[i]->batch_size};
        execute_split(lane, &alone, reported, ok_total);
    }
    b->n = 0;
}

/* Runs b, and when it runs out of memory splits it into halves and runs each the same way, down to single
 * requests; a single request that still does not fit gets a 503 naming the model. A batch refused as invalid data
 * runs request by request (execute_isolated). *reported: the event's allocator state was logged. *ok_total: the
 * largest batch that succeeded. */
static void execute_split(model_lane *lane, batcher_batch *b, int *reported, int64_t *ok_total) {
    model_instance *inst = lane->inst;
    model_version *mv = inst->owner;
    char detail[1024] = "";
    exec_outcome outcome = execute(lane, b, ok_total, detail, sizeof detail);
    if (outcome == EXEC_BAD_DATA) {
        execute_isolated(lane, b, detail, reported, ok_total);
        return;
    }
    if (outcome != EXEC_OUT_OF_MEMORY) return;
    atomic_fetch_add(&mv->oom_retries, 1);
    atomic_fetch_add(&inst->oom_events, 1);
    if (!*reported) {
        oom_report(inst, b, detail);
        *reported = 1;
    }
    if (b->n == 1) {
        serve_error e = {0};
        serve_fail(&e, SERVE_UNAVAILABLE, "model '%s' version %s ran out of memory on instance %s (%s) running a request "
                                          "of batch size %" PRId64 ", even alone: %s", mv->name, mv->version_str,
                   inst->name, inst->device, b->total, detail);
        fail_batch(mv, b, &e, STATS_BACKEND);
        return;
    }
    batcher_batch half[2] = {{.reqs = b->reqs, .n = b->n / 2}, {.reqs = b->reqs + b->n / 2, .n = b->n - b->n / 2}};
    for (int h = 0; h < 2; h++) {
        half[h].cap = half[h].n;
        for (size_t i = 0; i < half[h].n; i++) half[h].total += half[h].reqs[i]->batch_size;
        execute_split(lane, &half[h], reported, ok_total);
    }
    b->n = 0;
}

/* Runs one batch taken from the queue on this instance: drops requests whose client left or whose deadline
 * passed, then runs the rest (execute_split). After an out-of-memory event the instance's batch cap drops to the
 * largest batch that succeeded (else half the failed one), so the batcher forms smaller batches for it. */
static void run_batch(model_lane *lane, batcher_batch *b) {
    model_instance *inst = lane->inst;
    model_version *mv = inst->owner;
    uint64_t now = stats_now_ns();
    size_t k = 0;
    b->total = 0;
    for (size_t i = 0; i < b->n; i++) {
        model_request *r = b->reqs[i];
        if (r->cancelled && r->cancelled(r)) {
            serve_fail(&r->error, SERVE_BAD_REQUEST, "request to model '%s' was cancelled: the client disconnected", mv->name);
            fail_request(mv, r, STATS_CANCELED);
        } else if (r->deadline_ns && now > r->deadline_ns) {
            expire_request(mv, r, now);
        } else {
            b->reqs[k++] = r;
            b->total += r->batch_size;
        }
    }
    b->n = k;
    if (!b->n) return;
    int reported = 0;
    int64_t ok_total = 0, failed_total = b->total;
    execute_split(lane, b, &reported, &ok_total);
    if (!reported) return;
    int64_t cap = ok_total > 0 ? ok_total : (failed_total / 2 > 1 ? failed_total / 2 : 1);
    pthread_mutex_lock(&inst->cap_lock); /* another lane may be moving the cap too: the lower wins */
    int64_t old = atomic_load(&inst->batch_cap);
    if (old && old < cap) cap = old;
    model_instance_set_cap_locked(inst, cap);
    pthread_mutex_unlock(&inst->cap_lock);
    log_warn("model '%s' version %s instance %s: batch cap lowered to %" PRId64 " after running out of memory on a batch "
             "of %" PRId64 "; it rises by max(1, %" PRId64 "/%d) after every %" PRIu64 " successful executions", mv->name,
             mv->version_str, inst->name, cap, failed_total, mv->sched.policy.max_batch, MODEL_OOM_RECOVER_DIVISOR,
             mv->oom_recover_after);
}

/* A lane's worker: pulls a batch whenever the lane is free, until the queue is closed and empty. */
void *model_lane_worker(void *arg) {
    model_lane *lane = arg;
    model_instance *inst = lane->inst;
    model_version *mv = inst->owner;
    while (scheduler_next(&mv->sched, lane->sched_index, &lane->batch)) {
        uint64_t now = stats_now_ns();
        for (model_request *r = lane->batch.expired, *nx; r; r = nx) {
            nx = r->next; /* completing may reuse the link */
            r->next = NULL;
            expire_request(mv, r, now);
        }
        lane->batch.expired = NULL;
        atomic_fetch_add(&inst->busy, 1);
        run_batch(lane, &lane->batch);
        atomic_fetch_sub(&inst->busy, 1);
        scheduler_batch_done(&mv->sched, lane->sched_index);
    }
    return NULL;
}
