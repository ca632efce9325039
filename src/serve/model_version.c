/* A loaded model version: load + config completion, instances (placed from instance_group; each with one or more
 * lanes: a session and a worker thread each), warm-up, the worker loop (take a batch from the scheduler when free, drop expired and
 * cancelled requests, gather, run once, scatter, record statistics, complete), and the drain-then-free retirement
 * used by unload, reload and shutdown. */
#include "model_version.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "copy_pool.h"
#include "faults.h"
#include "log.h"

void model_version_ref(model_version *mv) { atomic_fetch_add(&mv->refs, 1); }

void model_version_unref(model_version *mv) {
    if (!mv) return;
    if (atomic_fetch_sub(&mv->refs, 1) == 1) {
        pthread_mutex_lock(&mv->ref_lock);
        pthread_cond_broadcast(&mv->ref_zero);
        pthread_mutex_unlock(&mv->ref_lock);
    }
}

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

/* The CUDA device index of a GPU instance ("cuda:N"), -1 for a CPU instance. */
static int instance_gpu(const model_instance *inst) {
    return inst->kind == CONFIG_KIND_GPU && !strncmp(inst->device, "cuda:", 5) ? atoi(inst->device + 5) : -1;
}

int model_version_check_devices(model_version *mv) {
    int failed = 0;
    for (size_t i = 0; i < mv->num_instances; i++) {
        model_instance *inst = &mv->instances[i];
        int dev = instance_gpu(inst);
        if (dev < 0) { /* never asked; marked only by the test fault device_fail (faults.h) */
            failed += atomic_load(&inst->device_failed);
            continue;
        }
        cinfer_device_info info;
        if (!atomic_load(&inst->device_failed) && cinfer_cuda_device_info(dev, &info) == CINFER_OK && info.failed) {
            atomic_store(&inst->device_failed, 1);
            log_error("model '%s' version %s instance %s: device %s has failed (sticky CUDA error); the model is not "
                      "ready and the server reports not live until the process restarts", mv->name, mv->version_str,
                      inst->name, inst->device);
        }
        failed += atomic_load(&inst->device_failed);
    }
    return failed;
}

int model_version_unavailable(const model_version *mv, serve_error *e) {
    for (size_t i = 0; i < mv->num_instances; i++)
        if (atomic_load(&mv->instances[i].device_failed)) {
            serve_fail(e, SERVE_UNAVAILABLE, "model '%s' version %s is unavailable: its device %s failed with %s and "
                                             "refuses work until the server restarts", mv->name, mv->version_str,
                       mv->instances[i].device, instance_gpu(&mv->instances[i]) >= 0
                                                    ? "a sticky CUDA error"
                                                    : "an injected device failure (" FAULTS_ENV " device_fail)");
            return 1;
        }
    return 0;
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
static void set_cap_locked(model_instance *inst, int64_t cap) {
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
    set_cap_locked(inst, cap + (step > 1 ? step : 1));
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

/* Runs batch b once on this instance: gathers the inputs (concatenated, padded), runs the session (unless a test
 * fault says otherwise, faults.h), scatters the outputs, records statistics (one execution of the batch's
 * inferences; per request its queue time and the batch's compute phases) and completes the requests.
 * Returns CINFER_OK (completed), CINFER_ERR_OUT_OF_MEMORY (nothing completed or failed: the caller retries; the
 * engine's message in detail) or the failure status (the requests were failed). */
static cinfer_status execute(model_lane *lane, batcher_batch *b, int64_t *ok_total, char *detail, size_t detail_len) {
    model_instance *inst = lane->inst;
    model_version *mv = inst->owner;
    uint64_t start = stats_now_ns();
    for (size_t i = 0; i < b->n; i++) b->reqs[i]->start_ns = start;
    serve_error e = {0};
    size_t ni = mv->cfg.num_inputs, no = cinfer_model_num_outputs(mv->model);
    if (atomic_load(&inst->device_failed)) {
        model_version_unavailable(mv, &e);
        fail_batch(mv, b, &e, STATS_BACKEND);
        return CINFER_ERR_RUNTIME;
    }
    b->rows = batcher_bucket(&mv->sched.policy, b->total, instance_gpu(inst) >= 0, atomic_load(&inst->batch_cap));
    if (batcher_gather(&mv->sched.policy, b, &lane->scratch, lane->inputs, &e) != 0) {
        fail_batch(mv, b, &e, STATS_OTHER);
        return CINFER_ERR_RUNTIME;
    }
    cinfer_tensor *outs = calloc(no ? no : 1, sizeof *outs);
    if (!outs) {
        serve_fail(&e, SERVE_INTERNAL, "model '%s': out of memory for the outputs", mv->name);
        fail_batch(mv, b, &e, STATS_OTHER);
        return CINFER_ERR_RUNTIME;
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
        if (st == CINFER_ERR_OUT_OF_MEMORY) {
            snprintf(detail, detail_len, "%s", why);
            return st;
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
        return st;
    }
    if (batcher_scatter(&mv->sched.policy, b, outs, memory, mv->name, &mv->cfg, &e) != 0) { /* outs taken over */
        fail_batch(mv, b, &e, STATS_BACKEND);
        return CINFER_ERR_RUNTIME;
    }
    uint64_t end = stats_now_ns();
    uint64_t in = input_end - start, infer = infer_end - input_end, out = end - infer_end;
    int64_t inferences = mv->cfg.max_batch_size > 0 ? b->total : 1;
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
    return CINFER_OK;
}

/* Runs b, and when it runs out of memory splits it into halves and runs each the same way, down to single
 * requests; a single request that still does not fit gets a 503 naming the model. *reported: the event's
 * allocator state was logged. *ok_total: the largest batch that succeeded. */
static void execute_split(model_lane *lane, batcher_batch *b, int *reported, int64_t *ok_total) {
    model_instance *inst = lane->inst;
    model_version *mv = inst->owner;
    char detail[1024] = "";
    if (execute(lane, b, ok_total, detail, sizeof detail) != CINFER_ERR_OUT_OF_MEMORY) return;
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
    set_cap_locked(inst, cap);
    pthread_mutex_unlock(&inst->cap_lock);
    log_warn("model '%s' version %s instance %s: batch cap lowered to %" PRId64 " after running out of memory on a batch "
             "of %" PRId64 "; it rises by max(1, %" PRId64 "/%d) after every %" PRIu64 " successful executions", mv->name,
             mv->version_str, inst->name, cap, failed_total, mv->sched.policy.max_batch, MODEL_OOM_RECOVER_DIVISOR,
             mv->oom_recover_after);
}

/* A lane's worker: pulls a batch whenever the lane is free, until the queue is closed and empty. */
static void *worker_main(void *arg) {
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

int model_version_submit(model_version *mv, model_request *r, serve_error *e) {
    atomic_fetch_add(&mv->stats.pending, 1);
    if (scheduler_submit(&mv->sched, r, e) != 0) {
        atomic_fetch_sub(&mv->stats.pending, 1);
        int full = e->code == SERVE_UNAVAILABLE || e->code == SERVE_TOO_MANY_REQUESTS;
        stats_record_failure(&mv->stats, full ? STATS_REJECTED : STATS_OTHER, stats_now_ns() - r->arrival_ns);
        return -1;
    }
    return 0;
}

json_t *model_version_stats_json(const model_version *mv) {
    json_t *j = stats_model_json(&mv->stats, mv->name, mv->version_str, mv->memory_bytes);
    json_t *a = json_array();
    for (size_t i = 0; i < mv->num_instances; i++) {
        const model_instance *inst = &mv->instances[i];
        int64_t cap = atomic_load(&inst->batch_cap);
        json_t *x = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:i, s:I, s:I, s:b}", "name", inst->name, "kind",
                              inst->kind == CONFIG_KIND_GPU ? "KIND_GPU" : "KIND_CPU", "device", inst->device,
                              "lanes", (json_int_t)inst->lanes_running,
                              "execution_count", (json_int_t)atomic_load(&inst->executions),
                              "inference_count", (json_int_t)atomic_load(&inst->inferences),
                              "padded_rows", (json_int_t)atomic_load(&inst->padded_rows),
                              "in_flight", atomic_load(&inst->busy),
                              "batch_cap", (json_int_t)(cap ? cap : mv->sched.policy.max_batch),
                              "oom_events", (json_int_t)atomic_load(&inst->oom_events),
                              "device_failed", atomic_load(&inst->device_failed));
        if (x && inst->probed_max_batch) json_object_set_new(x, "probed_max_batch", json_integer(inst->probed_max_batch));
        json_array_append_new(a, x);
    }
    if (j) json_object_set_new(j, "instance_stats", a);
    else json_decref(a);
    return j;
}

/* Fills a warm-up tensor with zeros or a fixed pseudo-random pattern. */
/* *engine: the engine's status of a failed warm-up run (CINFER_OK when it failed before running). */
static int warmup_run(model_version *mv, model_lane *lane, const config_warmup *w, serve_error *e, cinfer_status *engine) {
    *engine = CINFER_OK;
    size_t n = w->num_inputs;
    cinfer_tensor *ts = calloc(n ? n : 1, sizeof *ts);
    size_t no = cinfer_model_num_outputs(mv->model);
    cinfer_tensor *outs = calloc(no ? no : 1, sizeof *outs);
    int rc = -1;
    if (!ts || !outs) {
        serve_fail(e, SERVE_INTERNAL, "warm-up '%s': out of memory", w->name);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const config_warmup_input *in = &w->inputs[i];
        cinfer_tensor *t = &ts[i];
        t->name = in->key;
        t->dtype = in->dtype;
        size_t esz = cinfer_dtype_size(in->dtype);
        if (!esz) {
            serve_fail(e, SERVE_BAD_REQUEST, "warm-up '%s' input '%s': data type %s cannot be generated", w->name, in->key,
                       config_type_name(in->dtype));
            goto done;
        }
        if (mv->cfg.max_batch_size > 0) t->dims[t->ndim++] = w->batch_size;
        for (int d = 0; d < in->ndims && t->ndim < CINFER_MAX_DIMS; d++) t->dims[t->ndim++] = in->dims[d];
        size_t numel = 1;
        for (int d = 0; d < t->ndim; d++) numel *= (size_t)(t->dims[d] < 0 ? 1 : t->dims[d]);
        t->data = calloc(numel ? numel : 1, esz);
        if (!t->data) {
            serve_fail(e, SERVE_INTERNAL, "warm-up '%s' input '%s': out of memory", w->name, in->key);
            goto done;
        }
        if (in->random_data) {
            uint32_t x = 12345u + (uint32_t)i;
            unsigned char *b = t->data;
            for (size_t k = 0; k < numel * esz; k++) {
                x = x * 1664525u + 1013904223u;
                b[k] = (unsigned char)(x >> 24);
            }
            if (in->dtype == CINFER_DTYPE_FLOAT) /* random bytes make NaNs: use small values instead */
                for (size_t k = 0; k < numel; k++) ((float *)t->data)[k] = (float)((k * 2654435761u) % 1000) / 1000.0f;
            if (in->dtype == CINFER_DTYPE_BOOL)
                for (size_t k = 0; k < numel; k++) b[k] &= 1;
        }
    }
    for (uint32_t c = 0; c < w->count; c++) {
        cinfer_status st = cinfer_session_run(lane->session, ts, n, outs, no);
        for (size_t k = 0; k < no; k++) cinfer_tensor_free_data(&outs[k]);
        if (st != CINFER_OK) {
            *engine = st;
            serve_fail(e, SERVE_BAD_REQUEST, "warm-up '%s' failed: %s", w->name, cinfer_last_error());
            goto done;
        }
    }
    rc = 0;
done:
    for (size_t i = 0; ts && i < n; i++) free(ts[i].data);
    free(ts);
    free(outs);
    return rc;
}

static void free_version(model_version *mv) {
    for (size_t i = 0; i < mv->num_instances; i++) {
        model_instance *inst = &mv->instances[i];
        for (size_t l = 0; l < inst->num_lanes; l++) {
            model_lane *lane = &inst->lanes[l];
            cinfer_session_free(lane->session);
            batcher_batch_free(&lane->batch);
            batcher_scratch_free(&lane->scratch);
            copy_pool_destroy(lane->scratch.pool);
            free(lane->inputs);
        }
        free(inst->lanes);
        pthread_mutex_destroy(&inst->cap_lock);
    }
    free(mv->instances);
    cinfer_model_free(mv->model);
    scheduler_destroy(&mv->sched);
    stats_model_destroy(&mv->stats);
    config_model_free(&mv->cfg);
    pthread_mutex_destroy(&mv->ref_lock);
    pthread_cond_destroy(&mv->ref_zero);
    free(mv->name);
    free(mv);
}

/* The GPUs this process sees (cinfer_cuda_device_count); 0 with the reason in `why` when there are none. */
static int visible_gpus(char *why, size_t n) {
    int count = 0;
    if (cinfer_cuda_device_count(&count) != CINFER_OK) {
        snprintf(why, n, "%s", cinfer_last_error());
        return 0;
    }
    if (count <= 0) snprintf(why, n, "the CUDA driver reports no device");
    return count > 0 ? count : 0;
}

/* Resolves the config's instance groups to devices, as Triton does: KIND_CPU groups give `count` CPU instances;
 * KIND_GPU groups give `count` instances on each listed GPU, or on every visible GPU when none is listed; KIND_AUTO
 * groups (and the default group, one instance, used when the config has none) follow --device: "auto" means every
 * visible GPU, else the CPU; "cuda" every visible GPU; "cuda:N" GPU N; "cpu" the CPU. Resolved groups are written
 * back into the config (kind CPU/GPU and the GPU list), so GET .../config shows where instances went. */
static int plan_instances(model_version *mv, const model_load_options *opt, serve_error *e) {
    model_config *cfg = &mv->cfg;
    if (!cfg->num_groups) { /* the default group, printed as Triton's auto-completion does */
        if (!(cfg->groups = calloc(1, sizeof *cfg->groups))) return serve_fail(e, SERVE_INTERNAL, "out of memory");
        cfg->num_groups = 1;
        cfg->groups[0].count = 1;
        cfg->groups[0].kind = CONFIG_KIND_AUTO;
    }
    char why[512] = "";
    int ngpu = -1; /* asked lazily: CPU-only configs never touch CUDA */
    size_t total = 0;
    for (size_t g = 0; g < cfg->num_groups; g++) {
        config_instance_group *grp = &cfg->groups[g];
        const char *dev = opt->device && opt->device[0] ? opt->device : "auto";
        if (grp->kind == CONFIG_KIND_AUTO && !grp->num_gpus) {
            if (!strcmp(dev, "cpu")) {
                grp->kind = CONFIG_KIND_CPU;
            } else if (!strncmp(dev, "cuda:", 5)) {
                grp->kind = CONFIG_KIND_GPU;
                if (!(grp->gpus = malloc(sizeof *grp->gpus))) return serve_fail(e, SERVE_INTERNAL, "out of memory");
                grp->gpus[0] = atoi(dev + 5);
                grp->num_gpus = 1;
            } else {
                if (ngpu < 0) ngpu = visible_gpus(why, sizeof why);
                if (!strcmp(dev, "cuda") && !ngpu)
                    return serve_fail(e, SERVE_BAD_REQUEST, "model '%s': --device cuda but no GPU is visible: %s", mv->name, why);
                grp->kind = ngpu ? CONFIG_KIND_GPU : CONFIG_KIND_CPU;
            }
        } else if (grp->kind == CONFIG_KIND_AUTO) {
            grp->kind = CONFIG_KIND_GPU; /* gpus listed */
        }
        if (grp->kind == CONFIG_KIND_GPU && !grp->num_gpus) {
            if (ngpu < 0) ngpu = visible_gpus(why, sizeof why);
            if (!ngpu)
                return serve_fail(e, SERVE_BAD_REQUEST, "model '%s' instance_group %zu is KIND_GPU but no GPU is visible: %s "
                                                        "(use KIND_CPU or KIND_AUTO)", mv->name, g, why);
            if (!(grp->gpus = malloc((size_t)ngpu * sizeof *grp->gpus))) return serve_fail(e, SERVE_INTERNAL, "out of memory");
            for (int d = 0; d < ngpu; d++) grp->gpus[d] = d;
            grp->num_gpus = (size_t)ngpu;
        }
        total += (size_t)grp->count * (grp->kind == CONFIG_KIND_GPU ? grp->num_gpus : 1);
    }
    mv->instances = calloc(total, sizeof *mv->instances);
    if (!mv->instances) return serve_fail(e, SERVE_INTERNAL, "out of memory");
    size_t k = 0;
    for (size_t g = 0; g < cfg->num_groups; g++) {
        const config_instance_group *grp = &cfg->groups[g];
        size_t ndev = grp->kind == CONFIG_KIND_GPU ? grp->num_gpus : 1;
        size_t c = 0;
        for (size_t d = 0; d < ndev; d++)
            for (int n = 0; n < grp->count; n++, c++) {
                model_instance *inst = &mv->instances[k++];
                pthread_mutex_init(&inst->cap_lock, NULL);
                inst->kind = grp->kind;
                if (grp->name) snprintf(inst->name, sizeof inst->name, "%s_%zu", grp->name, c);
                else snprintf(inst->name, sizeof inst->name, "%s_%zu_%zu", mv->name, g, c);
                if (grp->kind == CONFIG_KIND_CPU) snprintf(inst->device, sizeof inst->device, "cpu");
                else snprintf(inst->device, sizeof inst->device, "cuda:%d", grp->gpus[d]);
            }
    }
    mv->num_instances = total;
    return 0;
}

/* Lanes from `from` on do not run: their sessions (and the memory a failed warm-up left cached) and gather
 * helpers go now; their scheduler entries stay, never parked, so no batch goes to them. */
static void drop_lanes(model_instance *inst, size_t from) {
    for (size_t l = from; l < inst->num_lanes; l++) {
        cinfer_session_free(inst->lanes[l].session);
        inst->lanes[l].session = NULL;
        copy_pool_destroy(inst->lanes[l].scratch.pool);
        inst->lanes[l].scratch.pool = NULL;
    }
    if (instance_gpu(inst) >= 0) cinfer_cuda_empty_cache(instance_gpu(inst));
}

/* Gives every instance its lanes (MODEL_PARAM_LANES, else MODEL_GPU_LANES on a GPU and 1 on the CPU) and fills
 * *lane_group (the instance of each scheduler entry, malloc'd) and *num_lanes (their count). */
static int plan_lanes(model_version *mv, size_t **lane_group, size_t *num_lanes, serve_error *e) {
    long given = 0;
    for (size_t i = 0; i < mv->cfg.num_params; i++) {
        if (strcmp(mv->cfg.params[i].key, MODEL_PARAM_LANES) != 0) continue;
        const char *v = mv->cfg.params[i].value;
        char *end;
        given = strtol(v, &end, 10);
        if (end == v || *end || given < 1 || given > MODEL_MAX_LANES)
            return serve_fail(e, SERVE_BAD_REQUEST, "model '%s' parameter '%s' is '%s': give the batches each instance runs at "
                                                    "once, from 1 to %d", mv->name, MODEL_PARAM_LANES, v, MODEL_MAX_LANES);
    }
    size_t total = 0;
    for (size_t i = 0; i < mv->num_instances; i++) {
        model_instance *inst = &mv->instances[i];
        size_t n = given ? (size_t)given : instance_gpu(inst) >= 0 ? MODEL_GPU_LANES : 1;
        if (!(inst->lanes = calloc(n, sizeof *inst->lanes))) return serve_fail(e, SERVE_INTERNAL, "out of memory");
        inst->num_lanes = n;
        total += inst->num_lanes;
    }
    if (!(*lane_group = malloc(total * sizeof **lane_group))) return serve_fail(e, SERVE_INTERNAL, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < mv->num_instances; i++) {
        model_instance *inst = &mv->instances[i];
        for (size_t l = 0; l < inst->num_lanes; l++, k++) {
            model_lane *lane = &inst->lanes[l];
            lane->inst = inst;
            lane->sched_index = k;
            lane->scratch.pinned = instance_gpu(inst) >= 0; /* batches gathered into page-locked memory */
            lane->scratch.device = instance_gpu(inst);
            lane->output_device = instance_gpu(inst); /* and its outputs come back into page-locked memory */
            /* a GPU lane's gather (tens of MB for an image batch) is split over helpers; without them it copies alone */
            if (instance_gpu(inst) >= 0) lane->scratch.pool = copy_pool_create(MODEL_GATHER_HELPERS);
            (*lane_group)[k] = i;
        }
    }
    *num_lanes = total;
    return 0;
}

/* CINFER_SERVE_TEST_SLOW_INSTANCE=<model>:<index>:<ms>[,...] (test-only): instance <index> of <model> sleeps
 * <ms> after every execution, so the scheduler's load balancing can be tested. Read at load. */
static void apply_test_slowdown(model_version *mv) {
    const char *env = getenv("CINFER_SERVE_TEST_SLOW_INSTANCE");
    if (!env || !env[0]) return;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", env);
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *c2 = strrchr(item, ':');
        if (!c2) continue;
        *c2 = 0;
        char *c1 = strrchr(item, ':');
        if (!c1) continue;
        *c1 = 0;
        unsigned long idx = strtoul(c1 + 1, NULL, 10), ms = strtoul(c2 + 1, NULL, 10);
        if (strcmp(item, mv->name) != 0 || idx >= mv->num_instances) continue;
        mv->instances[idx].test_delay_ms = (unsigned)(ms > 60000 ? 60000 : ms);
        log_warn("model '%s' instance %lu (%s) is slowed down by %lu ms per execution (CINFER_SERVE_TEST_SLOW_INSTANCE, "
                 "for tests only)", mv->name, idx, mv->instances[idx].name, ms);
    }
}

/* The session options of the model's instances: threads, the server's --precision, Triton's optimization { cuda {
 * graphs: false } }, then every config parameter MODEL_PARAM_SESSION_PREFIX + a key the engine lists
 * (cinfer_session_option_info; for a prefix key such as dim., the prefix and a name: cinfer_dim.seq), which win.
 * The engine alone checks the values; other cinfer_* parameters are the server's own or ignored. Returns the count. */
static size_t session_options(const model_version *mv, const model_load_options *opt, char *threads, size_t threads_len,
                              const char **keys, const char **vals) {
    size_t n = 0;
    if (opt->threads > 0) {
        snprintf(threads, threads_len, "%d", opt->threads);
        keys[n] = "threads";
        vals[n++] = threads;
    }
    if (opt->precision) {
        keys[n] = "precision";
        vals[n++] = opt->precision;
    }
    if (mv->cfg.cuda_graphs_given && !mv->cfg.cuda_graphs) { /* Triton's optimization { cuda { graphs: false } } */
        keys[n] = "cuda_graphs";
        vals[n++] = "0";
    }
    size_t prefix_len = strlen(MODEL_PARAM_SESSION_PREFIX);
    for (size_t i = 0; i < mv->cfg.num_params; i++) {
        if (strncmp(mv->cfg.params[i].key, MODEL_PARAM_SESSION_PREFIX, prefix_len) != 0) continue;
        const char *key = mv->cfg.params[i].key + prefix_len;
        bool listed = false;
        for (size_t o = 0; o < cinfer_num_session_options() && !listed; o++) {
            cinfer_option_info info;
            if (cinfer_session_option_info(o, &info) != CINFER_OK) continue;
            size_t len = strlen(info.key);
            listed = info.is_prefix ? strncmp(key, info.key, len) == 0 && key[len] : strcmp(key, info.key) == 0;
        }
        if (!listed) continue;
        size_t j = 0;
        while (j < n && strcmp(keys[j], key) != 0) j++;
        if (j == n && n == MODEL_MAX_SESSION_OPTIONS - 1) break; /* one slot stays for max_batch (probe) */
        keys[j] = key;
        vals[j] = mv->cfg.params[i].value;
        if (j == n) n++;
    }
    return n;
}

/* --probe-max-batch: for each GPU instance of a batching model, the largest batch B in 1..max_batch_size for which
 * a session with option max_batch=B can be created on its device (the engine's capacity check: weights plus a
 * run's activations and io at batch B leave 20% of the device's memory, or its limit, free). Binary search; the
 * result is logged, shown in the statistics (instance_stats[].probed_max_batch) and becomes the instance's batch
 * cap when lower than the policy's max. CPU instances are not probed (host memory is not planned). */
static void probe_max_batch(model_version *mv, const model_load_options *opt) {
    if (mv->cfg.max_batch_size <= 0) {
        log_info("model '%s': --probe-max-batch skipped: the model does not batch (max_batch_size 0)", mv->name);
        return;
    }
    char threads[16], bs[24];
    const char *keys[MODEL_MAX_SESSION_OPTIONS], *vals[MODEL_MAX_SESSION_OPTIONS];
    size_t num_options = session_options(mv, opt, threads, sizeof threads, keys, vals);
    keys[num_options] = "max_batch";
    vals[num_options++] = bs;
    for (size_t i = 0; i < mv->num_instances; i++) {
        model_instance *inst = &mv->instances[i];
        if (instance_gpu(inst) < 0) {
            log_info("model '%s' instance %s (%s): --probe-max-batch skipped: CPU instances are not probed (host memory "
                     "is not planned)", mv->name, inst->name, inst->device);
            continue;
        }
        int64_t lo = 0, hi = mv->cfg.max_batch_size; /* lo fits (0: nothing known to fit), hi + 1 does not */
        char last[512] = "";
        while (lo < hi) {
            int64_t mid = lo + (hi - lo + 1) / 2;
            /* the instance's lanes run a batch each at once: their activations together, the weights once (shared) */
            snprintf(bs, sizeof bs, "%" PRId64, mid * (int64_t)inst->lanes_running); /* >= 1 once loaded */
            cinfer_session *probe = NULL;
            if (cinfer_session_create(mv->model, inst->device, keys, vals, num_options, &probe) == CINFER_OK) {
                lo = mid;
            } else {
                hi = mid - 1;
                snprintf(last, sizeof last, "%s", cinfer_last_error());
            }
            cinfer_session_free(probe);
        }
        inst->probed_max_batch = lo;
        if (lo == 0) {
            log_warn("model '%s' instance %s (%s): --probe-max-batch found no batch that fits with 20%% headroom: %s",
                     mv->name, inst->name, inst->device, last);
            continue;
        }
        log_info("model '%s' instance %s (%s): --probe-max-batch: the largest batch that fits with 20%% headroom is %" PRId64
                 " (max_batch_size %d; per lane, %zu lane%s running at once)%s%s", mv->name, inst->name, inst->device, lo,
                 mv->cfg.max_batch_size, inst->lanes_running, inst->lanes_running == 1 ? "" : "s",
                 last[0] ? "; the next size up: " : "", last);
        if (lo < mv->sched.policy.max_batch) {
            pthread_mutex_lock(&inst->cap_lock);
            set_cap_locked(inst, lo);
            pthread_mutex_unlock(&inst->cap_lock);
        }
    }
}

static void join_workers(model_version *mv) {
    for (size_t i = 0; i < mv->num_instances; i++)
        for (size_t l = 0; l < mv->instances[i].num_lanes; l++)
            if (mv->instances[i].lanes[l].started) pthread_join(mv->instances[i].lanes[l].thread, NULL);
}

int model_version_load(const char *name, int64_t version, const char *path, model_config *cfg,
                       const model_load_options *opt, model_version **out, serve_error *e) {
    *out = NULL;
    model_version *mv = calloc(1, sizeof *mv);
    if (!mv) {
        config_model_free(cfg);
        return serve_fail(e, SERVE_INTERNAL, "out of memory");
    }
    mv->cfg = *cfg;
    memset(cfg, 0, sizeof *cfg);
    pthread_mutex_init(&mv->ref_lock, NULL);
    pthread_cond_init(&mv->ref_zero, NULL);
    atomic_init(&mv->refs, 1);
    mv->version = version;
    snprintf(mv->version_str, sizeof mv->version_str, "%" PRId64, version);
    mv->name = strdup(name);
    if (!mv->name) {
        serve_fail(e, SERVE_INTERNAL, "out of memory");
        goto err;
    }
    if (cinfer_model_load(path, &mv->model) != CINFER_OK) {
        serve_fail(e, SERVE_BAD_REQUEST, "%s", cinfer_last_error());
        goto err;
    }
    char note[512], cerr[1024];
    if (config_model_complete(&mv->cfg, mv->model, opt->default_max_batch, note, sizeof note, cerr, sizeof cerr) != 0) {
        serve_fail(e, SERVE_BAD_REQUEST, "%s", cerr);
        goto err;
    }
    if (note[0]) log_info("model '%s' version %" PRId64 ": %s", name, version, note);
    cinfer_model_stats ms;
    if (cinfer_model_get_stats(mv->model, &ms) == CINFER_OK) mv->memory_bytes = ms.parameter_bytes;
    if (stats_model_init(&mv->stats, mv->cfg.max_batch_size) != 0) {
        serve_fail(e, SERVE_INTERNAL, "out of memory");
        goto err;
    }
    if (plan_instances(mv, opt, e) != 0) goto err;
    size_t *lane_group = NULL, num_lanes = 0;
    if (plan_lanes(mv, &lane_group, &num_lanes, e) != 0) {
        free(lane_group);
        goto err;
    }
    int sched_rc = scheduler_init(&mv->sched, &mv->cfg, num_lanes, lane_group, mv->name, cerr, sizeof cerr);
    free(lane_group);
    if (sched_rc != 0) {
        serve_fail(e, SERVE_BAD_REQUEST, "%s", cerr);
        goto err;
    }
    for (size_t i = 0; i < mv->num_instances; i++) {
        model_instance *inst = &mv->instances[i];
        inst->owner = mv;
        for (size_t l = 0; l < inst->num_lanes; l++) {
            model_lane *lane = &inst->lanes[l];
            scheduler_set_gpu(&mv->sched, lane->sched_index, instance_gpu(inst) >= 0);
            lane->inputs = calloc(mv->cfg.num_inputs ? mv->cfg.num_inputs : 1, sizeof *lane->inputs);
            if (!lane->inputs || batcher_batch_init(&lane->batch, &mv->sched.policy) != 0) {
                serve_fail(e, SERVE_INTERNAL, "out of memory");
                goto err;
            }
        }
    }
    apply_test_slowdown(mv);
    mv->oom_recover_after = MODEL_OOM_RECOVER_AFTER;
    for (size_t i = 0; i < mv->cfg.num_params; i++) {
        if (strcmp(mv->cfg.params[i].key, MODEL_PARAM_OOM_RECOVER_AFTER) != 0) continue;
        char *end;
        unsigned long long v = strtoull(mv->cfg.params[i].value, &end, 10);
        if (*end || v < 1 || v > 1000000000ull || mv->cfg.params[i].value[0] == '-') {
            serve_fail(e, SERVE_BAD_REQUEST, "model '%s' parameter '%s' is '%s': give a count of executions from 1 to 1000000000",
                       name, MODEL_PARAM_OOM_RECOVER_AFTER, mv->cfg.params[i].value);
            goto err;
        }
        mv->oom_recover_after = v;
    }
    if (faults_enabled())
        log_warn("model '%s': fault injection is on (%s=%s): executions may fail on purpose; for tests only", name, FAULTS_ENV,
                 getenv(FAULTS_ENV));
    if (faults_engine_enabled())
        log_warn("model '%s': the engine's fault points are on (CINFER_FAULT_ALLOC=%s, CINFER_FAULT_COPY=%s): allocations "
                 "and copies may fail on purpose; for tests only", name, getenv("CINFER_FAULT_ALLOC") ? getenv("CINFER_FAULT_ALLOC") : "",
                 getenv("CINFER_FAULT_COPY") ? getenv("CINFER_FAULT_COPY") : "");
    char threads[16];
    const char *keys[MODEL_MAX_SESSION_OPTIONS], *vals[MODEL_MAX_SESSION_OPTIONS];
    size_t num_options = session_options(mv, opt, threads, sizeof threads, keys, vals);
    for (size_t i = 0; i < mv->num_instances; i++) {
        model_instance *inst = &mv->instances[i];
        for (size_t l = 0; l < inst->num_lanes; l++) {
            model_lane *lane = &inst->lanes[l];
            cinfer_status st = cinfer_session_create(mv->model, inst->device, keys, vals, num_options, &lane->session);
            for (size_t w = 0; st == CINFER_OK && w < mv->cfg.num_warmups; w++)
                if (warmup_run(mv, lane, &mv->cfg.warmups[w], e, &st) != 0 && st == CINFER_OK) goto err;
            if (st == CINFER_ERR_OUT_OF_MEMORY && l > 0) { /* the instance runs with the lanes that fit */
                log_warn("model '%s' instance %s (%s): lane %zu of %zu does not fit (%s); the instance runs %zu lane%s",
                         mv->name, inst->name, inst->device, l + 1, inst->num_lanes, cinfer_last_error(), l, l == 1 ? "" : "s");
                drop_lanes(inst, l);
                break;
            }
            if (st != CINFER_OK) {
                if (!e->msg[0])
                    serve_fail(e, SERVE_BAD_REQUEST, "instance %s on device '%s': %s", inst->name, inst->device,
                               cinfer_last_error());
                goto err;
            }
            inst->lanes_running = l + 1;
        }
    }
    if (opt->probe_max_batch) probe_max_batch(mv, opt);
    for (size_t i = 0; i < mv->num_instances; i++)
        for (size_t l = 0; l < mv->instances[i].lanes_running; l++) {
            model_lane *lane = &mv->instances[i].lanes[l];
            if (pthread_create(&lane->thread, NULL, worker_main, lane) != 0) {
                serve_fail(e, SERVE_INTERNAL, "cannot start the worker thread of instance %s lane %zu", mv->instances[i].name, l);
                goto err;
            }
            lane->started = 1;
        }
    *out = mv;
    return 0;
err:
    if (mv->sched.initialised) scheduler_close(&mv->sched);
    join_workers(mv);
    free_version(mv);
    return -1;
}

void model_version_retire(model_version *mv) {
    if (!mv) return;
    scheduler_close(&mv->sched);
    join_workers(mv);
    model_version_unref(mv);
    pthread_mutex_lock(&mv->ref_lock);
    while (atomic_load(&mv->refs) > 0) pthread_cond_wait(&mv->ref_zero, &mv->ref_lock);
    pthread_mutex_unlock(&mv->ref_lock);
    free_version(mv);
}
